// Typed fuzz values: every generated port, CIDR, user id or interface name carries the meaning
// the documentation gives it (or says it has none), decided here from how the value was built,
// never by the plugin's own parsers. The oracle compares the plugin's rules with these meanings.
import type { Rng } from "./prng.ts";

/**
 * valid: must be accepted with `value`; invalid: must be rejected (code 7); either: a spelling
 * whose meaning is clear but unusual (padding, leading zeros): rejecting it and accepting it as
 * `value` are both correct, anything else is not.
 */
export type Validity = "valid" | "invalid" | "either";

export interface Typed<T> {
  text: string;
  validity: Validity;
  value?: T;
  kind: string;
}

export function worst(a: Validity, b: Validity): Validity {
  if (a === "invalid" || b === "invalid") return "invalid";
  if (a === "either" || b === "either") return "either";
  return "valid";
}

/** A comma-separated list and what it means: values that must appear, values that may. */
export interface TypedList<T> {
  text: string;
  validity: Validity;
  required: T[];
  allowed: T[];
  kinds: string[];
}

const PADS = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2028", "\ufeff"];
const pad = (rng: Rng, s: string) => (rng.chance(0.5) ? `${rng.pick(PADS)}${s}` : `${s}${rng.pick(PADS)}`);

/** Joins items with commas, now and then with empty items and a trailing comma (which mean nothing). */
export function joinList<T>(rng: Rng, items: Typed<T>[]): TypedList<T> {
  const parts: string[] = [];
  for (const it of items) {
    if (rng.chance(0.05)) parts.push(rng.pick(["", " ", "\t"]));
    parts.push(it.text);
  }
  if (rng.chance(0.08)) parts.push("");
  let validity: Validity = "valid";
  const required: T[] = [];
  const allowed: T[] = [];
  for (const it of items) {
    validity = worst(validity, it.validity);
    // An unusual spelling that is accepted must mean what it says: it is required as well.
    if (it.validity !== "invalid") {
      required.push(it.value as T);
      allowed.push(it.value as T);
    }
  }
  return { text: parts.join(","), validity, required, allowed, kinds: items.map((i) => i.kind) };
}

/** A list of `n` items; most lists are clean (no invalid item), some are not. */
export function typedList<T>(rng: Rng, n: number, item: (clean: boolean) => Typed<T>): TypedList<T> {
  const clean = rng.chance(0.7);
  return joinList(
    rng,
    Array.from({ length: n }, () => item(clean)),
  );
}

/** How many items a list gets: mostly a few, sometimes none, now and then thousands. */
export function listLength(rng: Rng): number {
  const r = rng.next();
  if (r < 0.1) return 0;
  if (r < 0.85) return rng.range(1, 4);
  if (r < 0.97) return rng.range(5, 40);
  return rng.range(200, 2500);
}

// --- ports ---------------------------------------------------------------------------------

const INTERESTING_PORTS = [
  0, 1, 22, 53, 80, 443, 4140, 4143, 4190, 4191, 6443, 8080, 9090, 15001, 15006, 15008, 15020, 15021, 15053, 15090,
  65535,
];

export function portNumber(rng: Rng): number {
  return rng.chance(0.5) ? rng.pick(INTERESTING_PORTS) : rng.int(65536);
}

const ARABIC = "٠١٢٣٤٥٦٧٨٩";
const FULLWIDTH = "０１２３４５６７８９";
const DEVANAGARI = "०१२३४५६७८९";
const otherDigits = (n: number, set: string) => String(n).replace(/[0-9]/g, (d) => set[Number(d)]!);

/**
 * A port item as users write them in annotations and config lists. Values are iptables'
 * spelling: "80", or "25:27" for a range. `ranges`: whether LOW-HIGH ranges are allowed.
 */
