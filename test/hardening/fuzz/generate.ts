// One fuzz case from (seed, index): the CNI environment, stdin, and the pod and namespace the
// API stand-in serves, built from typed choices, together with what the outcome must be. Pure.
//
// Every choice is labelled as the documentation reads it (valid, invalid with its code, or
// either), and the expectation follows from the labels in the order the spec and meshcni's error
// table give: environment (4), VERSION, decoding (6), version (1), configuration (7), the command's
// version gate (1), prevResult (1/7), CNI_ARGS (4), pods outside Kubernetes or excluded (no rules),
// kubeconfig (107), API (106 missing, 11 malformed), the mesh's decision (no rules), annotations
// and settings (7), rules.
import {
  DOCUMENTED_CODES,
  type Expectation,
  expectedResult,
  goBool,
  type IstioRules,
  type LinkerdRules,
  SUPPORTED,
  versionAnswer,
} from "./expect.ts";
import { caseSeed, createRng, type Rng } from "./prng.ts";
import {
  type CidrValue,
  cidrItem,
  idItem,
  interfaceItem,
  listLength,
  portItem,
  typedList,
  type TypedList,
  type Validity,
  worst,
} from "./values.ts";

/** Replaced by the harness with the path of the stand-in API server's kubeconfig. */
export const KUBECONFIG = "@@KUBECONFIG@@";

export interface FuzzCase {
  seed: number;
  index: number;
  mesh: "linkerd" | "istio";
  tags: string[];
  env: Record<string, string>;
  stdin: string;
  /** API path -> body, served by the stand-in for this case only. */
  objects: Record<string, unknown>;
  expect: Expectation;
}

type Json = Record<string, any>;

class Builder {
  readonly tags: string[] = [];
  constructor(readonly rng: Rng) {}
  tag(t: string): void {
    this.tags.push(t);
  }
}

// --- the environment -----------------------------------------------------------------------

const COMMANDS = ["ADD", "DEL", "CHECK", "VERSION", "STATUS", "GC"];

function genCommand(b: Builder): string | undefined {
  const r = b.rng.next();
  if (r < 0.66) return "ADD";
  if (r < 0.76) return "CHECK";
  if (r < 0.84) return "DEL";
  if (r < 0.88) return "VERSION";
  if (r < 0.92) return "STATUS";
  if (r < 0.97) return "GC";
  b.tag("bad-command");
  return b.rng.pick([undefined, "", "add", "Add", "ADD ", " ADD", "ADD\n", "REMOVE", "VERSION2", "DELETE", "check"]);
}

interface EnvChoice {
  value: string | undefined;
  valid: boolean;
  /** "either": the spec's rule and Linux's differ in a way that does not matter to meshcni. */
  either?: boolean;
}

function genContainerId(b: Builder): EnvChoice {
  const r = b.rng.next();
  if (r < 0.98)
    return { value: b.rng.pick(["3f2a9c1d7e5b", "a", "abc.DEF_1-2", `0${"f".repeat(63)}`, "c1"]), valid: true };
  if (r < 0.99) {
    b.tag("containerid-absent");
    return { value: b.rng.pick([undefined, ""]), valid: false };
  }
  b.tag("containerid-invalid");
  return {
    value: b.rng.pick(["-abc", ".abc", "_abc", "a b", "a\nb", "ａｂｃ", "a/b", "a;b", "a:b", "é"]),
    valid: false,
  };
}

function genNetns(b: Builder): EnvChoice {
  const r = b.rng.next();
  if (r < 0.98)
    return {
      value: b.rng.pick(["/var/run/netns/cni-7d1c3a2e", "/proc/4242/ns/net", "/run/netns/a b", "/x\ny"]),
      valid: true,
    };
  if (r < 0.99) {
    b.tag("netns-absent");
    return { value: b.rng.pick([undefined, ""]), valid: false };
  }
  b.tag("netns-relative");
  return { value: b.rng.pick(["netns", "./netns", "var/run/netns/x", "~/x", " /var/run/netns/x"]), valid: false };
}

function genIfname(b: Builder): EnvChoice {
  const r = b.rng.next();
  if (r < 0.97) return { value: b.rng.pick(["eth0", "net1", "e", "abcdefghijklmno"]), valid: true };
  if (r < 0.98) return { value: b.rng.pick(["éééééééééé", "ｅｔｈ０"]), valid: true, either: true };
  if (r < 0.99) {
    b.tag("ifname-absent");
    return { value: b.rng.pick([undefined, ""]), valid: false };
  }
  b.tag("ifname-invalid");
  return { value: b.rng.pick(["abcdefghijklmnop", ".", "..", "a/b", "a:b", "a b", "a\tb", "a\nb"]), valid: false };
}

// --- CNI_ARGS ------------------------------------------------------------------------------

const NS_BASES = ["emojivoto", "default", "a", "bookinfo", "team-1"];
const POD_BASES = ["web-5b8b6f7c9d-x2x7q", "a", "reviews-v1-7f9c6d8b5-k4m2p", "db.0", "x1"];
/** Values that break the pair itself (a ';' or '=') are not pod-name faults; those lists leave them out. */
const BAD_NS = [
  "Emojivoto",
  "emoji_voto",
  "a".repeat(64),
  "-ns",
  "ns-",
  "a.b",
  "ns/x",
  "..",
  "%2e%2e",
  "ｎｓ",
  "ns\n",
  "ns x",
];
const BAD_POD = [
  "Web",
  "web_1",
  "a".repeat(254),
  "a..b",
  "-web",
  "web-",
  ".web",
  "web/../x",
  "web%2F",
  "ｗｅｂ",
  "web\n",
  "web x",
  "web?x",
  "web#x",
];

interface Identity {
  ns: string;
  name: string;
}

/** The pods' UID, and the runtime's K8S_POD_UID when CNI_ARGS carries one. */
export const POD_UID = "6f1f0c2a-3f4e-4b8e-9d0e-2f5a1c7b8e90";

interface ArgsChoice {
  text: string;
  /** CNI_ARGS carries K8S_POD_UID. */
  uid?: boolean;
  /** Code 4: a pair that is not KEY=VALUE, or an invalid pod name or namespace. */
  fault: boolean;
  /** The pod named, when CNI_ARGS names one. */
  pod?: Identity;
}

