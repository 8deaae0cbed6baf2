// What a fuzz case must end in, and the rules an accepted case may produce, as the documentation
// states them. Written from the CNI spec, linkerd-cni's and istio-cni's documented behaviour and
// meshcni's error table, not from meshcni's code.
import type { CidrValue } from "./values.ts";

/** meshcni's documented error codes (spec 1-11, 50, 51; meshcni's own 101-107). 100 is "a bug". */
export const DOCUMENTED_CODES = [1, 2, 3, 4, 5, 6, 7, 11, 50, 51, 101, 102, 103, 104, 105, 106, 107] as const;
export const SUPPORTED = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"] as const;

export interface LinkerdRules {
  mesh: "linkerd";
  incoming: number;
  outgoing: number;
  uid: number;
  gid: number;
  /** ports-to-redirect (single ports); empty redirects every inbound port. */
  redirectPorts: string[];
  inPorts: string[];
  outPorts: string[];
  subnets: CidrValue[];
  ipv6: boolean;
}

export interface IstioRules {
  mesh: "istio";
  mode: "REDIRECT" | "TPROXY";
  proxyPort: number;
  capturePort: number;
  tunnelPort: number;
  uid: number;
  gid: number;
  includeOut: "*" | CidrValue[];
  excludeOut: CidrValue[];
  includeIn: "*" | string[];
  /** Including the proxy's own 15020, 15021, 15090. */
  excludeIn: string[];
  includeOutPorts: string[];
  excludeOutPorts: string[];
  excludeIfaces: string[];
  rerouteIfaces: string[];
  dns: boolean;
  dropInvalid: boolean;
  ipv6: boolean;
}

export type RulesExpect = LinkerdRules | IstioRules;

export interface Expectation {
  command: string | undefined;
  /** Error codes that are a correct answer. */
  codes: number[];
  /** Whether success is a correct answer. */
  ok: boolean;
  /** Havoc cases: only the generic checks apply (no crash, documented code, well-formed rules). */
  weak: boolean;
  /** On success: the JSON stdout must equal this; "" means stdout must be empty. */
  stdout?: unknown;
  /** On a successful ADD: the rules (undefined: the pod gets none, the dry-run file is empty). */
  rules?: RulesExpect;
  /** Why, in a few words (for reports). */
  why: string;
}

/** The prevResult converted to the request's version, as the spec says a chained plugin hands it on. */
export function expectedResult(prev: Record<string, unknown> | undefined, version: string): unknown {
  if (!prev) return { cniVersion: version, dns: {} };
  const out: Record<string, unknown> = { ...prev, cniVersion: version };
  if (Array.isArray(prev.ips)) {
    const legacy = version.startsWith("0.");
    out.ips = prev.ips.map((ip: Record<string, unknown>) => {
      const copy: Record<string, unknown> = { ...ip };
      delete copy.version;
      if (legacy) copy.version = String(ip.address).includes(":") ? "6" : "4";
      return copy;
    });
  }
  return out;
}

/** stdin as a process reads it: UTF-8, with a leading byte order mark dropped. */
export function asRead(stdin: string): string {
  return stdin.startsWith("\ufeff") ? stdin.slice(1) : stdin;
}

export function versionAnswer(stdin: string): unknown {
  let asked: unknown;
  try {
    asked = (JSON.parse(asRead(stdin)) as { cniVersion?: unknown } | null)?.cniVersion;
  } catch {
    asked = undefined;
  }
  const cniVersion = typeof asked === "string" && (SUPPORTED as readonly string[]).includes(asked) ? asked : "1.1.0";
  return { cniVersion, supportedVersions: [...SUPPORTED] };
}

/** Go's strconv.ParseBool, which istio-cni uses for inject and the proxy's env flags. */
const GO_BOOL = new Map<string, boolean>([
  ...["1", "t", "T", "TRUE", "true", "True"].map((w) => [w, true] as const),
  ...["0", "f", "F", "FALSE", "false", "False"].map((w) => [w, false] as const),
]);
export const goBool = (raw: string | undefined | null): boolean | undefined =>
  raw == null ? undefined : GO_BOOL.get(raw);

/** Equal as JSON values (key order aside). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return (
    ka.length === kb.length &&
    ka.every(
      (k) => Object.hasOwn(b, k) && jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
    )
  );
}
