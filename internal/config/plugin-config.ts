// The plugin's network configuration (its entry in the host conflist, as the runtime hands it
// over on stdin). Unknown keys are kept and ignored, so a linkerd-cni or istio-cni entry with
// its `type` changed to `meshcni` parses as it is.
import * as v from "valibot";
import { DEFAULT_AGENT_SOCKET, DEFAULT_STATE_DIR } from "../wire/protocol.ts";
import { CniError } from "../cni/errors.ts";
import { Code, type CniVersion, isSupportedVersion, SUPPORTED_VERSIONS } from "../cni/spec.ts";
import { IPTABLES_MODES } from "../firewall/registry.ts";

/** An absolute path without NUL; the agent writes host paths. */
const AbsolutePath = v.pipe(v.string(), v.regex(/^\/[^\0]*$/, "must be an absolute path"), v.maxLength(4096));

const Port = v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(65535));

/**
 * A JSON object with these keys, others kept. valibot's object schemas also take arrays (as
 * objects with index keys), so `"linkerd": []` or `"prevResult": [..]` would pass as objects.
 */
const jsonObject = <E extends v.ObjectEntries>(entries: E) =>
  v.pipe(
    v.custom<Record<string, unknown>>(
      (x) => typeof x === "object" && x !== null && !Array.isArray(x),
      "must be a JSON object",
    ),
    v.looseObject(entries),
  );

/** Deeper nesting is refused when decoding (Go's encoding/json stops at 10000; CNI configs are shallow). */
export const MAX_JSON_DEPTH = 1000;

/** Whether JSON text nests arrays and objects deeper than `max`; a scan, so deep input cannot overflow the stack. */
function nestsDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 92)
        i++; // backslash: skip the escaped character
      else if (c === 34) inString = false;
    } else if (c === 34) inString = true;
    else if (c === 91 || c === 123) {
      if (++depth > max) return true;
    } else if (c === 93 || c === 125) depth--;
  }
  return false;
}
const Id = v.pipe(v.number(), v.integer(), v.minValue(-1), v.maxValue(4294967294));
const PortItem = v.union([v.string(), Port]);

export const LinkerdSectionSchema = jsonObject({
  "incoming-proxy-port": v.optional(Port, 4143),
  "outgoing-proxy-port": v.optional(Port, 4140),
  "proxy-uid": v.optional(Id, 2102),
  "proxy-gid": v.optional(Id, -1),
  "ports-to-redirect": v.optional(v.array(PortItem), []),
  "inbound-ports-to-ignore": v.optional(v.array(PortItem), []),
  "outbound-ports-to-ignore": v.optional(v.array(PortItem), []),
  "subnets-to-ignore": v.optional(v.array(v.string()), []),
  simulate: v.optional(v.boolean(), false),
  "use-wait-flag": v.optional(v.boolean(), false),
  // linkerd-cni reads an empty mode as legacy; meshcni reads it, and an absent one, as auto.
  "iptables-mode": v.optional(v.union([v.picklist(IPTABLES_MODES), v.literal("")]), "auto"),
  ipv6: v.optional(v.boolean(), false),
});
export type LinkerdSection = v.InferOutput<typeof LinkerdSectionSchema>;

/** A proxy user or group id; 0 (root) is never the proxy's, as in Istio. */
const ProxyId = v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(4294967294));

// Istio's capture ports and proxy ids are fixed in istio-cni; they are optional keys here with
// Istio's values as defaults (istio-iptables -p, -z, -e, -u, -g). A pod's istio-proxy
// runAsUser/runAsGroup, when set and not 0, still wins over proxy-uid/proxy-gid.
export const IstioSectionSchema = jsonObject({
  "iptables-mode": v.optional(v.union([v.picklist(IPTABLES_MODES), v.literal("")]), "auto"),
  "use-wait-flag": v.optional(v.boolean(), false),
  simulate: v.optional(v.boolean(), false),
  "proxy-port": v.optional(Port, 15001),
  "inbound-capture-port": v.optional(Port, 15006),
  "inbound-tunnel-port": v.optional(Port, 15008),
  "proxy-uid": v.optional(ProxyId, 1337),
  "proxy-gid": v.optional(ProxyId, 1337),
});
export type IstioSection = v.InferOutput<typeof IstioSectionSchema>;

export const KubernetesSectionSchema = jsonObject({
  kubeconfig: v.optional(v.string()),
  exclude_namespaces: v.optional(v.array(v.string()), []),
  /** The namespace of meshcni's own DaemonSet (the agent writes it): its pods pass through. */
  pod_namespace: v.optional(v.string()),
  /**
   * A kubeconfig whose server is plain http:// is refused unless this says so: the token would
   * travel in clear.
   */
  allow_insecure_http: v.optional(v.boolean(), false),
});

const PrevResultSchema = v.optional(jsonObject({ cniVersion: v.optional(v.string()) }));