function genArgs(b: Builder, id: Identity): ArgsChoice {
  const { rng } = b;
  const pairs: [string, string][] = [];
  let ns: string | undefined = id.ns;
  let name: string | undefined = id.name;
  let fault = false;
  const r = rng.next();
  if (r < 0.04) {
    b.tag("args-empty");
    return { text: "", fault: false };
  }
  if (r < 0.09) {
    b.tag("args-no-pod");
    if (rng.chance(0.5)) ns = rng.pick([undefined, ""]);
    else name = rng.pick([undefined, ""]);
  } else if (r < 0.13) {
    b.tag("args-bad-name");
    if (rng.chance(0.5)) ns = rng.pick(BAD_NS);
    else name = rng.pick(BAD_POD);
    fault = true;
  }
  if (rng.chance(0.85)) pairs.push(["IgnoreUnknown", rng.pick(["1", "true", "0"])]);
  if (ns !== undefined) pairs.push(["K8S_POD_NAMESPACE", ns]);
  if (name !== undefined) pairs.push(["K8S_POD_NAME", name]);
  if (rng.chance(0.7)) pairs.push(["K8S_POD_INFRA_CONTAINER_ID", rng.pick(["3f2a9c1d7e5b", "", "x"])]);
  const uid = rng.chance(0.5);
  if (uid) pairs.push(["K8S_POD_UID", POD_UID]);
  if (rng.chance(0.15))
    pairs.push([
      rng.pick(["FOO", "k8s_pod_name", " K8S_POD_NAME", "K8S_POD_NAME ", "K8S_POD_NAMESPACE_X"]),
      rng.pick(["bar", "other-pod", ""]),
    ]);
  let list = rng.shuffle(pairs);
  if (rng.chance(0.06) && name !== undefined && ns !== undefined) {
    // A repeated key: the last one counts (libcni), so junk before the real value is harmless.
    b.tag("args-repeated");
    list = [
      ["K8S_POD_NAME", rng.pick(BAD_POD)],
      ["K8S_POD_NAMESPACE", rng.pick(BAD_NS)],
      ...list.filter(([k]) => k !== "K8S_POD_NAME" && k !== "K8S_POD_NAMESPACE"),
      ["K8S_POD_NAMESPACE", ns],
      ["K8S_POD_NAME", name],
    ];
  }
  const parts = list.map(([k, v]) => `${k}=${v}`);
  if (rng.chance(0.04)) {
    b.tag("args-malformed-pair");
    parts.splice(
      rng.int(parts.length + 1),
      0,
      rng.pick(["K8S_POD_NAME", "=x", "a=b=c", "IgnoreUnknown", "K8S_POD_UID=a=b", "garbage"]),
    );
    fault = true;
  }
  let text = parts.join(";");
  if (rng.chance(0.08)) text = rng.pick([`;${text}`, `${text};`, text.replace(";", ";;")]);
  // A pair that is not KEY=VALUE always fails; names are checked only when both are given.
  if (fault || ns === undefined || ns === "" || name === undefined || name === "") return { text, fault, uid };
  return { text, fault: false, uid, pod: { ns, name } };
}

// --- prevResult ----------------------------------------------------------------------------

interface PrevChoice {
  value: unknown;
  present: boolean;
  /** Code 1 or 7 when converting it fails; "schema" when the config schema rejects it. */
  fault?: 1 | 7 | "schema";
  /** The pod has a global IPv6 address (Istio then programs ip6tables too with ISTIO_DUAL_STACK). */
  v6: boolean;
  /** The pod's global addresses are all IPv6 (Istio then programs ip6tables too without it). */
  v6only?: boolean;
}

function genPrev(b: Builder): PrevChoice {
  const { rng } = b;
  const iface = [
    { name: "cni0", mac: "0a:58:0a:f4:01:01" },
    { name: "veth1", mac: "0a:58:0a:f4:01:02" },
    { name: "eth0", mac: "0a:58:0a:f4:01:0c", sandbox: "/var/run/netns/x" },
  ];
  const v4 = { address: "10.244.1.12/24", gateway: "10.244.1.1", interface: 2 };
  const r = rng.next();
  if (r < 0.2) return { value: undefined, present: false, v6: false };
  if (r < 0.94) {
    const version = rng.pick(["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0", undefined]);
    const legacy = version?.startsWith("0.");
    const addrs = rng.pick([
      { ips: [v4], v6: false },
      { ips: [v4, { address: "fd00:10:244::c/64", gateway: "fd00:10:244::1", interface: 2 }], v6: true },
      { ips: [{ address: "2001:db8::5", interface: 2 }], v6: true, v6only: true },
      { ips: [v4, { address: "fe80::1/64", interface: 2 }], v6: false },
      { ips: [{ address: "::1/128" }], v6: false },
      { ips: undefined, v6: false },
      { ips: [], v6: false },
    ]);
    const doc: Json = {
      interfaces: iface,
      routes: [{ dst: "0.0.0.0/0" }],
      dns: rng.pick([{}, { nameservers: ["10.96.0.10"] }]),
    };
    if (version !== undefined) doc.cniVersion = version;
    if (addrs.ips) {
      doc.ips = addrs.ips.map((ip) =>
        legacy && rng.chance(0.8) ? { version: ip.address.includes(":") ? "6" : "4", ...ip } : { ...ip },
      );
    }
    if (rng.chance(0.1)) doc["x-extra"] = { nested: [1, { a: "b" }] };
    return { value: doc, present: true, v6: addrs.v6, v6only: addrs.v6only === true };
  }
  b.tag("prev-bad");
  const bad: PrevChoice[] = [
    { value: { cniVersion: "0.2.0", ip4: { ip: "10.0.0.2/24" } }, present: true, fault: 1, v6: false },
    { value: { cniVersion: "0.1.0", ips: [] }, present: true, fault: 1, v6: false },
    { value: { ip4: { ip: "10.0.0.2/24" } }, present: true, fault: 1, v6: false },
    { value: { cniVersion: "1.0.0", ips: "10.0.0.2/24" }, present: true, fault: 7, v6: false },
    { value: { cniVersion: "1.0.0", ips: [{}] }, present: true, fault: 7, v6: false },
    { value: { cniVersion: "1.0.0", ips: [{ address: 5 }] }, present: true, fault: 7, v6: false },
    { value: { cniVersion: "1.0.0", ips: [null] }, present: true, fault: 7, v6: false },
    { value: "10.0.0.2", present: true, fault: "schema", v6: false },
    { value: [], present: true, fault: "schema", v6: false },
    { value: null, present: true, fault: "schema", v6: false },
    { value: { cniVersion: 5 }, present: true, fault: "schema", v6: false },
  ];
  return rng.pick(bad);
}

// --- config values -------------------------------------------------------------------------

interface Setting<T> {
  /** The JSON value to write, or undefined to leave the key out. */
  json: unknown;
  /** The value meshcni must use (the documented default when absent). */
  value: T;
  /** The schema rejects it (code 7 when the config is read). */
  schemaFault: boolean;
}

function numberSetting(
  b: Builder,
  key: string,
  def: number,
  lo: number,
  hi: number,
  interesting: number[],
): Setting<number> {
  const { rng } = b;
  const r = rng.next();
  if (r < 0.45) return { json: undefined, value: def, schemaFault: false };
  if (r < 0.996) {
    const v = rng.chance(0.7) ? rng.pick(interesting) : rng.range(lo, hi);
    return { json: v, value: v, schemaFault: false };
  }
  b.tag(`conf-bad-${key}`);
  return { json: rng.pick([hi + 1, lo - 1, 1.5, String(def), null, true, [def]]), value: def, schemaFault: true };
}

function boolSetting(b: Builder, key: string, def: boolean): Setting<boolean> {
  const { rng } = b;
  const r = rng.next();
  if (r < 0.6) return { json: undefined, value: def, schemaFault: false };
  if (r < 0.997) {
    const v = rng.chance(0.5);
    return { json: v, value: v, schemaFault: false };
  }
  b.tag(`conf-bad-${key}`);
  return { json: rng.pick(["true", 1, null, "yes"]), value: def, schemaFault: true };
}

function modeSetting(b: Builder, key: string): Setting<string> {
  const { rng } = b;
  const r = rng.next();
  if (r < 0.5) return { json: undefined, value: "auto", schemaFault: false };
  if (r < 0.99) {
    const v = rng.pick(["auto", "legacy", "nft", "plain", ""]);
    return { json: v, value: v, schemaFault: false };
  }
  b.tag(`conf-bad-${key}`);
  return { json: rng.pick(["iptables", "NFT", "legacy ", 1]), value: "auto", schemaFault: true };
}

/** A config port list: JSON numbers (checked by the schema) and strings (checked when planning). */
interface ListSetting<T> {
  json: unknown;
  list: TypedList<T>;
  schemaFault: boolean;
}