export function portItem(rng: Rng, ranges: boolean, clean = false): Typed<string> {
  const n = portNumber(rng);
  const r = rng.next() * (clean ? 0.8 : 1);
  if (r < 0.62) return { text: String(n), validity: "valid", value: String(n), kind: "port" };
  if (r < 0.72) {
    const lo = rng.int(65536);
    const hi = rng.chance(0.2) ? lo : rng.range(lo, Math.min(65535, lo + rng.pick([1, 10, 1000, 65535])));
    const value = lo === hi ? String(lo) : `${lo}:${hi}`;
    if (ranges) return { text: `${lo}-${hi}`, validity: "valid", value, kind: "range" };
    // A range of one port is that port; a real range is not a port.
    return lo === hi
      ? { text: `${lo}-${hi}`, validity: "either", value, kind: "range-of-one" }
      : { text: `${lo}-${hi}`, validity: "invalid", kind: "range-in-single-list" };
  }
  if (r < 0.8) {
    const forms: [string, string][] = [
      ["padded", pad(rng, String(n))],
      ["leading-zeros", `${"0".repeat(rng.range(1, 3))}${n}`],
    ];
    if (ranges) forms.push(["colon-range", `${n}:${n}`]);
    const [kind, text] = rng.pick(forms);
    return { text, validity: "either", value: String(n), kind };
  }
  const bad: [string, string][] = [
    ["too-big", String(65536 + rng.int(1_000_000))],
    ["six-digits", "123456"],
    ["negative", `-${n}`],
    ["plus", `+${n}`],
    ["dangling-dash", `${n}-`],
    ["dash", "-"],
    ["reversed-range", `${n + 1 + rng.int(100)}-${n}`],
    ["range-too-big", `1-${65536 + rng.int(100)}`],
    ["three-part-range", `1-2-3`],
    ["arabic-digits", otherDigits(n, ARABIC)],
    ["fullwidth-digits", otherDigits(n, FULLWIDTH)],
    ["devanagari-digits", otherDigits(n, DEVANAGARI)],
    ["newline-rule", `${n}\n-A OUTPUT -j ACCEPT`],
    ["option-smuggle", `${n} -j ACCEPT`],
    ["option", rng.pick(["--dport", "-j", "--to-ports", "-A", "!"])],
    ["hex", `0x${n.toString(16)}`],
    ["exponent", "1e3"],
    ["decimal", `${n}.0`],
    ["semicolon", `${n};`],
    ["star", "*"],
    ["two-ports", `${n} ${n}`],
    ["nul", `${n}\u0000`],
    ["word", rng.pick(["NaN", "Infinity", "http", "any"])],
    ["slash-proto", `${n}/tcp`],
    ["quote", `${n}"`],
  ];
  if (!ranges) bad.push(["colon-range", `${n}:${n + 1}`]);
  const [kind, text] = rng.pick(bad);
  return { text, validity: "invalid", kind };
}

// --- CIDRs ---------------------------------------------------------------------------------

export interface CidrValue {
  family: 4 | 6;
  /** As iptables-save prints it: host bits cleared, IPv6 in RFC 5952 form. */
  text: string;
}

function mask(bytes: number[], prefix: number): number[] {
  return bytes.map((b, i) => b & ((0xff << (8 - Math.max(0, Math.min(8, prefix - i * 8)))) & 0xff));
}

const hexGroups = (bytes: number[], full: boolean) => {
  const g: string[] = [];
  for (let i = 0; i < 16; i += 2) {
    const v = ((bytes[i]! << 8) | bytes[i + 1]!).toString(16);
    g.push(full ? v.padStart(4, "0") : v);
  }
  return g.join(":");
};

/**
 * As ip6tables-save prints an address (glibc's inet_ntop): IPv4-mapped ::ffff:a.b.c.d and
 * IPv4-compatible ::a.b.c.d (seventh group not zero) in dotted quad; anything else RFC 5952
 * text, as the WHATWG URL parser prints IPv6 hosts (an implementation independent of meshcni's).
 */
export function canonicalIPv6(bytes: number[]): string {
  const zero = (from: number, to: number) => bytes.slice(from, to).every((b) => b === 0);
  const quad = bytes.slice(12, 16).join(".");
  if (zero(0, 10) && bytes[10] === 0xff && bytes[11] === 0xff) return `::ffff:${quad}`;
  if (zero(0, 12) && (bytes[12] !== 0 || bytes[13] !== 0)) return `::${quad}`;
  return new URL(`http://[${hexGroups(bytes, true)}]/`).hostname.slice(1, -1);
}

