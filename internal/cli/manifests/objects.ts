// The Kubernetes objects that install meshcni, built from chart values. manifests/templates/
// renders the same objects with Helm; test/cli/helm.test.ts holds the two to equality. Pure.
import { createHash } from "node:crypto";
import { DEFAULT_AGENT_SOCKET, DEFAULT_STATE_DIR } from "../../wire/protocol.ts";
import { DEFAULT_NETNS_DIR } from "../../wire/state.ts";
import { entryFromOptions, NAMES, renderEntryJson } from "../../config/entry.ts";
import { HOST_CHECK_PATHS } from "../../agent/install/hostcheck/check.ts";
import { APP_VERSION, entryOptions, resolveDirs, resolveImage, type Values } from "./values.ts";

export type K8sObject = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string> };
} & Record<string, unknown>;

/** Where things live inside the meshcni image and the DaemonSet's container. */
export const CONTAINER = {
  agent: "/opt/meshcni/meshcni-installer",
  plugin: "/opt/meshcni/meshcni",
  /**
   * Where the host paths the host check reads (HOST_CHECK_PATHS) are mounted, read-only, each at
   * its own path under it (the agent's --host-root default). Never the host's whole /.
   */
  hostRoot: "/host/root",
  hostNetDir: "/host/etc/cni/net.d",
  hostBinDir: "/host/opt/cni/bin",
  configDir: "/etc/meshcni",
  configKey: "plugin-config.json",
  /** The agent's folder (socket, records): the host's, mounted at the same path. */
  stateDir: DEFAULT_STATE_DIR,
  agentSocket: DEFAULT_AGENT_SOCKET,
  /** The host's network namespace folder, read-only at the same path: where the agent looks for CNI_NETNS. */
  netnsDir: DEFAULT_NETNS_DIR,
} as const;

/** Long enough for the agent's look at its DaemonSet on SIGTERM (at most 10 s) and an undo. */
export const TERMINATION_GRACE_SECONDS = 30;

export function commonLabels(): Record<string, string> {
  return {
    "app.kubernetes.io/name": "meshcni",
    "app.kubernetes.io/part-of": "meshcni",
    "app.kubernetes.io/version": APP_VERSION,
    [NAMES.resourceLabel]: "true",
  };
}

export const SELECTOR = { "app.kubernetes.io/name": "meshcni", "app.kubernetes.io/component": "node" } as const;

export function buildNamespace(values: Values): K8sObject {
  return {
    apiVersion: "v1",
    kind: "Namespace",
    metadata: {
      name: values.namespace,
      labels: {
        ...commonLabels(),
        // hostPath volumes are outside the baseline Pod Security Standard.
        "pod-security.kubernetes.io/enforce": "privileged",
        // Neither mesh injects a proxy into meshcni's own pods.
        "config.linkerd.io/admission-webhooks": "disabled",
        "istio-injection": "disabled",
      },
    },
  };
}

export function buildServiceAccount(values: Values): K8sObject {
  return {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: { name: NAMES.serviceAccount, namespace: values.namespace, labels: commonLabels() },
  };
}

/**
 * The plugin's own identity: no pod runs as it (no token is mounted anywhere); the agent requests
 * its tokens (TokenRequest) and writes them into the plugin's kubeconfig on the host.
 */
export function buildPluginServiceAccount(values: Values): K8sObject {
  return {
    apiVersion: "v1",
    kind: "ServiceAccount",
    metadata: { name: NAMES.pluginServiceAccount, namespace: values.namespace, labels: commonLabels() },
    automountServiceAccountToken: false,
  };
}

/**
 * The agent watches its node's pods and all namespaces and, on SIGTERM, reads its node to see
 * whether its DaemonSet still runs there. Repair posts an Event on a pod when it writes its rules
 * back (--repair in-place), before it evicts it (--repair evict, and in-place for a pod whose
 * namespace the agent cannot reach: create on pods/eviction) or deletes it (--repair delete:
 * delete on pods); --repair off needs neither. With a startup taint it patches its node. None of this leaves its
 * pod: the plugin's kubeconfig carries a token of the plugin's own account (buildPluginClusterRole).
 */
export function buildClusterRole(values: Values): K8sObject {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRole",
    metadata: { name: NAMES.clusterRole, labels: commonLabels() },
    rules: [
      { apiGroups: [""], resources: ["pods", "namespaces"], verbs: ["get", "list", "watch"] },
      { apiGroups: [""], resources: ["nodes"], verbs: values.startupTaint ? ["get", "patch"] : ["get"] },
      ...(values.repair === "evict" || values.repair === "in-place"
        ? [{ apiGroups: [""], resources: ["pods/eviction"], verbs: ["create"] }]
        : []),
      ...(values.repair === "delete" ? [{ apiGroups: [""], resources: ["pods"], verbs: ["delete"] }] : []),
      ...(values.repair !== "off" ? [{ apiGroups: [""], resources: ["events"], verbs: ["create"] }] : []),
    ],
  };
}