function portListSetting(b: Builder, key: string, ranges: boolean): ListSetting<string> {
  const { rng } = b;
  const empty: TypedList<string> = { text: "", validity: "valid", required: [], allowed: [], kinds: [] };
  const r = rng.next();
  if (r < 0.5) return { json: undefined, list: empty, schemaFault: false };
  if (r < 0.996) {
    const json: unknown[] = [];
    let validity: Validity = "valid";
    const required: string[] = [];
    const n = Math.min(listLength(rng), 60);
    const clean = rng.chance(0.8);
    for (let i = 0; i < n; i++) {
      if (rng.chance(0.3)) {
        const p = rng.int(65536);
        json.push(p);
        required.push(String(p));
      } else if (rng.chance(0.04)) {
        json.push(rng.pick(["", " "]));
      } else {
        const it = portItem(rng, ranges, clean);
        json.push(it.text);
        validity = worst(validity, it.validity);
        if (it.validity !== "invalid") required.push(it.value!);
      }
    }
    if (validity !== "valid") b.tag(`conf-${validity}-${key}`);
    return { json, list: { text: "", validity, required, allowed: required, kinds: [] }, schemaFault: false };
  }
  b.tag(`conf-bad-${key}`);
  return { json: rng.pick([[70000], [-1], [2.5], "4191,4190", [null], [true], {}]), list: empty, schemaFault: true };
}

function cidrListSetting(b: Builder, key: string): ListSetting<CidrValue> {
  const { rng } = b;
  const empty: TypedList<CidrValue> = { text: "", validity: "valid", required: [], allowed: [], kinds: [] };
  const r = rng.next();
  if (r < 0.6) return { json: undefined, list: empty, schemaFault: false };
  if (r < 0.996) {
    const clean = rng.chance(0.8);
    const items = Array.from({ length: Math.min(listLength(rng), 40) }, () => cidrItem(rng, clean));
    let validity: Validity = "valid";
    for (const it of items) validity = worst(validity, it.validity);
    const values = items.filter((i) => i.validity !== "invalid").map((i) => i.value!);
    if (validity !== "valid") b.tag(`conf-${validity}-${key}`);
    return {
      json: items.map((i) => i.text),
      list: { text: "", validity, required: values, allowed: values, kinds: [] },
      schemaFault: false,
    };
  }
  b.tag(`conf-bad-${key}`);
  return { json: rng.pick([[10], "10.0.0.0/8", [null], {}]), list: empty, schemaFault: true };
}

// --- the conflist entry ----------------------------------------------------------------------

interface ConfChoice {
  json: Json;
  version?: string;
  /** Code 1: a version meshcni does not speak. */
  versionFault: boolean;
  /** Code 7 when read: no usable name, or the schema rejects a value. */
  configFault: boolean;
  prev: PrevChoice;
  kubeconfigBad: boolean;
  excludeNamespaces: string[];
  podNamespace?: string;
  linkerd: {
    incoming: number;
    outgoing: number;
    uid: number;
    gid: number;
    ipv6: boolean;
    redirect: ListSetting<string>;
    inbound: ListSetting<string>;
    outbound: ListSetting<string>;
    subnets: ListSetting<CidrValue>;
  };
  istio: { proxyPort: number; capturePort: number; tunnelPort: number; uid: number; gid: number };
}

