// Ports and port ranges as users write them in annotations and config: "80", " 8080 ", "25-27".
// Parsing is strict (ASCII digits only, 0-65535, low <= high) so that nothing but a port can
// reach an iptables argument.

export interface PortRange {
  from: number;
  to: number;
}

const SINGLE = /^[0-9]{1,5}$/;
const RANGE = /^([0-9]{1,5})-([0-9]{1,5})$/;

/** Parses one port or range; returns undefined when it is not one. */
export function parsePortRange(raw: string | number): PortRange | undefined {
  if (typeof raw === "number") {
    return Number.isInteger(raw) && raw >= 0 && raw <= 65535 ? { from: raw, to: raw } : undefined;
  }
  const s = raw.trim();
  if (SINGLE.test(s)) {
    const p = Number(s);
    return p <= 65535 ? { from: p, to: p } : undefined;
  }
  const m = RANGE.exec(s);
  if (!m) return undefined;
  const from = Number(m[1]);
  const to = Number(m[2]);
  if (from > 65535 || to > 65535 || from > to) return undefined;
  return { from, to };
}

/**
 * Splits a comma-separated list and parses every item. Empty items (a trailing comma, spaces)
 * are skipped; the first invalid item is returned as `bad` so the caller can name it.
 */
export function parsePortList(
  items: string | readonly (string | number)[],
  single = false,
): { ports: PortRange[]; bad?: string } {
  const list = typeof items === "string" ? items.split(",") : items;
  const ports: PortRange[] = [];
  for (const item of list) {
    if (typeof item === "string" && item.trim() === "") continue;
    const r = parsePortRange(item);
    if (!r || (single && r.from !== r.to)) return { ports, bad: String(item) };
    ports.push(r);
  }
  return { ports };
}

/** iptables spelling: "80" or "25:27". */
export function renderPortRange(r: PortRange): string {
  return r.from === r.to ? String(r.from) : `${r.from}:${r.to}`;
}

/** How many of multiport's 15 slots a port or range takes. */
function slots(r: PortRange): number {
  return r.from === r.to ? 1 : 2;
}

/**
 * Groups ports for `-m multiport --dports`, which takes at most 15 slots per rule (a range
 * takes two). Order is kept; duplicates are dropped.
 */
export function groupPorts(ports: readonly PortRange[], max = 15): PortRange[][] {
  const groups: PortRange[][] = [];
  let current: PortRange[] = [];
  let used = 0;
  const seen = new Set<string>();
  for (const p of ports) {
    const text = renderPortRange(p);
    if (seen.has(text)) continue;
    seen.add(text);
    const need = slots(p);
    if (used + need > max) {
      groups.push(current);
      current = [];
      used = 0;
    }
    current.push(p);
    used += need;
  }
  if (current.length > 0) groups.push(current);
  return groups;
}

/** groupPorts in iptables' spelling. */
export function groupMultiport(ports: readonly PortRange[], max = 15): string[][] {
  return groupPorts(ports, max).map((g) => g.map(renderPortRange));
}
