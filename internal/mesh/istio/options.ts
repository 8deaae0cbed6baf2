// What an Istio sidecar pod asks for: istio-cni's annotation table, the istio-proxy container's
// env and securityContext, and the pod's addresses, read with Istio's meaning and validated
// strictly. Only what parsed here can reach an iptables argument. Pure.
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import type { PluginConf } from "../../config/plugin-config.ts";
import { allContainers, type Container, type Pod } from "../../kube/objects.ts";
import { type Cidr, parseCidrList, parseIPv4, parseIPv6 } from "../../net/cidr.ts";
import { parsePortList } from "../../net/ports.ts";
import { quote } from "../../text/escape.ts";

export const ISTIO_PROXY = "istio-proxy";
export const ISTIO_INIT = "istio-init";

/** The pod annotations istio-cni reads (seed 004's table and the later additions). */
export const IstioAnnotations = {
  inject: "sidecar.istio.io/inject",
  status: "sidecar.istio.io/status",
  interceptionMode: "sidecar.istio.io/interceptionMode",
  includeOutboundIPRanges: "traffic.sidecar.istio.io/includeOutboundIPRanges",
  excludeOutboundIPRanges: "traffic.sidecar.istio.io/excludeOutboundIPRanges",
  includeInboundPorts: "traffic.sidecar.istio.io/includeInboundPorts",
  excludeInboundPorts: "traffic.sidecar.istio.io/excludeInboundPorts",
  includeOutboundPorts: "traffic.sidecar.istio.io/includeOutboundPorts",
  excludeOutboundPorts: "traffic.sidecar.istio.io/excludeOutboundPorts",
  excludeInterfaces: "traffic.sidecar.istio.io/excludeInterfaces",
  kubevirtInterfaces: "traffic.sidecar.istio.io/kubevirtInterfaces",
  rerouteVirtualInterfaces: "istio.io/reroute-virtual-interfaces",
} as const;

/** Ports of the proxy itself that are never captured inbound (pilot-agent status, health, Envoy stats). */
export const ALWAYS_EXCLUDED_INBOUND = [15020, 15021, 15090] as const;
/** istio-iptables' default for excludeOutboundPorts when the annotation is absent. */
const DEFAULT_EXCLUDED_OUTBOUND = [15020];

export type InterceptionMode = "REDIRECT" | "TPROXY";

/** Everything the Istio rules depend on, validated. */
export interface IstioOptions {
  mode: InterceptionMode;
  proxyPort: number;
  inboundCapturePort: number;
  inboundTunnelPort: number;
  proxyUid: number;
  proxyGid: number;
  /** "*" captures every destination; a list captures only those; [] captures no outbound. */
  includeOutboundIPRanges: "*" | Cidr[];
  excludeOutboundIPRanges: Cidr[];
  /** "*" captures every inbound port; [] captures none. */
  includeInboundPorts: "*" | number[];
  /** Only used with includeInboundPorts "*"; always ends with 15020, 15021, 15090. */
  excludeInboundPorts: number[];
  includeOutboundPorts: number[];
  excludeOutboundPorts: number[];
  excludeInterfaces: string[];
  /** kubevirtInterfaces / reroute-virtual-interfaces: inbound from these is treated as outbound. */
  rerouteInterfaces: string[];
  /** ISTIO_META_DNS_CAPTURE: all DNS on port 53 to the agent on 15053. */
  dnsCapture: boolean;
  /** INVALID_DROP: drop conntrack-INVALID packets instead of resetting connections. */
  dropInvalid: boolean;
  /** ISTIO_DUAL_STACK on istio-proxy: the proxy listens on IPv4 and IPv6. */
  dualStack: boolean;
  /** IPv6 rules too (see wantsIPv6). */
  ipv6: boolean;
}

function invalid(key: string, value: string, why: string): CniError {
  return new CniError(
    Code.InvalidConfig,
    `invalid annotation ${key}`,
    `${quote(value)}: ${why}; fix the pod's annotation and recreate the pod (nothing was applied)`,
  );
}

/** An invalid item of a comma-separated annotation value, named alone when it is not the whole value. */
function invalidItem(key: string, value: string, item: string, what: string): CniError {
  const it = item.trim();
  const why = it === value.trim() ? `not ${what}` : `${quote(it)} is not ${what}`;
  return invalid(key, value, why);
}

/** Go's strconv.ParseBool, which Istio uses for sidecar.istio.io/inject and proxy env flags. */
export function parseGoBool(raw: string | undefined | null): boolean | undefined {
  if (raw === undefined || raw === null) return undefined;
  if (["1", "t", "T", "TRUE", "true", "True"].includes(raw)) return true;
  if (["0", "f", "F", "FALSE", "false", "False"].includes(raw)) return false;
  return undefined;
}

// The lists are read as istio-cni reads them: split on ",", no empty item (a doubled or
// trailing comma fails), ports trimmed, CIDRs taken as written (a space around one fails), "*"
// only when it is the whole value exactly.