function genConf(b: Builder, mesh: "linkerd" | "istio", id: Identity): ConfChoice {
  const { rng } = b;
  const json: Json = {};
  let versionFault = false;
  let version: string | undefined;
  /** Faults of the top level; each section's count only when the section is written. */
  let topFault = false;
  const fault = (tag: string) => {
    b.tag(tag);
    topFault = true;
  };

  if (rng.chance(0.97)) {
    version = rng.pick(SUPPORTED);
    json.cniVersion = version;
  } else {
    b.tag("conf-bad-version");
    versionFault = true;
    const v = rng.pick([undefined, "0.1.0", "0.2.0", "1.2.0", "2.0.0", "1.0", "1.0.0 ", "", 1, null]);
    if (v !== undefined) json.cniVersion = v;
  }
  if (rng.chance(0.98)) json.name = rng.pick(["k8s-pod-network", "meshcni", "a", "net_1.2-x", "0net"]);
  else {
    fault("conf-bad-name");
    const n = rng.pick([undefined, "", 5, "-net", "a b", "ne/t", "ｎｅｔ", ".net", null]);
    if (n !== undefined) json.name = n;
  }
  if (rng.chance(0.9)) json.type = "meshcni";
  if (mesh === "istio" || rng.chance(0.5)) json.mesh = mesh;
  if (rng.chance(0.01)) {
    fault("conf-bad-mesh");
    json.mesh = rng.pick(["cilium", "Linkerd", "", 1]);
  }
  if (rng.chance(0.5)) json.log_level = rng.pick(["debug", "info", "warn", "error", "trace", "", "Debug", "bogus"]);
  if (rng.chance(0.01)) {
    fault("conf-bad-log-level");
    json.log_level = rng.pick([5, null, ["debug"]]);
  }
  if (rng.chance(0.3)) json.timeout_seconds = rng.pick([1, 2, 5, 10, 0.5]);
  if (rng.chance(0.01)) {
    fault("conf-bad-timeout");
    json.timeout_seconds = rng.pick([0, 0.01, 61, "5", -1, null]);
  }

  // kubernetes
  const k8s: Json = {};
  let kubeconfigBad = false;
  let k8sFault = false;
  const kr = rng.next();
  if (kr < 0.94) k8s.kubeconfig = KUBECONFIG;
  else if (kr < 0.97) {
    b.tag("kubeconfig-missing-file");
    kubeconfigBad = true;
    k8s.kubeconfig = rng.pick(["/nonexistent/ZZZ-meshcni-kubeconfig", "", "/etc"]);
  } else if (kr < 0.99) {
    b.tag("kubeconfig-absent");
    kubeconfigBad = true;
  } else {
    b.tag("conf-bad-kubeconfig");
    k8sFault = true;
    k8s.kubeconfig = rng.pick([5, null, [KUBECONFIG]]);
  }
  let excludeNamespaces: string[] = [];
  if (rng.chance(0.5)) {
    excludeNamespaces = [...rng.pick([["kube-system"], ["istio-system", "kube-system"], []])];
    if (rng.chance(0.12)) {
      b.tag("excluded-namespace");
      excludeNamespaces.push(id.ns);
    }
    k8s.exclude_namespaces = excludeNamespaces;
    if (rng.chance(0.02)) {
      b.tag("conf-bad-exclude");
      k8sFault = true;
      k8s.exclude_namespaces = rng.pick(["kube-system", [5], { a: 1 }]);
    }
  }
  let podNamespace: string | undefined;
  if (rng.chance(0.3)) {
    podNamespace = rng.chance(0.5) ? id.ns : "meshcni";
    k8s.pod_namespace = podNamespace;
  }
  const sectionShape = rng.next();
  if (sectionShape < 0.97) {
    json.kubernetes = k8s;
    if (k8sFault) topFault = true;
  } else {
    // Absent (no kubeconfig at all), or not an object.
    excludeNamespaces = [];
    podNamespace = undefined;
    kubeconfigBad = true;
    if (sectionShape > 0.985) {
      fault("conf-bad-kubernetes");
      json.kubernetes = rng.pick(["x", [], null, 5]);
    }
  }

  // The linkerd section (checked by the schema whatever the mesh).
  const L: Json = {};
  const incoming = numberSetting(b, "incoming-proxy-port", 4143, 0, 65535, [4143, 0, 65535, 15006]);
  const outgoing = numberSetting(b, "outgoing-proxy-port", 4140, 0, 65535, [4140, 1, 65535]);
  const uid = numberSetting(b, "proxy-uid", 2102, -1, 4294967294, [2102, 0, -1, 1, 4294967294]);
  const gid = numberSetting(b, "proxy-gid", -1, -1, 4294967294, [-1, 0, 2102, 4294967294]);
  const redirect = portListSetting(b, "ports-to-redirect", false);
  const inbound = portListSetting(b, "inbound-ports-to-ignore", true);
  const outbound = portListSetting(b, "outbound-ports-to-ignore", true);
  const subnets = cidrListSetting(b, "subnets-to-ignore");
  const ipv6 = boolSetting(b, "ipv6", false);
  const linkerdSettings: [string, { json: unknown; schemaFault: boolean }][] = [
    ["incoming-proxy-port", incoming],
    ["outgoing-proxy-port", outgoing],
    ["proxy-uid", uid],
    ["proxy-gid", gid],
    ["ports-to-redirect", redirect],
    ["inbound-ports-to-ignore", inbound],
    ["outbound-ports-to-ignore", outbound],
    ["subnets-to-ignore", subnets],
    ["ipv6", ipv6],
    ["simulate", boolSetting(b, "simulate", false)],
    ["use-wait-flag", boolSetting(b, "use-wait-flag", false)],
    ["iptables-mode", modeSetting(b, "iptables-mode")],
  ];
  for (const [key, s] of linkerdSettings) if (s.json !== undefined) L[key] = s.json;
  if (rng.chance(0.1)) L["unknown-key"] = "kept";
  const linkerdWritten = mesh === "linkerd" ? rng.chance(0.85) : rng.chance(0.15);
  if (linkerdWritten) json.linkerd = L;
  const linkerdFault = linkerdWritten && linkerdSettings.some(([, s]) => s.schemaFault);
  const lk = <T>(s: { value: T }, def: T) => (linkerdWritten ? s.value : def);
  const none: ListSetting<any> = {
    json: undefined,
    list: { text: "", validity: "valid", required: [], allowed: [], kinds: [] },
    schemaFault: false,
  };

  // The istio section.
  const I: Json = {};
  const proxyPort = numberSetting(b, "proxy-port", 15001, 0, 65535, [15001, 8080]);
  const capturePort = numberSetting(b, "inbound-capture-port", 15006, 0, 65535, [15006, 9000]);
  const tunnelPort = numberSetting(b, "inbound-tunnel-port", 15008, 0, 65535, [15008, 0]);
  const iuid = numberSetting(b, "istio-proxy-uid", 1337, 1, 4294967294, [1337, 1, 4294967294]);
  const igid = numberSetting(b, "istio-proxy-gid", 1337, 1, 4294967294, [1337, 1, 4294967294]);
  const istioSettings: [string, { json: unknown; schemaFault: boolean }][] = [
    ["proxy-port", proxyPort],
    ["inbound-capture-port", capturePort],
    ["inbound-tunnel-port", tunnelPort],
    ["proxy-uid", iuid],
    ["proxy-gid", igid],
    ["simulate", boolSetting(b, "istio-simulate", false)],
    ["use-wait-flag", boolSetting(b, "istio-use-wait-flag", false)],
    ["iptables-mode", modeSetting(b, "istio-iptables-mode")],
  ];
  for (const [key, s] of istioSettings) if (s.json !== undefined) I[key] = s.json;
  const istioWritten = mesh === "istio" ? rng.chance(0.6) : rng.chance(0.1);
  if (istioWritten) json.istio = I;
  const istioFault = istioWritten && istioSettings.some(([, s]) => s.schemaFault);
  const is = <T>(s: { value: T }, def: T) => (istioWritten ? s.value : def);

  if (rng.chance(0.15)) json.capabilities = { portMappings: true };
  if (rng.chance(0.1)) json.runtimeConfig = { portMappings: [{ hostPort: 8080, containerPort: 80, protocol: "tcp" }] };
  if (rng.chance(0.1)) json.args = { cni: { labels: [{ key: "app", value: "x" }] } };
  if (rng.chance(0.05)) json.ipam = { type: "host-local" };

  const prev = genPrev(b);
  if (prev.present) json.prevResult = prev.value;

  return {
    json,
    ...(version !== undefined ? { version } : {}),
    versionFault,
    configFault: topFault || linkerdFault || istioFault || prev.fault === "schema",
    prev,
    kubeconfigBad,
    excludeNamespaces,
    ...(podNamespace !== undefined ? { podNamespace } : {}),
    linkerd: {
      incoming: lk(incoming, 4143),
      outgoing: lk(outgoing, 4140),
      uid: lk(uid, 2102),
      gid: lk(gid, -1),
      ipv6: lk(ipv6, false),
      redirect: linkerdWritten ? redirect : none,
      inbound: linkerdWritten ? inbound : none,
      outbound: linkerdWritten ? outbound : none,
      subnets: linkerdWritten ? subnets : none,
    },
    istio: {
      proxyPort: is(proxyPort, 15001),
      capturePort: is(capturePort, 15006),
      tunnelPort: is(tunnelPort, 15008),
      uid: is(iuid, 1337),
      gid: is(igid, 1337),
    },
  };
}

// --- pods ------------------------------------------------------------------------------------

type PodState = "missing" | "malformed" | "skip" | "meshed";

interface PodChoice {
  body: unknown;
  state: PodState;
  /** Linkerd: an annotation is missing or empty on the pod, so the namespace is read. */
  needsNamespace: boolean;
  namespace: { body: unknown; state: "missing" | "malformed" | "ok" };
  /** Whether the settings and annotations are all valid (else code 7, or either). */
  validity: Validity;
  rules?: LinkerdRules | IstioRules;
}

function container(name: string, extra: Json = {}): Json {
  return { name, image: `example/${name}:1`, ...extra };
}

/** Breaks the pod so that it is not a Pod object (the API stand-in answering nonsense). */
function malform(b: Builder, pod: Json): unknown {
  const { rng } = b;
  b.tag("pod-malformed");
  const how = rng.int(10);
  const p = structuredClone(pod);
  switch (how) {
    case 0:
      p.metadata.annotations = { ...p.metadata.annotations, "config.linkerd.io/proxy-uid": 5 };
      break;
    case 1:
      p.metadata.labels = "x";
      break;
    case 2:
      delete p.spec;
      break;
    case 3:
      p.spec.containers = "x";
      break;
    case 4:
      p.spec.containers = [{ image: "no-name" }];
      break;
    case 5:
      delete p.metadata.name;
      break;
    case 6:
      p.spec.containers = [container("istio-proxy", { env: [{ value: "x" }] })];
      break;
    case 7:
      p.spec.containers = [container("istio-proxy", { securityContext: { runAsUser: "1000" } })];
      break;
    case 8:
      return rng.pick([[p], "pod", 5, null]);
    default:
      p.metadata = null;
      break;
  }
  return p;
}

/**
 * Where the proxy sits: a sidecar (the default), a native sidecar, next to the mesh's own init
 * container (no rules), absent, or another mesh's. `p` are the cumulative chances of the last
 * four. The proxy object is placed as it is, so what is set on it later lands in the pod.
 */
function shape(
  b: Builder,
  spec: Json,
  app: Json,
  proxy: Json,
  names: { mesh: string; init: string; other: string },
  p: [number, number, number, number],
): boolean {
  const kind = b.rng.next();
  if (kind < p[0]) {
    spec.containers = [app];
    proxy.restartPolicy = "Always";
    spec.initContainers = [proxy];
    b.tag(`${names.mesh}-native-sidecar`);
    return true;
  }
  if (kind < p[1]) {
    spec.initContainers = [container(names.init)];
    b.tag(names.init);
  } else if (kind < p[2]) {
    spec.containers = [app];
    b.tag("no-proxy");
  } else if (kind < p[3]) {
    spec.containers = [app, container(names.other)];
    b.tag("other-mesh-pod");
  } else return true;
  return false;
}

