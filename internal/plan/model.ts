// The backend-neutral plan: what a mesh profile wants done to a pod's packets, per address
// family, as ordered rules of typed matches and one action each. The mesh profiles build it;
// a backend (internal/firewall/) renders, applies, checks and removes it. Nothing here is the
// text of any tool: every value is a number, a parsed CIDR's text, a validated interface name
// or a fixed word, so whatever a backend writes is built from values that already parsed.
//
// Stages name the point in the packet path a rule runs at, with the names netfilter gives
// them (iptables calls them tables): `raw` before connection tracking, `mangle` for marks and
// TPROXY, `nat` for REDIRECT. Hooks are PREROUTING (packets arriving) and OUTPUT (packets the
// pod sends). Chains other than the hooks are the profile's own, named in upper case.
import type { PortRange } from "../net/ports.ts";

export type Family = 4 | 6;
export type Stage = "filter" | "mangle" | "nat" | "raw";
export type Proto = "tcp" | "udp";

/** The two hooks meshcni uses; rules in them are the entry points into the profile's chains. */
export const HOOKS = new Set(["PREROUTING", "OUTPUT"]);
/** Chain names the plan accepts: upper case, digits, underscores (also what iptables shows). */
export const CHAIN_NAME = /^[A-Z][A-Z0-9_]{0,28}$/;
/** Interface names as Linux allows them and as meshcni accepts them (no quotes, no spaces). */
export const IFACE_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/;
/** Comment text meshcni writes: letters, digits and a few punctuation marks, nothing that quotes. */
export const COMMENT_TEXT = /^[A-Za-z0-9_.,:/ -]{1,200}$/;

// What the three RegExps above match, checked with character loops: the plugin checks every
// plan the agent sends (check.ts) in a fresh process, where each RegExp is compiled on its first
// use. The character classes are written out in each loop rather than called as small helpers: a
// helper called for every character of every name and comment costs the process more than the
// RegExps would (perf: see docs/benchmarks.md). model.test.ts holds each loop to its RegExp.

/** What CHAIN_NAME matches: an upper-case letter, then up to 28 upper-case letters, digits or `_`. */
export function isChainName(s: string): boolean {
  if (s.length === 0 || s.length > 29) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    // A-Z, and after the first: 0-9 and `_`
    if ((c < 65 || c > 90) && (i === 0 || ((c < 48 || c > 57) && c !== 95))) return false;
  }
  return true;
}

/** What IFACE_NAME matches: 1 to 15 letters, digits, `_`, `.` or `-`, not starting with `.` or `-`. */
export function isIfaceName(s: string): boolean {
  if (s.length === 0 || s.length > 15) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    // a-z, A-Z, 0-9, `_`, and after the first: `-` (45) and `.` (46)
    if (
      !(
        (c >= 97 && c <= 122) ||
        (c >= 65 && c <= 90) ||
        (c >= 48 && c <= 57) ||
        c === 95 ||
        (i > 0 && (c === 45 || c === 46))
      )
    )
      return false;
  }
  return true;
}

/** What COMMENT_TEXT matches: 1 to 200 letters, digits, spaces or `_`, `.`, `,`, `:`, `/`, `-`. */
export function isCommentText(s: string): boolean {
  if (s.length === 0 || s.length > 200) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    // a-z, A-Z, 44 to 58 (`,` `-` `.` `/` 0-9 `:`), `_`, space
    if (!((c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 44 && c <= 58) || c === 95 || c === 32)) return false;
  }
  return true;
}

export type Match =
  /** The layer-4 protocol. */
  | { m: "proto"; proto: Proto }
  /**
   * Destination or source ports of `proto` (which an earlier `proto` match names too).
   * `list` asks for the multi-port form (iptables' multiport) even for one port.
   */
  | { m: "port"; proto: Proto; dir: "dst" | "src"; ports: readonly PortRange[]; not?: boolean; list?: boolean }
  /** An address range, as a normalised CIDR text of the rule's family. */
  | { m: "addr"; dir: "src" | "dst"; cidr: string; not?: boolean }
  | { m: "iface"; dir: "in" | "out"; name: string }
  /** The local socket's owner (OUTPUT only). */
  | { m: "owner"; id: "uid" | "gid"; value: number; not?: boolean }
  | { m: "ctstate"; states: readonly ("INVALID" | "RELATED" | "ESTABLISHED")[] }
  /** The packet's firewall mark equals `value`. */
  | { m: "mark"; value: number; not?: boolean }
  /** The connection's mark equals `value`. */
  | { m: "connmark"; value: number }
  /** A note kept with the rule (both backends store it); not a match. */
  | { m: "comment"; text: string };

export type Action =
  | { a: "return" }
  | { a: "accept" }
  | { a: "drop" }
  | { a: "jump"; chain: string }
  /** REDIRECT to a local port (stage nat). */
  | { a: "redirect"; port: number }
  /** TPROXY to a local port on any local address, setting the packet mark (stage mangle). */
  | { a: "tproxy"; port: number; mark: number }
  /** Set the packet mark (all 32 bits). */
  | { a: "mark"; value: number }
  /** Copy the packet mark to the connection, or back. */
  | { a: "save-mark" }
  | { a: "restore-mark" }
  /** Put the connection in a conntrack zone (stage raw). */
  | { a: "ct-zone"; zone: number };

export interface PlanRule {
  stage: Stage;
  chain: string;
  match: readonly Match[];
  action: Action;
  /** Put at this 1-based position among the rules of a hook instead of after them. */
  insertAt?: number;
}

