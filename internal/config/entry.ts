// The plugin's entry in a host conflist, as meshcni-installer writes it and `meshcnictl
// install-cni` (or the Helm chart) renders it into the ConfigMap. Pure.
import type { IptablesMode } from "../firewall/registry.ts";

/** Names shared by the plugin, the agent and the manifests. */
export const NAMES = {
  namespace: "meshcni",
  daemonSet: "meshcni-node",
  serviceAccount: "meshcni",
  configMap: "meshcni-config",
  clusterRole: "meshcni",
  /**
   * The Role (and its binding) in meshcni's namespace: the agent reads its own DaemonSet and
   * requests tokens of the plugin's service account.
   */
  role: "meshcni",
  /**
   * The plugin's own service account (in meshcni's namespace), whose token the agent requests
   * (TokenRequest API) and writes into the plugin's kubeconfig; its ClusterRole (and binding)
   * of the same name may only read pods, namespaces and the Service `kubernetes`.
   */
  pluginServiceAccount: "meshcni-plugin",
  pluginClusterRole: "meshcni-plugin",
  kubeconfigFile: "ZZZ-meshcni-kubeconfig",
  /** Label on every object meshcnictl renders, for `kubectl apply --prune -l`. */
  resourceLabel: "meshcni.io/cni-resource",
} as const;

/** Pods of meshcni's own DaemonSet are named like this; the plugin never waits on the API for them. */
export const OWN_POD_PREFIX = `${NAMES.daemonSet}-`;

export type Mesh = "linkerd" | "istio";
export const MESHES: readonly Mesh[] = ["linkerd", "istio"];

/** Linkerd's proxy admin and control ports, which linkerd-cni's chart always leaves alone inbound. */
export const LINKERD_ALWAYS_SKIPPED_INBOUND = ["4191", "4190"] as const;

/** What a mesh's redirect uses when nothing else is said (the plugin's schema defaults). */
export const MESH_DEFAULTS = {
  linkerd: { inboundPort: 4143, outboundPort: 4140, proxyUid: 2102, proxyGid: -1, excludeNamespaces: [] as string[] },
  istio: {
    inboundPort: 15006,
    outboundPort: 15001,
    proxyUid: 1337,
    proxyGid: 1337,
    excludeNamespaces: ["istio-system", "kube-system"],
  },
} as const;

/**
 * The settings an operator chooses (CLI flags, chart values). Absent means "the mesh's
 * default"; the entry then carries only what the contract lists plus what was chosen.
 */
export interface EntryOptions {
  mesh?: Mesh;
  logLevel?: string;
  /** The host's CNI config folder; the plugin's kubeconfig lives there. */
  destNetDir?: string;
  excludeNamespaces?: readonly string[];
  inboundPort?: number;
  outboundPort?: number;
  proxyUid?: number;
  proxyGid?: number;
  /** Linkerd only: added after the proxy's admin and control ports. */
  skipInboundPorts?: readonly string[];
  /** Linkerd only. */
  skipOutboundPorts?: readonly string[];
  /** Linkerd only: empty redirects every inbound port. */
  redirectPorts?: readonly number[];
  iptablesMode?: IptablesMode;
  /** Linkerd only (Istio follows the pod's addresses). */
  ipv6?: boolean;
  useWaitFlag?: boolean;
}

/**
 * The plugin's kubeconfig in a CNI config folder, the one definition: the path written into the
 * entry (the folder as the host sees it) and the file the agent writes (the same folder as
 * mounted in its container).
 */
export function kubeconfigPath(destNetDir = "/etc/cni/net.d"): string {
  return `${destNetDir.replace(/\/+$/, "")}/${NAMES.kubeconfigFile}`;
}

/**
 * The conflist entry for these settings. Both mesh sections are always there, so switching
 * `mesh` alone switches the redirect; the section of the other mesh keeps its defaults.
 */