/** What the API stand-in serves for the pod: mostly the pod, sometimes nothing (404) or nonsense. */
function served(b: Builder, pod: Json, meshed: boolean): { state: PodState; body: unknown } {
  const pr = b.rng.next();
  if (pr < 0.03) {
    b.tag("pod-missing");
    return { state: "missing", body: pod };
  }
  if (pr < 0.07) return { state: "malformed", body: malform(b, pod) };
  return { state: meshed ? "meshed" : "skip", body: pod };
}

function linkerdPod(b: Builder, id: Identity, conf: ConfChoice): PodChoice {
  const { rng } = b;
  const labels: Json = { app: "web" };
  const annotations: Json = { "linkerd.io/inject": "enabled" };
  const nsAnnotations: Json = {};
  const proxy = container("linkerd-proxy", { env: [{ name: "LINKERD2_PROXY_LOG", value: "warn" }] });
  const app = container("app");
  const spec: Json = { containers: [app, proxy] };
  let meshed = true;
  meshed = shape(
    b,
    spec,
    app,
    proxy,
    { mesh: "linkerd", init: "linkerd-init", other: "istio-proxy" },
    [0.1, 0.17, 0.26, 0.3],
  );
  let controlPlane = false;
  if (rng.chance(0.08)) {
    const v = rng.pick(["destination", "identity", ""]);
    labels["linkerd.io/control-plane-component"] = v;
    controlPlane = v !== "";
    b.tag("control-plane");
  }

  const A = {
    inbound: "config.linkerd.io/skip-inbound-ports",
    outbound: "config.linkerd.io/skip-outbound-ports",
    subnets: "config.linkerd.io/skip-subnets",
    uid: "config.linkerd.io/proxy-uid",
    gid: "config.linkerd.io/proxy-gid",
  };
  let validity: Validity = "valid";
  let needsNamespace = false;
  let nsUsed = false;
  /** Sets the annotation on the pod and/or namespace; returns the effective typed value. */
  const annotate = <T>(key: string, make: () => TypedList<T>): TypedList<T> | undefined => {
    const onPod = rng.next();
    const onNs = rng.next();
    let podValue: TypedList<T> | undefined;
    let nsValue: TypedList<T> | undefined;
    if (onPod < 0.45) {
      podValue = make();
      annotations[key] = podValue.text;
    } else if (onPod < 0.5) annotations[key] = "";
    if (onNs < 0.25) {
      nsValue = make();
      nsAnnotations[key] = nsValue.text;
    } else if (onNs < 0.28) nsAnnotations[key] = "";
    if (annotations[key] === undefined || annotations[key] === "") needsNamespace = true;
    const effective =
      podValue && podValue.text !== "" ? podValue : nsValue && nsValue.text !== "" ? nsValue : undefined;
    if (effective && effective === nsValue) nsUsed = true;
    return effective;
  };
  const portList = (ranges: boolean) => () => typedList(rng, listLength(rng), (clean) => portItem(rng, ranges, clean));
  const cidrList = () => typedList(rng, Math.min(listLength(rng), 300), (clean) => cidrItem(rng, clean));
  const idValue = () => {
    const it = idItem(rng, rng.chance(0.7));
    return {
      text: it.text,
      validity: it.validity,
      required: it.value === undefined ? [] : [it.value],
      allowed: [],
      kinds: [it.kind],
    } as TypedList<number>;
  };
  const inbound = annotate(A.inbound, portList(true));
  const outbound = annotate(A.outbound, portList(true));
  const subnets = annotate(A.subnets, cidrList);
  const uid = annotate(A.uid, idValue);
  const gid = annotate(A.gid, idValue);
  for (const a of [inbound, outbound, subnets, uid, gid]) if (a) validity = worst(validity, a.validity);
  if (validity !== "valid") b.tag(`annotation-${validity}`);
  const L = conf.linkerd;
  for (const s of [L.redirect, L.inbound, L.outbound, L.subnets]) validity = worst(validity, s.list.validity);

  const metadata = { name: id.name, namespace: id.ns, uid: POD_UID, labels, annotations };
  const pod: Json = { apiVersion: "v1", kind: "Pod", metadata, spec };
  const nsBody: Json = { apiVersion: "v1", kind: "Namespace", metadata: { name: id.ns, annotations: nsAnnotations } };
  if (rng.chance(0.1))
    (pod.metadata as Json).annotations = { ...annotations, "unrelated.example.com/x": "y\n-A OUTPUT -j ACCEPT" };

  const { state, body } = served(b, pod, meshed);
  let nsState: "missing" | "malformed" | "ok" = "ok";
  let ns: unknown = nsBody;
  const nr = rng.next();
  if (nr < 0.04) nsState = "missing";
  else if (nr < 0.07) {
    nsState = "malformed";
    ns = rng.pick([{ metadata: { name: id.ns, annotations: { [A.inbound]: 5 } } }, { kind: "Namespace" }, "ns"]);
  }
  if (needsNamespace && meshed && state === "meshed") {
    if (nsState !== "ok") b.tag(`namespace-${nsState}`);
    if (nsUsed) b.tag("namespace-annotations");
  }

  const values = <T>(l: TypedList<T> | undefined, fallback: T[]) => (l ? l.required : fallback);
  const rules: LinkerdRules = {
    mesh: "linkerd",
    incoming: L.incoming,
    outgoing: L.outgoing,
    uid: uid ? uid.required[0]! : L.uid,
    gid: gid ? gid.required[0]! : L.gid,
    redirectPorts: L.redirect.list.required,
    inPorts: [...L.inbound.list.required, ...values(inbound, [])],
    outPorts: [...values(outbound, L.outbound.list.required), ...(controlPlane ? ["443", "6443"] : [])],
    subnets: values(subnets, L.subnets.list.required),
    ipv6: L.ipv6,
  };
  return { body, state, needsNamespace, namespace: { body: ns, state: nsState }, validity, rules };
}

const ISTIO_STATUS = JSON.stringify({
  initContainers: ["istio-validation"],
  containers: ["istio-proxy"],
  volumes: ["istio-envoy"],
  imagePullSecrets: null,
  revision: "default",
});

/**
 * istio-cni's list rules on top of the items' own validity: split on ",", an empty item fails
 * (a doubled or trailing comma, a blank between commas), a CIDR with spaces around it fails;
 * ports are trimmed, so are interface names.
 */
function istioStrict(kind: "ports" | "cidrs" | "ifaces", text: string, validity: Validity): Validity {
  if (text === "" || (kind === "ports" && text.trim() === "")) return validity;
  const items = (kind === "ports" ? text.trim() : text).split(",");
  if (items.some((i) => i.trim() === "")) return "invalid";
  if (kind === "cidrs" && items.some((i) => i !== i.trim())) return "invalid";
  return validity;
}