function portList(key: string, raw: string): number[] {
  if (raw.trim() === "") return [];
  const ports: number[] = [];
  for (const item of raw.trim().split(",")) {
    if (item.trim() === "") throw invalid(key, raw, "it has an empty item (a doubled or trailing comma)");
    const r = parsePortList([item.trim()], true);
    if (r.bad !== undefined)
      throw invalidItem(key, raw, item, "a port (0-65535); the value is a comma-separated list of ports");
    ports.push(r.ports[0]!.from);
  }
  return [...new Set(ports)];
}

function portListOrAll(key: string, raw: string): "*" | number[] {
  return raw === "*" ? "*" : portList(key, raw);
}

function cidrList(key: string, raw: string): Cidr[] {
  if (raw === "") return [];
  const items = raw.split(",");
  for (const item of items) {
    if (item.trim() === "") throw invalid(key, raw, "it has an empty item (a doubled or trailing comma)");
    if (item !== item.trim()) {
      throw invalid(
        key,
        raw,
        `${JSON.stringify(item)} has spaces around it; write the list without spaces, e.g. 10.96.0.0/12,10.244.0.0/16`,
      );
    }
  }
  const r = parseCidrList(items);
  if (r.bad !== undefined) {
    throw invalidItem(key, raw, r.bad, "a CIDR such as 10.96.0.0/12 or fd00::/8 (a single address needs /32 or /128)");
  }
  return r.cidrs;
}

const IFNAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/;

/** A Linux interface name (1-15 characters, no '/', ':' or spaces), or undefined. */
export function parseInterfaceName(raw: string): string | undefined {
  const s = raw.trim();
  return IFNAME.test(s) && s !== "." && s !== ".." ? s : undefined;
}

function interfaceList(key: string, raw: string): string[] {
  const out: string[] = [];
  if (raw === "") return out;
  for (const item of raw.split(",")) {
    if (item.trim() === "") throw invalid(key, raw, "it has an empty item (a doubled or trailing comma)");
    const name = parseInterfaceName(item);
    if (!name)
      throw invalidItem(key, raw, item, "an interface name (1-15 of A-Z a-z 0-9 _ . -, not starting with - or .)");
    if (!out.includes(name)) out.push(name);
  }
  return out;
}

/**
 * A container's env var as the container sees it: when a name is listed twice the last entry
 * wins, as in Kubernetes. An entry without `value` (valueFrom) reads as unset.
 */
export function envOf(c: Container | undefined, name: string): string | undefined {
  const e = c?.env?.findLast((x) => x.name === name);
  return e?.value ?? undefined;
}

/** The pod's istio-proxy container, regular or native sidecar. */
export function istioProxy(pod: Pod): Container | undefined {
  return allContainers(pod).find((c) => c.name === ISTIO_PROXY);
}

/**
 * The family of an address istio-iptables looks at (not loopback, link-local or unspecified;
 * an IPv4-mapped IPv6 address counts as IPv4), or undefined for one it skips.
 */
function globalFamily(address: string): 4 | 6 | undefined {
  const v4 = parseIPv4(address);
  const b = v4 ?? parseIPv6(address);
  if (!b) return undefined;
  const mapped = !v4 && b.slice(0, 10).every((x) => x === 0) && b[10] === 0xff && b[11] === 0xff;
  if (v4 || mapped) {
    const [a, c] = mapped ? [b[12]!, b[13]!] : [b[0]!, b[1]!];
    if (a === 127 || (a === 169 && c === 254) || (a === 0 && (mapped ? b.slice(12) : b).every((x) => x === 0)))
      return undefined;
    return 4;
  }
  const loopback = b.slice(0, 15).every((x) => x === 0) && b[15] === 1;
  const linkLocal = b[0] === 0xfe && (b[1]! & 0xc0) === 0x80;
  const linkLocalMulticast = b[0] === 0xff && (b[1]! & 0x0f) === 0x02;
  const unspecified = b.every((x) => x === 0);
  return loopback || linkLocal || linkLocalMulticast || unspecified ? undefined : 6;
}

/**
 * Whether istio-iptables would write IPv6 rules: with ISTIO_DUAL_STACK when the pod has a
 * global IPv6 address; without it only when the pod has no global IPv4 address (istio-iptables
 * takes the first address the kernel lists, and the kernel lists IPv4 addresses first), so a
 * dual-stack pod whose Envoy listens on IPv4 only gets IPv4 rules only.
 */
export function wantsIPv6(addresses: readonly string[], dualStack: boolean): boolean {
  const families = addresses.map(globalFamily);
  return dualStack ? families.includes(6) : families.includes(6) && !families.includes(4);
}

/**
 * Reads the pod as istio-cni does: an annotation that is present (even empty) replaces the
 * default; only pod annotations count (the injector copies the mesh-wide defaults onto the pod).
 * Throws CniError 7 naming the first invalid annotation.
 */
