// The settings the manifests are rendered from. They are the Helm chart's values (manifests/
// values.yaml holds the same defaults), and `meshcnictl install-cni` maps its flags onto them.
// Names follow the CLI flags, or Istio's chart where the meaning is the same (hub, tag,
// pullPolicy, logLevel, excludeNamespaces, cniBinDir, cniConfDir, cniConfFileName,
// podAnnotations) or Linkerd's (tolerations, nodeSelector, affinity, imagePullSecrets, podLabels,
// commonLabels, resources, updateStrategy, revisionHistoryLimit, priorityClassName). Pure.
import * as v from "valibot";
import pkg from "../../../package.json" with { type: "json" };
import { type EntryOptions, MESHES } from "../../config/entry.ts";
import { IPTABLES_MODES } from "../../firewall/registry.ts";
import { DNS_LABEL } from "../../kube/names.ts";
import { LOG_LEVELS } from "../../log/levels.ts";

/** The version of meshcni these manifests deploy (the chart's appVersion, the image's default tag). */
export const APP_VERSION: string = pkg.version;

export const DEFAULT_HUB = "ghcr.io/meshcni";
export const IMAGE_NAME = "meshcni";
export { LOG_LEVELS };
export const PULL_POLICIES = ["Always", "IfNotPresent", "Never"] as const;
/** A volume mount's recursiveReadOnly, or "" for none. */
export const RECURSIVE_READ_ONLY = ["", "IfPossible", "Enabled"] as const;
/** The agent's --repair modes the manifests render (its option parser takes the same). */
export const REPAIR_VALUES = ["evict", "delete", "off", "in-place"] as const;

/** Folders of hosted and packaged Kubernetes whose CNI setup is not the usual one. */
export const PLATFORMS = {
  gke: {
    cniBinDir: "/home/kubernetes/bin",
    cniConfDir: "/etc/cni/net.d",
    note: "GKE keeps CNI plugins in /home/kubernetes/bin",
  },
  openshift: {
    cniBinDir: "/var/lib/cni/bin",
    cniConfDir: "/var/run/multus/cni/net.d",
    note: "OpenShift with Multus; the container runs with SELinux type spc_t to write the host folders",
  },
  k3s: {
    cniBinDir: "/var/lib/rancher/k3s/data/cni",
    cniConfDir: "/var/lib/rancher/k3s/agent/etc/cni/net.d",
    note: "k3s keeps its CNI folders under /var/lib/rancher/k3s",
  },
} as const;
export type Platform = keyof typeof PLATFORMS;
export const PLATFORM_NAMES = Object.keys(PLATFORMS) as Platform[];
export const DEFAULT_DIRS = { cniBinDir: "/opt/cni/bin", cniConfDir: "/etc/cni/net.d" } as const;