function istioPod(b: Builder, id: Identity, conf: ConfChoice): PodChoice {
  const { rng } = b;
  const labels: Json = { app: "reviews", "security.istio.io/tlsMode": "istio" };
  const annotations: Json = { "sidecar.istio.io/status": ISTIO_STATUS };
  const env: Json[] = [
    { name: "PILOT_CERT_PROVIDER", value: "istiod" },
    { name: "POD_NAME", valueFrom: { fieldRef: { fieldPath: "metadata.name" } } },
  ];
  const proxy: Json = container("istio-proxy", {
    args: ["proxy", "sidecar", "--domain", "$(POD_NAMESPACE).svc.cluster.local"],
    env,
  });
  const app = container("reviews");
  const spec: Json = { containers: [app, proxy] };
  let meshed = true;
  meshed = shape(
    b,
    spec,
    app,
    proxy,
    { mesh: "istio", init: "istio-init", other: "linkerd-proxy" },
    [0.1, 0.15, 0.2, 0.24],
  );
  // DISABLE_ENVOY, the proxy's mode, the inject label/annotation and the status annotation.
  if (rng.chance(0.08)) {
    const v = rng.pick(["true", "1", "t", "TRUE", "True", "false", "0", "garbage", "", "yes"]);
    env.push({ name: "DISABLE_ENVOY", value: v });
    if (goBool(v) === true) meshed = false;
    b.tag("disable-envoy");
  }
  if (rng.chance(0.08)) {
    const args = rng.pick([
      ["proxy", "router"],
      ["proxy", "sidecar"],
      ["proxy"],
      [],
      ["x", "router"],
      ["proxy", "waypoint"],
    ]);
    proxy.args = args;
    if (args[0] === "proxy" && args[1] !== undefined && args[1] !== "sidecar") meshed = false;
    b.tag("proxy-args");
  }
  if (rng.chance(0.1)) {
    const label = rng.pick([undefined, "true", "false", "garbage", "0", ""]);
    const ann = rng.pick([undefined, "true", "false", "f", "garbage"]);
    if (label !== undefined) labels["sidecar.istio.io/inject"] = label;
    if (ann !== undefined) annotations["sidecar.istio.io/inject"] = ann;
    const from = label !== undefined ? label : ann;
    if (goBool(from) === false) meshed = false;
    b.tag("inject");
  }
  if (rng.chance(0.04)) {
    delete annotations["sidecar.istio.io/status"];
    meshed = false;
    b.tag("no-status");
  }

  const P = "traffic.sidecar.istio.io/";
  /** The validity of each annotation that is read. */
  const read = new Map<string, Validity>();
  const present = (p: number) => rng.chance(p);
  let mode: "REDIRECT" | "TPROXY" = "REDIRECT";
  if (present(0.4)) {
    if (rng.chance(0.9)) {
      mode = rng.chance(0.5) ? "REDIRECT" : "TPROXY";
      annotations["sidecar.istio.io/interceptionMode"] = mode;
    } else {
      annotations["sidecar.istio.io/interceptionMode"] = rng.pick([
        "NONE",
        "redirect",
        "tproxy",
        "",
        " TPROXY",
        "TPROXY\n-A OUTPUT -j ACCEPT",
        "REDIRECT,TPROXY",
      ]);
      read.set("interceptionMode", "invalid");
      b.tag("bad-interception-mode");
    }
  }
  const cidrs = () => typedList(rng, Math.min(listLength(rng), 300), (clean) => cidrItem(rng, clean));
  const ports = () => typedList(rng, listLength(rng), (clean) => portItem(rng, false, clean));
  const ifaces = () => typedList(rng, Math.min(listLength(rng), 20), (clean) => interfaceItem(rng, clean));
  /** Absent, "*" (meaning `star`), "" (an empty list) or a list. */
  const starOrList = <T>(
    key: string,
    prob: number,
    star: "all" | "invalid" | "none",
    list: () => TypedList<T>,
    kind: "ports" | "cidrs" | "ifaces",
  ): { star?: boolean; list?: TypedList<T> } | undefined => {
    if (!present(prob)) return undefined;
    const r = rng.next();
    if (star !== "none" && r < 0.25) {
      const padded = rng.chance(0.2);
      annotations[key] = padded ? rng.pick([" *", "* ", "\t*"]) : "*";
      // istio-cni compares with "*" before trimming: a padded star is not a star (and not a list).
      read.set(key, star === "invalid" || padded ? "invalid" : "valid");
      return { star: true };
    }
    if (r < 0.35) {
      annotations[key] = "";
      read.set(key, "valid");
      return { list: { text: "", validity: "valid", required: [], allowed: [], kinds: [] } };
    }
    let l = list();
    // A list that happens to read "*" is the star, not a list: draw again.
    while (l.text.trim() === "*") l = list();
    annotations[key] = l.text;
    read.set(key, istioStrict(kind, l.text, l.validity));
    return { list: l };
  };
  const incOut = starOrList(`${P}includeOutboundIPRanges`, 0.4, "all", cidrs, "cidrs");
  const excOut = starOrList(`${P}excludeOutboundIPRanges`, 0.3, "invalid", cidrs, "cidrs");
  const incIn = starOrList(`${P}includeInboundPorts`, 0.35, "all", ports, "ports");
  const excIn = starOrList(`${P}excludeInboundPorts`, 0.35, "all", ports, "ports");
  const incOutPorts = starOrList(`${P}includeOutboundPorts`, 0.2, "none", ports, "ports");
  const excOutPorts = starOrList(`${P}excludeOutboundPorts`, 0.25, "none", ports, "ports");
  const excIf = starOrList(`${P}excludeInterfaces`, 0.15, "none", ifaces, "ifaces");
  const kubevirt = starOrList(`${P}kubevirtInterfaces`, 0.08, "none", ifaces, "ifaces");
  const reroute = starOrList("istio.io/reroute-virtual-interfaces", 0.08, "none", ifaces, "ifaces");
  if (reroute && kubevirt) {
    // istio.io/reroute-virtual-interfaces replaces the deprecated kubevirtInterfaces, which is not read.
    read.delete(`${P}kubevirtInterfaces`);
    b.tag("reroute-over-kubevirt");
  }
  let validity: Validity = "valid";
  for (const v of read.values()) validity = worst(validity, v);

  // The proxy's env and securityContext.
  const envFlag = (name: string) => {
    if (!rng.chance(0.15)) return false;
    const v = rng.pick(["true", "1", "True", "false", "0", "garbage", ""]);
    env.push({ name, value: v });
    return goBool(v) === true;
  };
  const dns = envFlag("ISTIO_META_DNS_CAPTURE");
  const dropInvalid = envFlag("INVALID_DROP");
  const dualStack = envFlag("ISTIO_DUAL_STACK");
  let uid = conf.istio.uid;
  let gid = conf.istio.gid;
  if (rng.chance(0.15)) {
    const sc: Json = {};
    const pickId = () => rng.pick([0, null, 1000, 1000650000, 4294967294, -5, 1.5, 4294967295, undefined]);
    const u = pickId();
    const g = pickId();
    if (u !== undefined) sc.runAsUser = u;
    if (g !== undefined) sc.runAsGroup = g;
    proxy.securityContext = sc;
    if (u) uid = u;
    if (g) gid = g;
    for (const n of [uid, gid]) if (!Number.isInteger(n) || n < 1 || n > 4294967294) validity = "invalid";
    b.tag("security-context");
  }
  if (validity !== "valid") b.tag(`annotation-${validity}`);

  const metadata = { name: id.name, namespace: id.ns, uid: POD_UID, labels, annotations };
  const pod: Json = { apiVersion: "v1", kind: "Pod", metadata, spec };
  const { state, body } = served(b, pod, meshed);

  const excludeInList = excIn?.star ? [] : (excIn?.list?.required ?? []);
  const rules: IstioRules = {
    mesh: "istio",
    mode,
    proxyPort: conf.istio.proxyPort,
    capturePort: conf.istio.capturePort,
    tunnelPort: conf.istio.tunnelPort,
    uid,
    gid,
    includeOut: !incOut || incOut.star ? "*" : incOut.list!.required,
    excludeOut: excOut?.list?.required ?? [],
    // An explicit include list is captured whatever the exclude list says; "*" minus "*" is nothing.
    includeIn: !incIn || incIn.star ? (excIn?.star ? [] : "*") : incIn.list!.required,
    excludeIn: [...excludeInList, "15020", "15021", "15090"],
    includeOutPorts: incOutPorts?.list?.required ?? [],
    excludeOutPorts: excOutPorts ? excOutPorts.list!.required : ["15020"],
    excludeIfaces: excIf?.list?.required ?? [],
    rerouteIfaces: reroute ? reroute.list!.required : (kubevirt?.list?.required ?? []),
    dns,
    dropInvalid,
    ipv6: dualStack ? conf.prev.v6 : conf.prev.v6only === true,
  };
  return { body, state, needsNamespace: false, namespace: { body: undefined, state: "ok" }, validity, rules };
}