export const PluginConfSchema = v.looseObject({
  cniVersion: v.string(),
  name: v.pipe(
    v.string(),
    v.regex(/^[a-zA-Z0-9][a-zA-Z0-9_.-]*$/, "the network name must match ^[a-zA-Z0-9][a-zA-Z0-9_.-]*$"),
  ),
  type: v.optional(v.string()),
  log_level: v.optional(v.string(), "info"),
  mesh: v.optional(v.picklist(["linkerd", "istio"]), "linkerd"),
  /** The bound on one ADD or CHECK, API lookups included. */
  timeout_seconds: v.optional(v.pipe(v.number(), v.minValue(0.1), v.maxValue(60)), 5),
  /**
   * Says a dry run (MESHCNI_DRY_RUN_FILE in the environment) is meant: without it a dry run still
   * happens (a promise to users) but says so at error level on every call, since a runtime's
   * environment can carry the variable to every pod on a node. Alone, it is an error.
   */
  dry_run: v.optional(v.boolean(), false),
  kubernetes: v.optional(KubernetesSectionSchema, {}),
  linkerd: v.optional(LinkerdSectionSchema, {}),
  istio: v.optional(IstioSectionSchema, {}),
  prevResult: PrevResultSchema,
  /** The node agent's Unix socket (the agent writes it; wire/protocol.ts). */
  agent_socket: v.optional(AbsolutePath, DEFAULT_AGENT_SOCKET),
  /** Where the plugin keeps its records and, while the agent is down, its log. */
  state_dir: v.optional(AbsolutePath, DEFAULT_STATE_DIR),
});
export type PluginConf = v.InferOutput<typeof PluginConfSchema> & { cniVersion: CniVersion };

function describePath(issue: v.BaseIssue<unknown>): string {
  const path = issue.path?.map((p) => String(p.key)).join(".") ?? "";
  return path ? `${path}: ${issue.message}` : issue.message;
}

function deepFreeze<T>(x: T): T {
  if (typeof x === "object" && x !== null && !Object.isFrozen(x)) {
    Object.freeze(x);
    for (const k in x) deepFreeze((x as Record<string, unknown>)[k]);
  }
  return x;
}

/**
 * The configs parsed last, by their JSON without prevResult, frozen. The node agent plans every
 * pod of its node with the same conflist entry, only prevResult differs, and the schema was half
 * of its time per pod. A plugin process parses once and never hits it.
 */
const recent = new Map<string, PluginConf>();
const RECENT_MAX = 8;

/**
 * `obj` through the schema as the whole parse would, from `recent` when it can; undefined when it
 * does not validate or has no key (the whole parse then runs).
 */
function parseRecent(obj: Record<string, unknown>): PluginConf | undefined {
  const { prevResult, ...rest } = obj;
  // JSON writes 1e400 as null and -0 as 0: such an entry gets no key, so it never stands for another.
  let exact = true;
  const key = JSON.stringify(rest, (_k, x: unknown) => {
    if (typeof x === "number" && (!Number.isFinite(x) || Object.is(x, -0))) exact = false;
    return x;
  });
  if (!exact) return undefined;
  let conf = recent.get(key);
  if (!conf) {
    const parsed = v.safeParse(PluginConfSchema, rest);
    if (!parsed.success) return undefined;
    conf = deepFreeze(parsed.output as PluginConf);
    if (recent.size >= RECENT_MAX) recent.delete(recent.keys().next().value!);
    recent.set(key, conf);
  }
  if (prevResult === undefined) return conf;
  const pr = v.safeParse(PrevResultSchema, prevResult);
  return pr.success ? { ...conf, prevResult: pr.output } : undefined;
}

/**
 * Decodes and validates stdin for ADD, DEL, CHECK, GC and STATUS: JSON errors are code 6, a
 * version we do not speak code 1, everything else that does not fit the schema code 7.
 */
export function parsePluginConf(stdin: string): PluginConf {
  if (nestsDeeperThan(stdin, MAX_JSON_DEPTH)) {
    throw new CniError(
      Code.DecodeFailure,
      "error decoding network config",
      `it nests deeper than ${MAX_JSON_DEPTH} levels; ` +
        `the runtime must pass the plugin's conflist entry as JSON on stdin`,
    );
  }
  let raw: unknown;
  try {
    raw = JSON.parse(stdin);
  } catch (e) {
    throw new CniError(
      Code.DecodeFailure,
      "error decoding network config",
      `${(e as Error).message}; the runtime must pass the plugin's conflist entry as JSON on stdin`,
    );
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new CniError(Code.DecodeFailure, "error decoding network config", "stdin must be a JSON object");
  }
  const obj = raw as Record<string, unknown>;
  const version = obj.cniVersion ?? "0.1.0";
  if (!isSupportedVersion(version)) {
    throw new CniError(
      Code.IncompatibleVersion,
      "incompatible CNI versions",
      `config is ${JSON.stringify(version)}, meshcni supports ${JSON.stringify(SUPPORTED_VERSIONS)}`,
    );
  }
  if (typeof obj.name !== "string" || obj.name === "") {
    throw new CniError(Code.InvalidConfig, "missing network name", 'the conflist must have a "name"');
  }
  const known = parseRecent(obj);
  if (known) return known;
  const parsed = v.safeParse(PluginConfSchema, obj);
  if (!parsed.success) {
    throw new CniError(Code.InvalidConfig, "invalid meshcni configuration", parsed.issues.map(describePath).join("; "));
  }
  return parsed.output as PluginConf;
}