export function entryFromOptions(o: EntryOptions = {}): Record<string, unknown> {
  const mesh = o.mesh ?? "linkerd";
  const linkerd: Record<string, unknown> = {
    "incoming-proxy-port": MESH_DEFAULTS.linkerd.inboundPort,
    "outgoing-proxy-port": MESH_DEFAULTS.linkerd.outboundPort,
    "proxy-uid": MESH_DEFAULTS.linkerd.proxyUid,
    "inbound-ports-to-ignore": [...LINKERD_ALWAYS_SKIPPED_INBOUND],
    "iptables-mode": "auto",
  };
  const istio: Record<string, unknown> = {};
  if (mesh === "linkerd") {
    if (o.inboundPort !== undefined) linkerd["incoming-proxy-port"] = o.inboundPort;
    if (o.outboundPort !== undefined) linkerd["outgoing-proxy-port"] = o.outboundPort;
    if (o.proxyUid !== undefined) linkerd["proxy-uid"] = o.proxyUid;
    if (o.proxyGid !== undefined && o.proxyGid >= 0) linkerd["proxy-gid"] = o.proxyGid;
    if (o.redirectPorts?.length) linkerd["ports-to-redirect"] = [...o.redirectPorts];
    if (o.skipInboundPorts?.length)
      linkerd["inbound-ports-to-ignore"] = [...LINKERD_ALWAYS_SKIPPED_INBOUND, ...o.skipInboundPorts];
    if (o.skipOutboundPorts?.length) linkerd["outbound-ports-to-ignore"] = [...o.skipOutboundPorts];
    if (o.useWaitFlag) linkerd["use-wait-flag"] = true;
    if (o.iptablesMode !== undefined) linkerd["iptables-mode"] = o.iptablesMode;
    if (o.ipv6) linkerd.ipv6 = true;
  } else {
    if (o.outboundPort !== undefined) istio["proxy-port"] = o.outboundPort;
    if (o.inboundPort !== undefined) istio["inbound-capture-port"] = o.inboundPort;
    if (o.proxyUid !== undefined) istio["proxy-uid"] = o.proxyUid;
    if (o.proxyGid !== undefined) istio["proxy-gid"] = o.proxyGid;
    if (o.useWaitFlag) istio["use-wait-flag"] = true;
    if (o.iptablesMode !== undefined && o.iptablesMode !== "auto") istio["iptables-mode"] = o.iptablesMode;
  }
  return {
    type: "meshcni",
    name: "meshcni",
    log_level: o.logLevel ?? "info",
    mesh,
    kubernetes: {
      kubeconfig: kubeconfigPath(o.destNetDir),
      exclude_namespaces: [...(o.excludeNamespaces ?? MESH_DEFAULTS[mesh].excludeNamespaces)],
    },
    linkerd,
    istio,
  };
}

/** The contract's default entry for a mesh. */
export function defaultPluginEntry(mesh: Mesh = "linkerd", destNetDir = "/etc/cni/net.d"): Record<string, unknown> {
  return entryFromOptions({ mesh, destNetDir });
}

function sortKeysDeep(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeysDeep);
  if (value !== null && typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value).sort()) out[k] = sortKeysDeep((value as Record<string, unknown>)[k]);
    return out;
  }
  return value;
}

/**
 * The entry as the ConfigMap carries it: keys sorted, two-space indent, `<`, `>` and `&`
 * escaped, which is byte for byte what Helm's `toPrettyJson` (Go's encoding/json) writes, so
 * that the chart and `meshcnictl install-cni` render the same text and the same checksum.
 */
export function renderEntryJson(entry: Record<string, unknown>): string {
  return JSON.stringify(sortKeysDeep(entry), null, 2)
    .replace(/</g, "\\u003c")
    .replace(/>/g, "\\u003e")
    .replace(/&/g, "\\u0026")
    .replace(/\u2028/g, "\\u2028")
    .replace(/\u2029/g, "\\u2029");
}