export function buildClusterRoleBinding(values: Values): K8sObject {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRoleBinding",
    metadata: { name: NAMES.clusterRole, labels: commonLabels() },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: NAMES.clusterRole },
    subjects: [{ kind: "ServiceAccount", name: NAMES.serviceAccount, namespace: values.namespace }],
  };
}

/**
 * What the plugin's token (on every node's disk) may do: read a pod and its namespace when the
 * agent does not answer, and the Service `kubernetes` (the API server's ports, for Linkerd's
 * control-plane pods). Nothing else: no list, no watch, no write.
 */
export function buildPluginClusterRole(_values: Values): K8sObject {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRole",
    metadata: { name: NAMES.pluginClusterRole, labels: commonLabels() },
    rules: [
      { apiGroups: [""], resources: ["pods", "namespaces"], verbs: ["get"] },
      { apiGroups: [""], resources: ["services"], resourceNames: ["kubernetes"], verbs: ["get"] },
    ],
  };
}

export function buildPluginClusterRoleBinding(values: Values): K8sObject {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "ClusterRoleBinding",
    metadata: { name: NAMES.pluginClusterRole, labels: commonLabels() },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: NAMES.pluginClusterRole },
    subjects: [{ kind: "ServiceAccount", name: NAMES.pluginServiceAccount, namespace: values.namespace }],
  };
}

/**
 * On SIGTERM the agent reads its own DaemonSet: gone or being deleted means undo. It requests
 * tokens of the plugin's service account (and of no other) for the plugin's kubeconfig.
 */
export function buildRole(values: Values): K8sObject {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "Role",
    metadata: { name: NAMES.role, namespace: values.namespace, labels: commonLabels() },
    rules: [
      { apiGroups: ["apps"], resources: ["daemonsets"], resourceNames: [NAMES.daemonSet], verbs: ["get"] },
      {
        apiGroups: [""],
        resources: ["serviceaccounts/token"],
        resourceNames: [NAMES.pluginServiceAccount],
        verbs: ["create"],
      },
    ],
  };
}

export function buildRoleBinding(values: Values): K8sObject {
  return {
    apiVersion: "rbac.authorization.k8s.io/v1",
    kind: "RoleBinding",
    metadata: { name: NAMES.role, namespace: values.namespace, labels: commonLabels() },
    roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: NAMES.role },
    subjects: [{ kind: "ServiceAccount", name: NAMES.serviceAccount, namespace: values.namespace }],
  };
}

/** The plugin's conflist entry, as the ConfigMap carries it. */
export function renderConfigJson(values: Values): string {
  return renderEntryJson(entryFromOptions(entryOptions(values)));
}

export function buildConfigMap(values: Values): K8sObject {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: NAMES.configMap, namespace: values.namespace, labels: commonLabels() },
    data: { [CONTAINER.configKey]: renderConfigJson(values) },
  };
}

/** The agent's folder switches (see CONTRACT.md). */
function agentDirArgs(values: Values): string[] {
  const args = [
    "--host-net-dir",
    CONTAINER.hostNetDir,
    "--host-bin-dir",
    CONTAINER.hostBinDir,
    "--dest-net-dir",
    resolveDirs(values).cniConfDir,
    "--dest-bin-dir",
    resolveDirs(values).cniBinDir,
  ];
  if (values.cniConfFileName) args.push("--conf-name", values.cniConfFileName);
  return args;
}

/** A host path's volume name: host-usr, host-lib, host-lib64, host-etc-ld-so-cache. */
const hostCheckVolumeName = (path: string) => `host${path.replace(/[/.]/g, "-")}`;

/**
 * The host paths the host check reads (internal/agent/install/hostcheck: can the host run the plugin, its ELF
 * loader and libraries as the host's loader finds them), nothing else of the host: /usr, /lib
 * and /lib64 hold the loader and the libraries (or are links there, which the bind follows),
 * /etc/ld.so.cache is where glibc's loader looks first. Never / (read-only is not recursive:
 * /dev/shm, /proc/sys, root's 0600 files and root's sockets would come with it), /etc, /var or
 * /proc. A path a host lacks (/lib64 on arm64, ld.so.cache on musl) is created by kubelet, empty
 * (*OrCreate), so the pod starts on every node: an empty folder holds nothing the loader finds,
 * and glibc's loader takes an empty cache for none (musl never reads it).
 */