function randomBytes(rng: Rng, family: 4 | 6): number[] {
  if (family === 4) {
    const t = rng.int(4);
    if (t === 0) return [10, rng.int(256), rng.int(256), rng.int(256)];
    if (t === 1) return [192, 168, rng.int(256), rng.int(256)];
    return Array.from({ length: 4 }, () => rng.int(256));
  }
  const b = Array.from({ length: 16 }, () => rng.int(256));
  const t = rng.int(4);
  if (t === 0) [b[0], b[1]] = [0xfd, 0x00];
  if (t === 1) [b[0], b[1], b[2], b[3]] = [0x20, 0x01, 0x0d, 0xb8];
  // Runs of zero groups, so that compression is exercised.
  for (let g = 0; g < 8; g++) if (rng.chance(0.45)) b[2 * g] = b[2 * g + 1] = 0;
  return b;
}

function cidrOf(bytes: number[], prefix: number): CidrValue {
  const m = mask(bytes, prefix);
  return m.length === 4
    ? { family: 4, text: `${m.join(".")}/${prefix}` }
    : { family: 6, text: `${canonicalIPv6(m)}/${prefix}` };
}

const SPECIAL_CIDRS: [string, CidrValue][] = [
  ["0.0.0.0/0", { family: 4, text: "0.0.0.0/0" }],
  ["::/0", { family: 6, text: "::/0" }],
  ["127.0.0.1/32", { family: 4, text: "127.0.0.1/32" }],
  ["::1/128", { family: 6, text: "::1/128" }],
  ["::ffff:10.0.0.1/128", { family: 6, text: "::ffff:10.0.0.1/128" }],
  ["10.96.0.0/12", { family: 4, text: "10.96.0.0/12" }],
  ["FD00::/8", { family: 6, text: "fd00::/8" }],
  ["fd00:0001::/32", { family: 6, text: "fd00:1::/32" }],
];

export function cidrItem(rng: Rng, clean = false, family?: 4 | 6): Typed<CidrValue> {
  const fam = family ?? (rng.chance(0.6) ? 4 : 6);
  const r = rng.next() * (clean ? 0.78 : 1);
  if (r < 0.1) {
    const [text, value] = rng.pick(SPECIAL_CIDRS.filter(([, v]) => family === undefined || v.family === family));
    return { text, validity: "valid", value, kind: "special-cidr" };
  }
  if (r < 0.7) {
    const bytes = randomBytes(rng, fam);
    const prefix = rng.int(fam === 4 ? 33 : 129);
    const value = cidrOf(bytes, prefix);
    // Host bits may be set: the network is meant (as Go's ParseCIDR and netip read it).
    const addr = fam === 4 ? bytes.join(".") : rng.chance(0.3) ? hexGroups(bytes, true) : canonicalIPv6(bytes);
    const text = `${rng.chance(0.15) ? addr.toUpperCase() : addr}/${prefix}`;
    return { text, validity: "valid", value, kind: `cidr${fam}` };
  }
  if (r < 0.78) {
    const bytes = randomBytes(rng, fam);
    const prefix = rng.int(fam === 4 ? 33 : 129);
    const value = cidrOf(bytes, prefix);
    return { text: pad(rng, value.text), validity: "either", value, kind: "padded-cidr" };
  }
  const bad: [string, string][] = [
    ["no-prefix", rng.pick(["10.0.0.1", "fd00::1", "0.0.0.0"])],
    ["prefix-too-long", rng.pick(["10.0.0.0/33", "fd00::/129", "1.2.3.4/999"])],
    ["two-slashes", "10.0.0.0/8/8"],
    ["five-octets", "1.2.3.4.5/8"],
    ["leading-zero-octet", "010.0.0.0/8"],
    ["leading-zero-prefix", "10.0.0.0/08"],
    ["arabic-digits", "١٠.0.0.0/8"],
    ["fullwidth", "１０.０.０.０/８"],
    ["negative-prefix", "10.0.0.0/-1"],
    ["option", rng.pick(["-s", "-d", "-j", "--to-ports", "!"])],
    ["option-smuggle", "10.0.0.0/8 -j ACCEPT"],
    ["newline-rule", "10.0.0.0/8\n-A OUTPUT -j ACCEPT"],
    ["zone", "fe80::1%eth0/64"],
    ["nine-groups", "1:2:3:4:5:6:7:8:9/64"],
    ["triple-colon", ":::/0"],
    ["two-double-colons", "fd00::1::2/64"],
    ["octet-too-big", "10.0.0.256/24"],
    ["three-octets", "10.0.0/24"],
    ["only-prefix", "/24"],
    ["empty-prefix", "10.0.0.0/"],
    ["star", "*"],
    ["hex-octet", "0x0a.0.0.0/8"],
    ["space-in-prefix", "10.0.0.0/ 8"],
    ["space-before-slash", "10.0.0.0 /8"],
    ["group-too-long", "fd000::/8"],
    ["hostname", "example.com/8"],
    ["quote", '10.0.0.0/8"'],
  ];
  const [kind, text] = rng.pick(bad);
  return { text, validity: "invalid", kind };
}