export function parseIstioOptions(conf: PluginConf, pod: Pod, podAddresses: readonly string[]): IstioOptions {
  const s = conf.istio;
  const ann = pod.metadata.annotations ?? {};
  const get = (key: string): string | undefined => (Object.hasOwn(ann, key) ? ann[key] : undefined);
  const A = IstioAnnotations;
  const proxy = istioProxy(pod);

  let mode: InterceptionMode = "REDIRECT";
  const m = get(A.interceptionMode);
  if (m !== undefined) {
    if (m !== "REDIRECT" && m !== "TPROXY") throw invalid(A.interceptionMode, m, "must be REDIRECT or TPROXY");
    mode = m;
  }

  let includeOutboundIPRanges: "*" | Cidr[] = "*";
  const incIp = get(A.includeOutboundIPRanges);
  if (incIp !== undefined) includeOutboundIPRanges = incIp === "*" ? "*" : cidrList(A.includeOutboundIPRanges, incIp);
  const excIpRaw = get(A.excludeOutboundIPRanges);
  if (excIpRaw !== undefined && excIpRaw.trim() === "*") {
    throw invalid(
      A.excludeOutboundIPRanges,
      excIpRaw,
      '"*" is not allowed here; to capture no outbound traffic set includeOutboundIPRanges to ""',
    );
  }
  const excludeOutboundIPRanges = excIpRaw === undefined ? [] : cidrList(A.excludeOutboundIPRanges, excIpRaw);

  let includeInboundPorts: "*" | number[] = "*";
  const incIn = get(A.includeInboundPorts);
  if (incIn !== undefined) includeInboundPorts = portListOrAll(A.includeInboundPorts, incIn);
  // Istio appends the proxy's own ports to whatever the annotation says, then de-duplicates.
  const excIn = get(A.excludeInboundPorts);
  const excInParsed = excIn === undefined ? [] : portListOrAll(A.excludeInboundPorts, excIn);
  // The exclude list only matters when every inbound port is included: an explicit include
  // list is captured as it is, whatever the exclude list says (Istio's order). Excluding "*"
  // from "*" means no inbound capture: istio-iptables would pass "*" on to iptables and fail;
  // meshcni honours the request instead.
  if (excInParsed === "*" && includeInboundPorts === "*") includeInboundPorts = [];
  const excludeInboundPorts = [...new Set([...(excInParsed === "*" ? [] : excInParsed), ...ALWAYS_EXCLUDED_INBOUND])];

  const incOut = get(A.includeOutboundPorts);
  const includeOutboundPorts = incOut === undefined ? [] : portList(A.includeOutboundPorts, incOut);
  const excOut = get(A.excludeOutboundPorts);
  const excludeOutboundPorts =
    excOut === undefined ? [...DEFAULT_EXCLUDED_OUTBOUND] : portList(A.excludeOutboundPorts, excOut);

  const exIf = get(A.excludeInterfaces);
  const excludeInterfaces = exIf === undefined ? [] : interfaceList(A.excludeInterfaces, exIf);
  // istio.io/reroute-virtual-interfaces replaces the deprecated kubevirtInterfaces when present.
  const reroute = get(A.rerouteVirtualInterfaces);
  const kubevirt = get(A.kubevirtInterfaces);
  const rerouteInterfaces =
    reroute !== undefined
      ? interfaceList(A.rerouteVirtualInterfaces, reroute)
      : kubevirt !== undefined
        ? interfaceList(A.kubevirtInterfaces, kubevirt)
        : [];

  const dualStack = parseGoBool(envOf(proxy, "ISTIO_DUAL_STACK")) === true;

  // OpenShift runs the proxy under a random UID: take it from the container, unless unset or root.
  const sc = proxy?.securityContext;
  const proxyUid = sc?.runAsUser ? sc.runAsUser : s["proxy-uid"];
  const proxyGid = sc?.runAsGroup ? sc.runAsGroup : s["proxy-gid"];
  for (const [what, n] of [
    ["runAsUser", proxyUid],
    ["runAsGroup", proxyGid],
  ] as const) {
    if (!Number.isInteger(n) || n < 1 || n > 4294967294) {
      throw new CniError(
        Code.InvalidConfig,
        `invalid ${ISTIO_PROXY} securityContext.${what}`,
        `${n} is not a user or group id; nothing was applied`,
      );
    }
  }

  return {
    mode,
    proxyPort: s["proxy-port"],
    inboundCapturePort: s["inbound-capture-port"],
    inboundTunnelPort: s["inbound-tunnel-port"],
    proxyUid,
    proxyGid,
    includeOutboundIPRanges,
    excludeOutboundIPRanges,
    includeInboundPorts,
    excludeInboundPorts,
    includeOutboundPorts,
    excludeOutboundPorts,
    excludeInterfaces,
    rerouteInterfaces,
    // Unparsable values count as false (Istio only warns about them).
    dnsCapture: parseGoBool(envOf(proxy, "ISTIO_META_DNS_CAPTURE")) === true,
    dropInvalid: parseGoBool(envOf(proxy, "INVALID_DROP")) === true,
    dualStack,
    ipv6: wantsIPv6(podAddresses, dualStack),
  };
}