const Port = v.pipe(
  v.number(),
  v.integer("must be a whole number"),
  v.minValue(1, "must be a port, 1-65535"),
  v.maxValue(65535, "must be a port, 1-65535"),
);
const Id = v.pipe(
  v.number(),
  v.integer("must be a whole number"),
  v.minValue(-1, "must be -1 (none) or an id"),
  v.maxValue(4294967294, "is too large for an id"),
);
const AbsDir = v.pipe(v.string(), v.regex(/^(|\/.*)$/, "must be an absolute path"));
const PortOrRange = v.pipe(
  v.union([v.string(), v.number()]),
  v.transform(String),
  v.regex(/^\d{1,5}(-\d{1,5})?$/, "must be a port or a range LOW-HIGH"),
  v.check((s) => s.split("-").every((p) => Number(p) <= 65535), "must be a port or a range within 0-65535"),
);
/** A taint key ([DNS subdomain/]name), or empty. */
export const TAINT_KEY = /^(|([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$/;
const Name = v.pipe(v.string(), v.regex(DNS_LABEL, "must be a Kubernetes name (lower case, digits, -)"));

// Kubernetes' label syntax: an optional DNS-subdomain prefix and a name of at most 63 characters;
// values of at most 63 characters, empty or starting and ending with a letter or digit.
const LABEL_KEY = /^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$/;
/**
 * Labels meshcni sets itself (on its objects, its pods and its Namespace): commonLabels and
 * podLabels may not name them, so the chart and install-cni never have to choose between two.
 */
export const RESERVED_LABELS = [
  "app.kubernetes.io/name",
  "app.kubernetes.io/part-of",
  "app.kubernetes.io/version",
  "app.kubernetes.io/component",
  "meshcni.io/cni-resource",
  "pod-security.kubernetes.io/enforce",
  "config.linkerd.io/admission-webhooks",
  "istio-injection",
] as const;
const Labels = v.record(
  v.pipe(
    v.string(),
    v.regex(LABEL_KEY, "must be a label key (prefix/name, name at most 63 characters)"),
    v.check((k) => !(RESERVED_LABELS as readonly string[]).includes(k), "is a label meshcni sets itself"),
  ),
  v.pipe(v.string(), v.regex(LABEL_VALUE, "must be a label value (at most 63 letters, digits, -, _ or .)")),
);
/** A quantity as Kubernetes writes them: 100m, 64Mi, 1, 0.5. */
const Quantity = v.union([
  v.pipe(v.number(), v.minValue(0, "must not be negative")),
  v.pipe(
    v.string(),
    v.regex(
      /^[+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+|[numkMGTPE]|[KMGTPE]i)?$/,
      "must be a quantity such as 100m or 64Mi",
    ),
  ),
]);
const ResourceList = v.record(v.string(), Quantity);
/** A count or a percentage (maxUnavailable, maxSurge). */
const IntOrPercent = v.union([
  v.pipe(v.number(), v.integer("must be a whole number"), v.minValue(0, "must not be negative")),
  v.pipe(v.string(), v.regex(/^[0-9]+%$/, "must be a number or a percentage such as 10%")),
]);
const Toleration = v.strictObject({
  key: v.optional(v.string()),
  operator: v.optional(v.picklist(["Exists", "Equal"])),
  value: v.optional(v.string()),
  effect: v.optional(v.picklist(["", "NoSchedule", "PreferNoSchedule", "NoExecute"])),
  tolerationSeconds: v.optional(v.pipe(v.number(), v.integer("must be a whole number"))),
});
/** The pod's affinity: Kubernetes' own structure under these three keys (its schema checks the rest). */
const Affinity = v.strictObject({
  nodeAffinity: v.optional(v.record(v.string(), v.unknown())),
  podAffinity: v.optional(v.record(v.string(), v.unknown())),
  podAntiAffinity: v.optional(v.record(v.string(), v.unknown())),
});
const UpdateStrategy = v.pipe(
  v.strictObject({
    /** Absent: Kubernetes' default, RollingUpdate. */
    type: v.optional(v.picklist(["RollingUpdate", "OnDelete"])),
    rollingUpdate: v.optional(
      v.strictObject({ maxUnavailable: v.optional(IntOrPercent), maxSurge: v.optional(IntOrPercent) }),
    ),
  }),
  v.check(
    (s) => s.type === "RollingUpdate" || s.rollingUpdate === undefined,
    "rollingUpdate goes with type RollingUpdate only (set updateStrategy.rollingUpdate=null for OnDelete)",
  ),
);
/** An image digest: the manifest list's, so each architecture pulls its own image. */
export const DIGEST = /^sha256:[0-9a-f]{64}$/;

export const ValuesSchema = v.object({
  mesh: v.optional(v.picklist(MESHES), "linkerd"),
  namespace: v.optional(v.pipe(Name, v.maxLength(63)), "meshcni"),
  /** Render the Namespace object (meshcnictl always does; with Helm, prefer --create-namespace). */
  createNamespace: v.optional(v.boolean(), false),
  platform: v.optional(v.union([v.literal(""), v.picklist(PLATFORM_NAMES)]), ""),
  /** Empty: the platform's folder, else /opt/cni/bin. */
  cniBinDir: v.optional(AbsDir, ""),
  /** Empty: the platform's folder, else /etc/cni/net.d. */
  cniConfDir: v.optional(AbsDir, ""),
  cniConfFileName: v.optional(v.pipe(v.string(), v.regex(/^[^/]*$/, "must be a file name without a folder")), ""),
  logLevel: v.optional(v.picklist(LOG_LEVELS), "info"),
  /** null: the mesh's default (none for Linkerd; istio-system and kube-system for Istio). */
  excludeNamespaces: v.optional(v.nullable(v.array(Name)), null),
  inboundPort: v.optional(v.nullable(Port), null),
  outboundPort: v.optional(v.nullable(Port), null),
  proxyUID: v.optional(v.nullable(Id), null),
  proxyGID: v.optional(v.nullable(Id), null),
  skipInboundPorts: v.optional(v.array(PortOrRange), []),
  skipOutboundPorts: v.optional(v.array(PortOrRange), []),
  redirectPorts: v.optional(v.array(Port), []),
  iptablesMode: v.optional(v.picklist(IPTABLES_MODES), "auto"),
  ipv6: v.optional(v.boolean(), false),
  useWaitFlag: v.optional(v.boolean(), false),
  hub: v.optional(v.string(), DEFAULT_HUB),
  /** Empty: APP_VERSION. */
  tag: v.optional(v.string(), ""),
  /** A whole image reference; overrides hub and tag. */
  image: v.optional(v.string(), ""),
  /** The image's digest (sha256:...): with image empty, the image is hub/meshcni@digest. */
  digest: v.optional(
    v.pipe(
      v.string(),
      v.check((d) => d === "" || DIGEST.test(d), "must be sha256: and 64 hex digits"),
    ),
    "",
  ),
  pullPolicy: v.optional(v.picklist(PULL_POLICIES), "IfNotPresent"),
  priorityClassName: v.optional(v.string(), "system-node-critical"),
  healthPort: v.optional(Port, 9813),
  /**
   * The agent's --repair, for pods with evidence of bypassing the mesh: write their rules back in
   * their namespaces (in-place; an agent that does not apply rules evicts instead: RBAC create
   * events and pods/eviction), evict them (create pods/eviction and events), delete them (delete
   * pods, create events), or only report them (off: neither).
   */
  repair: v.optional(v.picklist(REPAIR_VALUES), "in-place"),
  /**
   * The agent applies meshed pods' rules in their network namespaces (its container gets NET_ADMIN
   * and SYS_ADMIN); false renders the capability-free DaemonSet and the plugin applies them with
   * the host's userland.
   */
  agentApplies: v.optional(v.boolean(), true),
  /**
   * The agent's --startup-taint: "" for none; else the taint key it removes from its node (RBAC:
   * get and patch nodes).
   */
  startupTaint: v.optional(v.pipe(v.string(), v.regex(TAINT_KEY, "must be a taint key ([prefix/]name) or empty")), ""),
  /**
   * The host paths the host check reads, mounted read-only: recursiveReadOnly for each mount
   * (Kubernetes 1.30+; "" leaves the field out, for API servers that do not know it).
   */
  hostMounts: v.optional(
    v.strictObject({ recursiveReadOnly: v.optional(v.picklist(RECURSIVE_READ_ONLY), "IfPossible") }),
    { recursiveReadOnly: "IfPossible" },
  ),
  podAnnotations: v.optional(v.record(v.string(), v.string()), {}),
  resources: v.optional(v.strictObject({ requests: v.optional(ResourceList), limits: v.optional(ResourceList) }), {
    requests: { cpu: "10m", memory: "40Mi" },
  }),
  // Scheduling and the DaemonSet's rollout, named as in Linkerd's linkerd2-cni chart.
  /** Every taint: the plugin must be on every node whose pods could be meshed. */
  tolerations: v.optional(v.array(Toleration), [{ operator: "Exists" }]),
  nodeSelector: v.optional(v.record(v.string(), v.string()), { "kubernetes.io/os": "linux" }),
  affinity: v.optional(Affinity, {}),
  imagePullSecrets: v.optional(v.array(v.strictObject({ name: Name })), []),
  /** Extra labels on the DaemonSet's pods (meshcni's own labels win on a clash). */
  podLabels: v.optional(Labels, {}),
  /** Extra labels on every object and the pods (meshcni's own labels win on a clash). */
  commonLabels: v.optional(Labels, {}),
  updateStrategy: v.optional(UpdateStrategy, { type: "RollingUpdate", rollingUpdate: { maxUnavailable: 1 } }),
  /** null: Kubernetes' default (10). */
  revisionHistoryLimit: v.optional(
    v.nullable(v.pipe(v.number(), v.integer("must be a whole number"), v.minValue(0, "must not be negative"))),
    null,
  ),
});
export type ValuesInput = v.InferInput<typeof ValuesSchema>;
export type Values = v.InferOutput<typeof ValuesSchema>;

export class ValuesError extends Error {}

export function parseValues(input: unknown): Values {
  const r = v.safeParse(ValuesSchema, input);
  if (!r.success) {
    throw new ValuesError(
      r.issues
        .map((i) => {
          const path = i.path?.map((p) => String(p.key)).join(".");
          // A strict object's stray key (tolerations[0].foo): valibot says "Expected never".
          const message = i.kind === "schema" && i.expected === "never" ? "unknown key" : i.message;
          return path ? `${path}: ${message}` : message;
        })
        .join("; "),
    );
  }
  const stray = r.output.mesh === "istio" ? linkerdOnlySet(r.output) : [];
  if (stray.length > 0)
    throw new ValuesError(
      `${stray.join(", ")}: apply to mesh linkerd only; Istio takes them from the pods' annotations`,
    );
  return r.output;
}

/** The host folders, after the platform preset. */
export function resolveDirs(values: Values): { cniBinDir: string; cniConfDir: string } {
  const preset = values.platform ? PLATFORMS[values.platform] : DEFAULT_DIRS;
  // The chart trims the same way (regexReplaceAll "(.)/+$").
  const strip = (d: string) => d.replace(/(.)\/+$/, "$1");
  return {
    cniBinDir: strip(values.cniBinDir || preset.cniBinDir),
    cniConfDir: strip(values.cniConfDir || preset.cniConfDir),
  };
}

/** image when set; else hub/meshcni pinned by digest when one is known, else by tag. */
export function resolveImage(values: Values): string {
  if (values.image) return values.image;
  const repo = `${values.hub}/${IMAGE_NAME}`;
  return values.digest ? `${repo}@${values.digest}` : `${repo}:${values.tag || APP_VERSION}`;
}

/** The plugin settings these values choose (see internal/config/entry.ts). */
export function entryOptions(values: Values): EntryOptions {
  const o: EntryOptions = {
    mesh: values.mesh,
    logLevel: values.logLevel,
    destNetDir: resolveDirs(values).cniConfDir,
    iptablesMode: values.iptablesMode,
  };
  if (values.excludeNamespaces !== null) o.excludeNamespaces = values.excludeNamespaces;
  if (values.inboundPort !== null) o.inboundPort = values.inboundPort;
  if (values.outboundPort !== null) o.outboundPort = values.outboundPort;
  if (values.proxyUID !== null) o.proxyUid = values.proxyUID;
  if (values.proxyGID !== null) o.proxyGid = values.proxyGID;
  if (values.skipInboundPorts.length) o.skipInboundPorts = values.skipInboundPorts;
  if (values.skipOutboundPorts.length) o.skipOutboundPorts = values.skipOutboundPorts;
  if (values.redirectPorts.length) o.redirectPorts = values.redirectPorts;
  if (values.ipv6) o.ipv6 = true;
  if (values.useWaitFlag) o.useWaitFlag = true;
  return o;
}

/**
 * Values that mean nothing for Istio (its pods' annotations and environment decide them), the
 * one list: each with its install-cni flag and where Istio takes the setting from. The chart's
 * meshcni.entry refuses the same four.
 */
export const LINKERD_ONLY = {
  skipInboundPorts: {
    flag: "skip-inbound-ports",
    istio: "the pod annotation traffic.sidecar.istio.io/excludeInboundPorts",
  },
  skipOutboundPorts: {
    flag: "skip-outbound-ports",
    istio: "the pod annotation traffic.sidecar.istio.io/excludeOutboundPorts",
  },
  redirectPorts: { flag: "redirect-ports", istio: "the pod annotation traffic.sidecar.istio.io/includeInboundPorts" },
  ipv6: { flag: "ipv6", istio: "the pod's addresses and ISTIO_DUAL_STACK" },
} as const satisfies Partial<Record<keyof Values, { flag: string; istio: string }>>;

/** The Linkerd-only values set in `values` (none matter unless the mesh is Istio). */
export function linkerdOnlySet(values: Values): (keyof typeof LINKERD_ONLY)[] {
  return (Object.keys(LINKERD_ONLY) as (keyof typeof LINKERD_ONLY)[]).filter((k) => {
    const v = values[k];
    return Array.isArray(v) ? v.length > 0 : v === true;
  });
}