// --- havoc -----------------------------------------------------------------------------------

const HAVOC_CHARS = [
  '"',
  "{",
  "}",
  "[",
  "]",
  ",",
  ":",
  "\\",
  "0",
  "9",
  "-",
  "e",
  "\n",
  " ",
  "\u0000",
  "é",
  "😀",
  "\ud7ff",
  "null",
  "true",
  "1e999",
];

function havocString(rng: Rng, s: string): string {
  let out = s;
  for (let i = rng.range(1, 6); i > 0; i--) {
    const at = rng.int(out.length + 1);
    const r = rng.int(4);
    if (r === 0) out = out.slice(0, at) + rng.pick(HAVOC_CHARS) + out.slice(at);
    else if (r === 1) out = out.slice(0, at) + out.slice(at + rng.range(1, 8));
    else if (r === 2)
      out = out.slice(0, at) + out.slice(at, at + rng.range(1, 40)).repeat(rng.range(2, 5)) + out.slice(at);
    else out = out.slice(0, at) + rng.pick(HAVOC_CHARS) + out.slice(at + 1);
  }
  return out;
}

function parseOr(text: string): Json {
  try {
    const v = JSON.parse(text);
    return v && typeof v === "object" && !Array.isArray(v) ? v : {};
  } catch {
    return {};
  }
}

/**
 * Havoc may split a surrogate pair; a process receives such text as U+FFFD, so the case carries
 * it that way and the in-process and binary runs see the same input.
 */
function wellFormed(c: { env: Record<string, string>; stdin: string; objects: Record<string, unknown> }): void {
  c.stdin = c.stdin.toWellFormed();
  for (const k of Object.keys(c.env)) c.env[k] = c.env[k]!.toWellFormed();
  for (const [path, body] of Object.entries(c.objects)) {
    const ann = (body as Json | null)?.metadata?.annotations;
    if (ann && typeof ann === "object")
      for (const k of Object.keys(ann)) if (typeof ann[k] === "string") ann[k] = ann[k].toWellFormed();
    c.objects[path] = body;
  }
}

function applyHavoc(
  b: Builder,
  c: { env: Record<string, string>; stdin: string; objects: Record<string, unknown> },
  podPath: string | undefined,
): void {
  const { rng } = b;
  const r = rng.int(6);
  if (r === 0) {
    b.tag("havoc-stdin");
    c.stdin = havocString(rng, c.stdin);
  } else if (r === 1) {
    b.tag("havoc-deep-json");
    const depth = rng.pick([1000, 20_000, 200_000]);
    const obj = parseOr(c.stdin);
    const key = rng.pick(["x-deep", "prevResult", "linkerd", "kubernetes"]);
    const deep = `${"[".repeat(depth)}${"]".repeat(depth)}`;
    const text = JSON.stringify({ ...obj, [key]: 0 });
    c.stdin = text.replace(
      `"${key}":0`,
      `"${key}":${key === "prevResult" ? `{"cniVersion":"1.0.0","ips":[],"d":${deep}}` : deep}`,
    );
  } else if (r === 2) {
    b.tag("havoc-huge-stdin");
    const obj = parseOr(c.stdin);
    obj[rng.pick(["x-big", "log_level", "name"])] = "a".repeat(rng.pick([100_000, 2_000_000]));
    if (obj.prevResult && typeof obj.prevResult === "object" && rng.chance(0.5)) {
      obj.prevResult.ips = Array.from({ length: 20_000 }, (_, i) => ({
        address: `10.${(i >> 8) & 255}.${i & 255}.1/24`,
      }));
    }
    c.stdin = JSON.stringify(obj);
  } else if (r === 3) {
    b.tag("havoc-args");
    c.env.CNI_ARGS = havocString(rng, c.env.CNI_ARGS ?? "").replace(/\u0000/g, "");
  } else if (r === 4 && podPath && c.objects[podPath] && typeof c.objects[podPath] === "object") {
    b.tag("havoc-annotations");
    const pod = c.objects[podPath] as Json;
    const ann = pod.metadata?.annotations;
    if (ann && typeof ann === "object") {
      for (const k of Object.keys(ann)) if (rng.chance(0.5)) ann[k] = havocString(rng, String(ann[k]));
    }
  } else {
    b.tag("havoc-env");
    const key = rng.pick(["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH", "CNI_COMMAND"]);
    c.env[key] = havocString(rng, c.env[key] ?? "").replace(/\u0000/g, "");
  }
}

// --- the case ----------------------------------------------------------------------------------

const err = (codes: number[], why: string, command: string | undefined): Expectation => ({
  command,
  codes,
  ok: false,
  weak: false,
  why,
});

/**
 * Case `index` of a run seeded with `seed`. `as: "agent"` gives the same inputs with the
 * expectation of an ADD the node agent plans: the agent holds the pod in its watch cache, so the
 * plugin's kubeconfig is never read and a bad one is no error (agent-fuzz.ts).
 */
