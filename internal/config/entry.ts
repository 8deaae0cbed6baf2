// The plugin's entry in a host conflist, as meshcni-installer writes it and `meshcnictl
// install-cni` renders it into the ConfigMap. Pure.

/** Names shared by the plugin, the installer and the manifests. */
export const NAMES = {
  namespace: "meshcni",
  daemonSet: "meshcni-node",
  serviceAccount: "meshcni",
  configMap: "meshcni-config",
  clusterRole: "meshcni",
  kubeconfigFile: "ZZZ-meshcni-kubeconfig",
  /** Label on every object meshcnictl renders, for `kubectl apply --prune -l`. */
  resourceLabel: "meshcni.io/cni-resource",
} as const;

/** Pods of meshcni's own DaemonSet are named like this; the plugin never waits on the API for them. */
export const OWN_POD_PREFIX = `${NAMES.daemonSet}-`;

export type Mesh = "linkerd" | "istio";

/** The contract's default entry for a mesh. */
export function defaultPluginEntry(mesh: Mesh = "linkerd", destNetDir = "/etc/cni/net.d"): Record<string, unknown> {
  const entry: Record<string, unknown> = {
    type: "meshcni",
    name: "meshcni",
    log_level: "info",
    mesh,
    kubernetes: {
      kubeconfig: `${destNetDir.replace(/\/+$/, "")}/${NAMES.kubeconfigFile}`,
      exclude_namespaces: mesh === "istio" ? ["istio-system", "kube-system"] : [],
    },
    linkerd: {
      "incoming-proxy-port": 4143,
      "outgoing-proxy-port": 4140,
      "proxy-uid": 2102,
      "inbound-ports-to-ignore": ["4191", "4190"],
      "iptables-mode": "auto",
    },
    istio: {},
  };
  return entry;
}
