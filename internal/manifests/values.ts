// The settings the manifests are rendered from. They are the Helm chart's values (manifests/
// values.yaml holds the same defaults), and `meshcnictl install-cni` maps its flags onto them.
// Names follow the CLI flags, or Istio's chart where the meaning is the same (hub, tag,
// pullPolicy, logLevel, excludeNamespaces, cniBinDir, cniConfDir, cniConfFileName,
// podAnnotations). Pure.
import * as v from "valibot";
import pkg from "../../package.json" with { type: "json" };
import { type EntryOptions, MESHES } from "../config/entry.ts";
import { IPTABLES_MODES } from "../config/plugin-config.ts";
import { DNS_LABEL } from "../kube/names.ts";
import { LOG_LEVELS } from "../config/log-levels.ts";

/** The version of meshcni these manifests deploy (the chart's appVersion, the image's default tag). */
export const APP_VERSION: string = pkg.version;

export const DEFAULT_HUB = "ghcr.io/meshcni";
export const IMAGE_NAME = "meshcni";
export { LOG_LEVELS };
export const PULL_POLICIES = ["Always", "IfNotPresent", "Never"] as const;

/** Folders of hosted and packaged Kubernetes whose CNI setup is not the usual one. */
export const PLATFORMS = {
  gke: { cniBinDir: "/home/kubernetes/bin", cniConfDir: "/etc/cni/net.d", note: "GKE keeps CNI plugins in /home/kubernetes/bin" },
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

const Port = v.pipe(v.number(), v.integer("must be a whole number"), v.minValue(1, "must be a port, 1-65535"), v.maxValue(65535, "must be a port, 1-65535"));
const Id = v.pipe(v.number(), v.integer("must be a whole number"), v.minValue(-1, "must be -1 (none) or an id"), v.maxValue(4294967294, "is too large for an id"));
const AbsDir = v.pipe(v.string(), v.regex(/^(|\/.*)$/, "must be an absolute path"));
const PortOrRange = v.pipe(
  v.union([v.string(), v.number()]),
  v.transform(String),
  v.regex(/^\d{1,5}(-\d{1,5})?$/, "must be a port or a range LOW-HIGH"),
  v.check((s) => s.split("-").every((p) => Number(p) <= 65535), "must be a port or a range within 0-65535"),
);
const Name = v.pipe(v.string(), v.regex(DNS_LABEL, "must be a Kubernetes name (lower case, digits, -)"));

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
  pullPolicy: v.optional(v.picklist(PULL_POLICIES), "IfNotPresent"),
  priorityClassName: v.optional(v.string(), "system-node-critical"),
  healthPort: v.optional(Port, 9813),
  podAnnotations: v.optional(v.record(v.string(), v.string()), {}),
  resources: v.optional(v.record(v.string(), v.record(v.string(), v.string())), { requests: { cpu: "10m", memory: "40Mi" } }),
});
export type ValuesInput = v.InferInput<typeof ValuesSchema>;
export type Values = v.InferOutput<typeof ValuesSchema>;

export class ValuesError extends Error {}

export function parseValues(input: unknown): Values {
  const r = v.safeParse(ValuesSchema, input);
  if (!r.success) {
    throw new ValuesError(r.issues.map((i) => {
      const path = i.path?.map((p) => String(p.key)).join(".");
      return path ? `${path}: ${i.message}` : i.message;
    }).join("; "));
  }
  const stray = r.output.mesh === "istio" ? linkerdOnlySet(r.output) : [];
  if (stray.length > 0) throw new ValuesError(`${stray.join(", ")}: apply to mesh linkerd only; Istio takes them from the pods' annotations`);
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

export function resolveImage(values: Values): string {
  return values.image || `${values.hub}/${IMAGE_NAME}:${values.tag || APP_VERSION}`;
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
  skipInboundPorts: { flag: "skip-inbound-ports", istio: "the pod annotation traffic.sidecar.istio.io/excludeInboundPorts" },
  skipOutboundPorts: { flag: "skip-outbound-ports", istio: "the pod annotation traffic.sidecar.istio.io/excludeOutboundPorts" },
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