function hostCheckVolumes(): Record<string, unknown>[] {
  return HOST_CHECK_PATHS.map((path) => ({
    name: hostCheckVolumeName(path),
    hostPath: { path, type: path.endsWith(".cache") ? "FileOrCreate" : "DirectoryOrCreate" },
  }));
}

/**
 * Each read-only at its own path under /host/root. recursiveReadOnly (Kubernetes 1.30+) also
 * makes mounts below them read-only where the runtime can (IfPossible; Enabled refuses to start
 * where it cannot); it needs mountPropagation None, so none is set (nothing is mounted below
 * these folders on ordinary hosts).
 */
function hostCheckMounts(values: Values): Record<string, unknown>[] {
  const rro = values.hostMounts.recursiveReadOnly;
  return HOST_CHECK_PATHS.map((path) => ({
    name: hostCheckVolumeName(path),
    mountPath: `${CONTAINER.hostRoot}${path}`,
    readOnly: true,
    ...(rro ? { recursiveReadOnly: rro } : {}),
  }));
}

export function buildDaemonSet(values: Values): K8sObject {
  const tolerations = [
    ...values.tolerations,
    ...(values.startupTaint ? [{ key: values.startupTaint, operator: "Exists" }] : []),
  ];
  const dirs = resolveDirs(values);
  const labels = { ...commonLabels(), "app.kubernetes.io/component": "node" };
  const securityContext: Record<string, unknown> = {
    // The host's CNI folders belong to root: uid 0 writes them as their owner, with every
    // capability dropped (no CAP_DAC_OVERRIDE) but the two applying rules needs, and only those.
    runAsUser: 0,
    runAsGroup: 0,
    runAsNonRoot: false,
    privileged: false,
    allowPrivilegeEscalation: false,
    readOnlyRootFilesystem: true,
    capabilities: values.agentApplies
      ? {
          drop: ["ALL"],
          // The agent applies meshed pods' rules in their network namespaces (internal/agent/apply/):
          // - NET_ADMIN: nf_tables' netlink messages (a listing too) and iptables' setsockopt
          //   need it in the pod's namespace;
          // - SYS_ADMIN: setns(2) into a pod's network namespace, which the host's user namespace
          //   owns (the runtime's default seccomp profile allows setns only with it).
          // Without them (agentApplies false) the agent says so and the plugin applies.
          add: ["NET_ADMIN", "SYS_ADMIN"],
        }
      : { drop: ["ALL"] },
  };
  if (values.platform === "openshift") securityContext.seLinuxOptions = { type: "spc_t" };
  const podSpec: Record<string, unknown> = {
    serviceAccountName: NAMES.serviceAccount,
    ...(values.imagePullSecrets.length ? { imagePullSecrets: values.imagePullSecrets } : {}),
    ...(Object.keys(values.nodeSelector).length ? { nodeSelector: values.nodeSelector } : {}),
    ...(Object.keys(values.affinity).length ? { affinity: values.affinity } : {}),
    // The startup taint is tolerated whatever `tolerations` says: the agent is what removes it.
    ...(tolerations.length ? { tolerations } : {}),
    terminationGracePeriodSeconds: TERMINATION_GRACE_SECONDS,
    securityContext: { seccompProfile: { type: "RuntimeDefault" } },
    containers: [
      {
        name: "install-cni",
        image: resolveImage(values),
        imagePullPolicy: values.pullPolicy,
        command: [CONTAINER.agent],
        args: [
          ...agentDirArgs(values),
          "--plugin-binary",
          CONTAINER.plugin,
          "--plugin-config",
          `${CONTAINER.configDir}/${CONTAINER.configKey}`,
          "--agent-socket",
          CONTAINER.agentSocket,
          "--state-dir",
          CONTAINER.stateDir,
          "--health-port",
          String(values.healthPort),
          // One argument each: a bare `off` is a boolean to YAML 1.1 readers (kubectl's).
          `--repair=${values.repair}`,
          ...(values.agentApplies ? [] : ["--agent-applies=false"]),
          ...(values.startupTaint ? [`--startup-taint=${values.startupTaint}`] : []),
        ],
        env: [
          { name: "POD_NAMESPACE", valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } } },
          { name: "NODE_NAME", valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } } },
        ],
        ports: [{ name: "health", containerPort: values.healthPort, protocol: "TCP" }],
        livenessProbe: {
          httpGet: { path: "/healthz", port: "health" },
          periodSeconds: 10,
          timeoutSeconds: 2,
          failureThreshold: 3,
        },
        readinessProbe: {
          httpGet: { path: "/readyz", port: "health" },
          periodSeconds: 5,
          timeoutSeconds: 2,
          failureThreshold: 2,
        },
        // No preStop: on SIGTERM the agent leaves everything in place unless its DaemonSet is
        // gone or being deleted, so a rollout or an eviction never unmeshes the node.
        ...(Object.keys(values.resources).length ? { resources: values.resources } : {}),
        securityContext,
        volumeMounts: [
          // Read-write, as the agent's folder below: the plugin binary and its kubeconfig go into the
          // host's CNI bin folder and config folder, and the agent chains its entry there.
          { name: "cni-bin-dir", mountPath: CONTAINER.hostBinDir },
          { name: "cni-net-dir", mountPath: CONTAINER.hostNetDir },
          // The plugin's conflist entry, from the ConfigMap.
          { name: "plugin-config", mountPath: CONTAINER.configDir, readOnly: true },
          // The agent's socket and the records (see the volume).
          { name: "agent-state", mountPath: CONTAINER.stateDir },
          // Pods' network namespaces are bind mounts the runtime makes there after the agent
          // started: HostToContainer shows them here. Read only: the agent looks (lstat, statfs)
          // and opens them to enter them (setns), which needs no write.
          { name: "host-netns", mountPath: CONTAINER.netnsDir, readOnly: true, mountPropagation: "HostToContainer" },
          { name: "tmp", mountPath: "/tmp" },
          ...hostCheckMounts(values),
        ],
      },
    ],
    volumes: [
      { name: "cni-bin-dir", hostPath: { path: dirs.cniBinDir, type: "DirectoryOrCreate" } },
      { name: "cni-net-dir", hostPath: { path: dirs.cniConfDir, type: "DirectoryOrCreate" } },
      { name: "plugin-config", configMap: { name: NAMES.configMap } },
      // The same path on the host: the plugin, run there, finds the socket and the records
      // where the conflist entry says.
      { name: "agent-state", hostPath: { path: CONTAINER.stateDir, type: "DirectoryOrCreate" } },
      // Made when missing (a node with no pod yet), as the runtime would make it.
      { name: "host-netns", hostPath: { path: CONTAINER.netnsDir, type: "DirectoryOrCreate" } },
      // A writable /tmp under the read-only root, the container's own.
      { name: "tmp", emptyDir: {} },
      ...hostCheckVolumes(),
    ],
  };
  if (values.priorityClassName) podSpec.priorityClassName = values.priorityClassName;
  return {
    apiVersion: "apps/v1",
    kind: "DaemonSet",
    metadata: { name: NAMES.daemonSet, namespace: values.namespace, labels },
    spec: {
      ...(values.revisionHistoryLimit !== null ? { revisionHistoryLimit: values.revisionHistoryLimit } : {}),
      selector: { matchLabels: { ...SELECTOR } },
      ...(Object.keys(values.updateStrategy).length ? { updateStrategy: values.updateStrategy } : {}),
      template: {
        metadata: {
          // podLabels win over commonLabels; neither may name meshcni's own (values.ts).
          labels: { ...values.commonLabels, ...values.podLabels, ...labels },
          annotations: {
            ...values.podAnnotations,
            // A changed configuration rolls the pods, which then install it.
            "meshcni.io/config-sha256": createHash("sha256").update(renderConfigJson(values)).digest("hex"),
            "linkerd.io/inject": "disabled",
            "sidecar.istio.io/inject": "false",
          },
        },
        spec: podSpec,
      },
    },
  };
}

/** Every object, in the order Helm installs them (and `kubectl apply` is happy with). */
export function buildManifests(values: Values): K8sObject[] {
  return withCommonLabels(values, [
    ...(values.createNamespace ? [buildNamespace(values)] : []),
    buildServiceAccount(values),
    buildPluginServiceAccount(values),
    buildConfigMap(values),
    buildClusterRole(values),
    buildPluginClusterRole(values),
    buildClusterRoleBinding(values),
    buildPluginClusterRoleBinding(values),
    buildRole(values),
    buildRoleBinding(values),
    buildDaemonSet(values),
  ]);
}

/** values.commonLabels on every object's labels (the chart's meshcni.labels does the same). */
function withCommonLabels(values: Values, objects: K8sObject[]): K8sObject[] {
  if (!Object.keys(values.commonLabels).length) return objects;
  return objects.map((o) => ({
    ...o,
    metadata: { ...o.metadata, labels: { ...values.commonLabels, ...o.metadata.labels } },
  }));
}
