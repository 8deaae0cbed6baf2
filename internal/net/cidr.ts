// CIDRs as users write them ("10.0.0.0/8", " fd00::/8"), parsed strictly and rendered the way
// iptables-save prints them (host bits cleared, IPv6 compressed), so CHECK can compare text.

export interface Cidr {
  family: 4 | 6;
  /** Normalised text, e.g. "10.0.0.0/8" or "fd00::/8". */
  text: string;
  /** The network address as bytes (4 or 16). */
  bytes: number[];
  prefix: number;
}

// The checks below are character loops, not the RegExps they stand for: the plugin parses the
// address ranges of every plan the agent sends in a fresh process, which compiles each RegExp on
// its first use. net.test.ts holds each loop to its RegExp.

/** An IPv4 octet's text, and a prefix length's: 0, or 1 to 3 digits not starting with 0. */
export const V4_OCTET = /^(0|[1-9][0-9]{0,2})$/;

/** What V4_OCTET matches. */
export function isShortDecimal(s: string): boolean {
  if (s.length === 0 || s.length > 3 || (s.length > 1 && s.charCodeAt(0) === 48)) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 48 || c > 57) return false;
  }
  return true;
}

export function parseIPv4(s: string): number[] | undefined {
  const parts = s.split(".");
  if (parts.length !== 4) return undefined;
  const out: number[] = [];
  for (const p of parts) {
    if (!isShortDecimal(p)) return undefined;
    const n = Number(p);
    if (n > 255) return undefined;
    out.push(n);
  }
  return out;
}

/** An IPv6 group: 1 to 4 hexadecimal digits. */
export const HEX_GROUP = /^[0-9a-fA-F]{1,4}$/;

/** What HEX_GROUP matches. */
export function isHexGroup(s: string): boolean {
  if (s.length === 0 || s.length > 4) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if ((c < 48 || c > 57) && (c < 97 || c > 102) && (c < 65 || c > 70)) return false;
  }
  return true;
}

export function parseIPv6(s: string): number[] | undefined {
  if (s.length === 0 || s.length > 45) return undefined;
  let head = s;
  let tail4: number[] = [];
  // An embedded IPv4 tail such as ::ffff:1.2.3.4
  const lastColon = s.lastIndexOf(":");
  if (s.includes(".")) {
    const v4 = parseIPv4(s.slice(lastColon + 1));
    if (!v4) return undefined;
    tail4 = v4;
    head = `${s.slice(0, lastColon + 1)}0:0`;
  }
  const dbl = head.indexOf("::");
  if (dbl !== -1 && head.indexOf("::", dbl + 1) !== -1) return undefined;
  const parseGroups = (part: string): number[] | undefined => {
    if (part === "") return [];
    const groups: number[] = [];
    for (const g of part.split(":")) {
      if (!isHexGroup(g)) return undefined;
      groups.push(parseInt(g, 16));
    }
    return groups;
  };
  let groups: number[];
  if (dbl !== -1) {
    const left = parseGroups(head.slice(0, dbl));
    const right = parseGroups(head.slice(dbl + 2));
    if (!left || !right || left.length + right.length > 7) return undefined;
    groups = [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
  } else {
    const all = parseGroups(head);
    if (all?.length !== 8) return undefined;
    groups = all;
  }
  const bytes: number[] = [];
  for (const g of groups) bytes.push(g >> 8, g & 0xff);
  if (tail4.length === 4) bytes.splice(12, 4, ...tail4);
  return bytes;
}

/** RFC 5952 text for 16 bytes, as iptables prints IPv6 addresses (inet_ntop). */
export function renderIPv6(bytes: readonly number[]): string {
  const groups: number[] = [];
  for (let i = 0; i < 16; i += 2) groups.push((bytes[i]! << 8) | bytes[i + 1]!);
  let bestStart = -1;
  let bestLen = 0;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen && j - i >= 2) {
      bestStart = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex: string[] = [];
  for (const g of groups) hex.push(g.toString(16));
  // As glibc's inet_ntop (so as ip6tables-save prints them): IPv4-mapped (::ffff:a.b.c.d) and
  // IPv4-compatible (::a.b.c.d, not :: or ::1) addresses end in dotted quad.
  if (bestStart === 0 && (bestLen === 6 || (bestLen === 5 && groups[5] === 0xffff))) {
    return `::${bestLen === 5 ? "ffff:" : ""}${bytes.slice(12, 16).join(".")}`;
  }
  if (bestStart === -1) return hex.join(":");
  return `${hex.slice(0, bestStart).join(":")}::${hex.slice(bestStart + bestLen).join(":")}`;
}

/** Parses "ADDR/LEN" strictly; undefined when it is not a CIDR. The prefix length is required. */
export function parseCidr(raw: string): Cidr | undefined {
  const s = raw.trim();
  const slash = s.indexOf("/");
  if (slash === -1 || s.indexOf("/", slash + 1) !== -1) return undefined;
  const addr = s.slice(0, slash);
  const len = s.slice(slash + 1);
  if (!isShortDecimal(len)) return undefined;
  const prefix = Number(len);
  const v4 = parseIPv4(addr);
  const bytes = v4 ?? parseIPv6(addr);
  if (!bytes) return undefined;
  const family: 4 | 6 = v4 ? 4 : 6;
  if (prefix > bytes.length * 8) return undefined;
  const masked: number[] = [];
  for (let i = 0; i < bytes.length; i++) {
    const bits = Math.max(0, Math.min(8, prefix - i * 8));
    masked.push(bytes[i]! & ((0xff << (8 - bits)) & 0xff));
  }
  const text = family === 4 ? `${masked.join(".")}/${prefix}` : `${renderIPv6(masked)}/${prefix}`;
  return { family, text, bytes: masked, prefix };
}

/** Splits a comma-separated CIDR list; the first invalid item is returned as `bad`. */
export function parseCidrList(items: string | readonly string[]): { cidrs: Cidr[]; bad?: string } {
  const list = typeof items === "string" ? items.split(",") : items;
  const cidrs: Cidr[] = [];
  for (const item of list) {
    if (item.trim() === "") continue;
    const c = parseCidr(item);
    if (!c) return { cidrs, bad: item };
    if (!cidrs.some((x) => x.text === c.text)) cidrs.push(c);
  }
  return { cidrs };
}

/** Whether an address (no prefix) lies inside a CIDR of the same family. */
export function cidrContains(c: Cidr, address: string): boolean {
  const bytes = c.family === 4 ? parseIPv4(address) : parseIPv6(address);
  if (!bytes) return false;
  for (let i = 0; i < bytes.length; i++) {
    const bits = Math.max(0, Math.min(8, c.prefix - i * 8));
    const mask = (0xff << (8 - bits)) & 0xff;
    if ((bytes[i]! & mask) !== c.bytes[i]) return false;
  }
  return true;
}