// --- user ids ------------------------------------------------------------------------------

/** A user or group id as an annotation value (a whole number 0-4294967294). */
export function idItem(rng: Rng, clean = false): Typed<number> {
  const n = rng.chance(0.5) ? rng.pick([0, 1, 1337, 2102, 65534, 4294967294]) : rng.int(4294967295);
  const r = rng.next() * (clean ? 0.7 : 1);
  if (r < 0.6) return { text: String(n), validity: "valid", value: n, kind: "id" };
  if (r < 0.7) {
    const text = rng.chance(0.5) ? pad(rng, String(n)) : `0${n}`;
    return { text, validity: "either", value: n, kind: "padded-id" };
  }
  const bad: [string, string][] = [
    ["negative", "-1"],
    ["too-big", "4294967295"],
    ["eleven-digits", "99999999999"],
    ["word", "abc"],
    ["shell", "2102; rm -rf /"],
    ["fullwidth", "１２"],
    ["arabic", otherDigits(n, ARABIC)],
    ["hex", "0x10"],
    ["exponent", "1e3"],
    ["option-smuggle", "2102 -j ACCEPT"],
    ["newline-rule", "2102\n-A OUTPUT -j ACCEPT"],
    ["plus", "+5"],
    ["decimal", "5.0"],
    ["blank", "  "],
    ["list", "1,2"],
  ];
  const [kind, text] = rng.pick(bad);
  return { text, validity: "invalid", kind };
}

// --- interface names -----------------------------------------------------------------------

export function interfaceItem(rng: Rng, clean = false): Typed<string> {
  const r = rng.next() * (clean ? 0.72 : 1);
  if (r < 0.65) {
    const name = rng.pick(["eth1", "net1", "veth_a.b-c", "_x", "abcdefghijklmno", "v1.2", "k6t-eth0", "tap0", "E"]);
    return { text: name, validity: "valid", value: name, kind: "ifname" };
  }
  if (r < 0.72) return { text: pad(rng, "net1"), validity: "either", value: "net1", kind: "padded-ifname" };
  const bad: [string, string][] = [
    ["leading-dash", "-eth0"],
    ["leading-dot", ".eth0"],
    ["too-long", "abcdefghijklmnop"],
    ["option-smuggle", "eth0 -j ACCEPT"],
    ["newline-rule", "eth0\n-A OUTPUT -j ACCEPT"],
    ["slash", "eth/0"],
    ["colon", "eth:0"],
    ["fullwidth", "ｅｔｈ０"],
    ["space", "eth 0"],
    ["bang", "!eth0"],
    ["wildcard", rng.pick(["eth0+", "eth*", "+"])],
    ["accent", "é"],
    ["dots", rng.pick([".", ".."])],
    ["quote", 'eth0"'],
  ];
  const [kind, text] = rng.pick(bad);
  return { text, validity: "invalid", kind };
}