export function buildCase(seed: number, index: number, opts: { as?: "plugin" | "agent" } = {}): FuzzCase {
  const rng = createRng(caseSeed(seed, index));
  const b = new Builder(rng);
  const mesh = rng.chance(0.5) ? "linkerd" : "istio";
  b.tag(mesh);
  const suffix = index.toString(36);
  const nsBase = rng.pick(NS_BASES);
  const podBase = rng.chance(0.05) ? `meshcni-node-${suffix}` : rng.pick(POD_BASES);
  const id: Identity = {
    ns: rng.chance(0.03) ? `${"n".repeat(62 - suffix.length)}-${suffix}` : `${nsBase}-${suffix}`,
    name: rng.chance(0.03)
      ? `${"p".repeat(252 - suffix.length)}-${suffix}`
      : podBase.startsWith("meshcni-node-")
        ? podBase
        : `${podBase}-${suffix}`,
  };

  const command = genCommand(b);
  if (command !== undefined) b.tag(`cmd-${command || "empty"}`);
  const containerId = genContainerId(b);
  const netns = genNetns(b);
  const ifname = genIfname(b);
  const args = genArgs(b, id);
  const env: Record<string, string> = {};
  const set = (k: string, v: string | undefined) => {
    if (v !== undefined) env[k] = v;
  };
  set("CNI_COMMAND", command);
  set("CNI_CONTAINERID", containerId.value);
  set("CNI_NETNS", netns.value);
  set("CNI_IFNAME", ifname.value);
  set("CNI_ARGS", args.text);
  set("CNI_PATH", rng.pick(["/opt/cni/bin", "/opt/cni/bin:/usr/lib/cni", "", "::", "relative"]));

  const conf = genConf(b, mesh, id);
  let stdin = JSON.stringify(conf.json, null, rng.chance(0.3) ? 2 : undefined);
  let decodeFault = false;
  if (rng.chance(0.04)) {
    b.tag("stdin-undecodable");
    decodeFault = true;
    stdin = rng.pick([
      "",
      "{",
      "[]",
      "null",
      '"str"',
      "42",
      stdin.slice(0, Math.max(1, stdin.length >> 1)),
      `${stdin.slice(0, -1)},}`,
      `${stdin}x`,
      "{'a':1}",
      "NaN",
      "\ufeff",
    ]);
  } else if (rng.chance(0.02)) {
    // A byte order mark: reading stdin as UTF-8 drops it (RFC 8259 lets parsers ignore it).
    b.tag("stdin-bom");
    stdin = `\ufeff${stdin}`;
  }

  const pod = mesh === "linkerd" ? linkerdPod(b, id, conf) : istioPod(b, id, conf);
  const podPath = `/api/v1/namespaces/${id.ns}/pods/${id.name}`;
  const objects: Record<string, unknown> = {};
  if (pod.state !== "missing") objects[podPath] = pod.body;
  if (pod.namespace.state !== "missing" && pod.namespace.body !== undefined)
    objects[`/api/v1/namespaces/${id.ns}`] = pod.namespace.body;

  // A pod deleted and created again under its name: the runtime's K8S_POD_UID is the old one's.
  let recreated = false;
  if (args.uid && (pod.state === "meshed" || pod.state === "skip") && rng.chance(0.03)) {
    b.tag("pod-recreated");
    recreated = true;
    (objects[podPath] as Json).metadata.uid = "0d6c1c8e-0000-4000-8000-recreated000";
  }

  const c = { seed, index, mesh, tags: b.tags, env, stdin, objects } as FuzzCase;
  if (rng.chance(0.08)) {
    applyHavoc(b, c, podPath);
    wellFormed(c);
    c.expect = {
      command: c.env.CNI_COMMAND,
      codes: [...DOCUMENTED_CODES],
      ok: true,
      weak: true,
      why: "havoc: generic checks only",
    };
    return c;
  }
  const agentConf = opts.as === "agent" ? { ...conf, kubeconfigBad: false } : conf;
  c.expect = decide({
    command,
    containerId,
    netns,
    ifname,
    args,
    conf: agentConf,
    decodeFault,
    pod,
    recreated,
    as: opts.as ?? "plugin",
    stdin,
    mesh,
    id,
  });
  return c;
}

interface Facts {
  command: string | undefined;
  containerId: EnvChoice;
  netns: EnvChoice;
  ifname: EnvChoice;
  args: ArgsChoice;
  conf: ConfChoice;
  decodeFault: boolean;
  pod: PodChoice;
  /** The pod has another UID than K8S_POD_UID. */
  recreated: boolean;
  /** Whose expectation: the plugin's own ADD, or one the agent plans from its cache. */
  as: "plugin" | "agent";
  stdin: string;
  mesh: "linkerd" | "istio";
  id: Identity;
}

/** The documented outcome; an unusual but harmless CNI_IFNAME may also be refused (code 4). */
function decide(f: Facts): Expectation {
  const e = decideStages(f);
  if ([f.containerId, f.netns, f.ifname].some((c) => c.either) && f.command !== "VERSION" && !e.codes.includes(4))
    e.codes.push(4);
  return e;
}

/** The documented outcome for the facts, stage by stage. */
function decideStages(f: Facts): Expectation {
  const cmd = f.command;
  if (cmd === undefined || cmd === "" || !COMMANDS.includes(cmd))
    return err([4], "CNI_COMMAND missing or unknown", cmd);
  const needs = (e: EnvChoice) => e.valid;
  if (cmd === "ADD" || cmd === "CHECK") {
    if (!needs(f.containerId) || !needs(f.netns) || !needs(f.ifname))
      return err([4], "a required CNI_ variable is missing or invalid", cmd);
  }
  if (cmd === "DEL") {
    const netnsOk = f.netns.valid || f.netns.value === undefined || f.netns.value === "";
    if (!needs(f.containerId) || !needs(f.ifname) || !netnsOk)
      return err([4], "a required CNI_ variable is missing or invalid", cmd);
  }
  if (cmd === "VERSION")
    return { command: cmd, codes: [], ok: true, weak: false, stdout: versionAnswer(f.stdin), why: "VERSION" };
  if (f.decodeFault) return err([6], "stdin is not a JSON object", cmd);
  if (f.conf.versionFault) return err([1], "cniVersion not supported", cmd);
  if (f.conf.configFault) return err([7], "the config does not fit the schema", cmd);
  const version = f.conf.version!;
  const older = (min: string) => SUPPORTED.indexOf(version as never) < SUPPORTED.indexOf(min as never);
  if (cmd === "CHECK" && older("0.4.0")) return err([1], "CHECK needs 0.4.0", cmd);
  if ((cmd === "STATUS" || cmd === "GC") && older("1.1.0")) return err([1], `${cmd} needs 1.1.0`, cmd);
  const ok = (why: string, stdout: unknown = "", rules?: Expectation["rules"]): Expectation => ({
    command: cmd,
    codes: [],
    ok: true,
    weak: false,
    stdout,
    ...(rules ? { rules } : {}),
    why,
  });
  if (cmd === "DEL") return ok("DEL in a dry run");
  if (cmd === "GC") return ok("GC");
  if (cmd === "STATUS") return f.conf.kubeconfigBad ? err([50], "STATUS without a kubeconfig", cmd) : ok("STATUS");
  // ADD and CHECK
  if (f.conf.prev.fault === 1 || f.conf.prev.fault === 7)
    return err([f.conf.prev.fault], "prevResult cannot be converted", cmd);
  const stdout =
    cmd === "ADD"
      ? expectedResult(f.conf.prev.present ? (f.conf.prev.value as Record<string, unknown>) : undefined, version)
      : "";
  if (f.args.fault) return err([4], "CNI_ARGS invalid", cmd);
  if (!f.args.pod) return ok("not a Kubernetes pod", stdout);
  const { ns, name } = f.args.pod;
  if (f.conf.excludeNamespaces.includes(ns)) return ok("excluded namespace", stdout);
  if (f.conf.podNamespace === ns && name.startsWith("meshcni-node-")) return ok("meshcni's own pod", stdout);
  if (f.conf.kubeconfigBad) return err([107], "no usable kubeconfig", cmd);
  if (f.pod.state === "missing") return err([106], "pod not found", cmd);
  if (f.recreated) return err([106], "the pod has another UID than K8S_POD_UID (deleted and created again)", cmd);
  // The agent's lookup finds no UID in it to match K8S_POD_UID: to the agent no such pod exists.
  if (f.pod.state === "malformed") {
    return err(f.as === "agent" && f.args.uid ? [11, 106] : [11], "the API sent something that is not a Pod", cmd);
  }
  if (f.pod.state === "skip") return ok("the mesh does not redirect this pod", stdout);
  if (f.pod.needsNamespace) {
    if (f.pod.namespace.state === "missing") return err([106], "namespace not found", cmd);
    if (f.pod.namespace.state === "malformed") return err([11], "the API sent something that is not a Namespace", cmd);
  }
  if (f.pod.validity === "invalid") return err([7], "an invalid annotation or setting", cmd);
  const rules = cmd === "ADD" ? f.pod.rules : undefined;
  const e = ok("redirected", stdout, rules);
  if (f.pod.validity === "either") {
    e.codes = [7];
    e.why = "redirected, or an unusual spelling rejected";
  }
  return e;
}