/** Everything for one address family: the profile's chains and the rules, in order. */
export interface FamilyPlan {
  family: Family;
  chains: readonly { stage: Stage; name: string }[];
  rules: readonly PlanRule[];
}

/** An `ip` command run inside the pod netns after the rules (Istio's TPROXY routing). */
export interface IpCommand {
  family: Family;
  argv: readonly string[];
}

export interface Plan {
  families: FamilyPlan[];
  ipCommands: IpCommand[];
}

/**
 * The command that undoes `cmd`: `rule add` → `rule del`, `route replace` → `route del`,
 * `addr replace` → `addr del`, the same words after the verb; undefined for a verb that has none.
 * A failed ADD undoes what it ran (firewall/apply.ts), and Istio's DEL clean-up is the undo
 * of every command its plans can hold (mesh/istio/rules.ts).
 */
export function undoIpCommand(cmd: IpCommand): IpCommand | undefined {
  const [object, verb, ...rest] = cmd.argv;
  if (object === undefined || (verb !== "add" && verb !== "replace")) return undefined;
  return { family: cmd.family, argv: [object, "del", ...rest] };
}

/** Records chains as rules first use them, in order. */
export class PlanBuilder {
  private readonly chains: { stage: Stage; name: string }[] = [];
  private readonly rules: PlanRule[] = [];
  constructor(readonly family: Family) {}

  /** Declares a chain the profile owns (idempotent; hooks are never declared). */
  chain(stage: Stage, name: string): this {
    if (!HOOKS.has(name) && !this.chains.some((c) => c.stage === stage && c.name === name)) {
      if (!isChainName(name)) throw new Error(`bad chain name ${JSON.stringify(name)}`);
      this.chains.push({ stage, name });
    }
    return this;
  }

  append(stage: Stage, chain: string, match: readonly Match[], action: Action): this {
    this.chain(stage, chain);
    this.rules.push({ stage, chain, match, action });
    return this;
  }

  insert(stage: Stage, chain: string, position: number, match: readonly Match[], action: Action): this {
    this.chain(stage, chain);
    this.rules.push({ stage, chain, match, action, insertAt: position });
    return this;
  }

  build(): FamilyPlan {
    return { family: this.family, chains: [...this.chains], rules: [...this.rules] };
  }
}

// Small constructors, so profiles read like the rules they write.
export const M = {
  tcp: { m: "proto", proto: "tcp" } as Match,
  udp: { m: "proto", proto: "udp" } as Match,
  dport: (proto: Proto, port: number, not = false): Match => ({
    m: "port",
    proto,
    dir: "dst",
    ports: [{ from: port, to: port }],
    ...(not ? { not } : {}),
  }),
  sport: (proto: Proto, port: number): Match => ({ m: "port", proto, dir: "src", ports: [{ from: port, to: port }] }),
  dports: (proto: Proto, ports: readonly PortRange[], not = false): Match => ({
    m: "port",
    proto,
    dir: "dst",
    ports,
    list: true,
    ...(not ? { not } : {}),
  }),
  src: (cidr: string, not = false): Match => ({ m: "addr", dir: "src", cidr, ...(not ? { not } : {}) }),
  dst: (cidr: string, not = false): Match => ({ m: "addr", dir: "dst", cidr, ...(not ? { not } : {}) }),
  in: (name: string): Match => ({ m: "iface", dir: "in", name }),
  out: (name: string): Match => ({ m: "iface", dir: "out", name }),
  uid: (value: number, not = false): Match => ({ m: "owner", id: "uid", value, ...(not ? { not } : {}) }),
  gid: (value: number, not = false): Match => ({ m: "owner", id: "gid", value, ...(not ? { not } : {}) }),
  ctstate: (...states: ("INVALID" | "RELATED" | "ESTABLISHED")[]): Match => ({ m: "ctstate", states }),
  mark: (value: number, not = false): Match => ({ m: "mark", value, ...(not ? { not } : {}) }),
  connmark: (value: number): Match => ({ m: "connmark", value }),
  comment: (text: string): Match => ({ m: "comment", text }),
};

export const A = {
  ret: { a: "return" } as Action,
  accept: { a: "accept" } as Action,
  drop: { a: "drop" } as Action,
  jump: (chain: string): Action => ({ a: "jump", chain }),
  redirect: (port: number): Action => ({ a: "redirect", port }),
  tproxy: (port: number, mark: number): Action => ({ a: "tproxy", port, mark }),
  mark: (value: number): Action => ({ a: "mark", value }),
  saveMark: { a: "save-mark" } as Action,
  restoreMark: { a: "restore-mark" } as Action,
  ctZone: (zone: number): Action => ({ a: "ct-zone", zone }),
};

/** How many rules the plan holds. */
export function countRules(plan: Plan): number {
  let n = 0;
  for (const f of plan.families) n += f.rules.length;
  return n;
}

/**
 * The rules of one chain in their final order: appends in order, then each insert placed at
 * its position among what came before it (the order iptables' -I would leave in a fresh
 * namespace, counting only meshcni's rules).
 */
export function orderedRules(fp: FamilyPlan, stage: Stage, chain: string): PlanRule[] {
  const out: PlanRule[] = [];
  for (const r of fp.rules) {
    if (r.stage !== stage || r.chain !== chain) continue;
    if (r.insertAt === undefined) out.push(r);
    else out.splice(Math.min(r.insertAt - 1, out.length), 0, r);
  }
  return out;
}
