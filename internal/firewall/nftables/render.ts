// The plan as one nft script: a table per address family (`ip meshcni`, `ip6 meshcni`), a
// base chain per stage and hook that has rules (`nat_PREROUTING`, `mangle_OUTPUT`, …) at the
// priority iptables' table has there, and the profile's chains as regular chains named
// `STAGE_NAME`. Rules are written the way `nft list` prints them back, so CHECK compares text.
// Every value is checked against a strict pattern before it is written: nothing a pod's
// annotations say can add a statement to the script. Pure.
import type { PortRange } from "../../net/ports.ts";
import {
  type Action,
  type FamilyPlan,
  type Family,
  HOOKS,
  isChainName,
  isCommentText,
  isIfaceName,
  type Match,
  orderedRules,
  type Plan,
  type Stage,
} from "../../plan/model.ts";

export const TABLE = "meshcni";
const STAGES: readonly Stage[] = ["raw", "mangle", "nat", "filter"];
const HOOK_ORDER = ["PREROUTING", "OUTPUT"] as const;

export const tableFamily = (f: Family) => (f === 6 ? "ip6" : "ip");

/** The base chain's declaration, with iptables' priorities for the same table. */
export function baseChainSpec(stage: Stage, hook: string): string {
  const h = hook.toLowerCase();
  const [type, prio] =
    stage === "nat"
      ? ["nat", -100]
      : stage === "mangle"
        ? [hook === "OUTPUT" ? "route" : "filter", -150]
        : stage === "raw"
          ? ["filter", -300]
          : ["filter", 0];
  return `type ${type} hook ${h} priority ${prio}; policy accept;`;
}

export const chainName = (stage: Stage, name: string) => `${stage}_${name}`;

function refuse(what: string, value: unknown): never {
  throw new Error(`refusing ${what} ${JSON.stringify(value)} in an nft script`);
}

function int(n: number, max: number, what: string): string {
  if (!Number.isInteger(n) || n < 0 || n > max) refuse(what, n);
  return String(n);
}
const port = (n: number) => int(n, 65535, "port");
const id = (n: number) => int(n, 4294967295, "id");
function hex32(n: number): string {
  int(n, 0xffffffff, "mark");
  return `0x${n.toString(16).padStart(8, "0")}`;
}

function chainRef(stage: Stage, name: string): string {
  if (!isChainName(name) && !HOOKS.has(name)) refuse("chain", name);
  return chainName(stage, name);
}

/** A CIDR as nft prints it: a host prefix (/32, /128) as the bare address. */
function addr(cidr: string, family: Family): string {
  // IPv6 may end in dotted IPv4 (`::ffff:10.0.0.0/104`), as ip6tables-save and nft print mapped addresses.
  const ok =
    family === 4
      ? /^[0-9]{1,3}(\.[0-9]{1,3}){3}\/[0-9]{1,2}$/
      : /^([0-9a-f:]{2,39}|[0-9a-f:]{2,30}[0-9]{1,3}(\.[0-9]{1,3}){3})\/[0-9]{1,3}$/;
  if (!ok.test(cidr)) refuse("address", cidr);
  const full = family === 4 ? "/32" : "/128";
  return cidr.endsWith(full) ? cidr.slice(0, -full.length) : cidr;
}

/** Ports as nft prints them: sorted, touching ranges merged, braces only around several. */
export function portSet(ports: readonly PortRange[]): string {
  const sorted = [...ports].map((p) => ({ from: p.from, to: p.to })).sort((a, b) => a.from - b.from);
  const merged: PortRange[] = [];
  for (const p of sorted) {
    port(p.from);
    port(p.to);
    const last = merged.at(-1);
    if (last && p.from <= last.to + 1) last.to = Math.max(last.to, p.to);
    else merged.push({ ...p });
  }
  const items = merged.map((p) => (p.from === p.to ? String(p.from) : `${p.from}-${p.to}`));
  if (items.length === 0) refuse("port list", ports);
  return items.length === 1 ? items[0]! : `{ ${items.join(", ")} }`;
}

const CT_STATES = ["invalid", "established", "related"] as const;
const op = (neg: boolean | undefined) => (neg ? "!= " : "");

function matchText(m: Match, family: Family, next: readonly Match[]): string | undefined {
  switch (m.m) {
    case "proto":
      // `tcp dport …` implies the protocol; nft prints it only when nothing else does.
      return next.some((n) => n.m === "port" && n.proto === m.proto) ? undefined : `meta l4proto ${m.proto}`;
    case "port":
      return `${m.proto} ${m.dir === "dst" ? "dport" : "sport"} ${op(m.not)}${portSet(m.ports)}`;
    case "addr":
      return `${tableFamily(family)} ${m.dir === "src" ? "saddr" : "daddr"} ${op(m.not)}${addr(m.cidr, family)}`;
    case "iface":
      if (!isIfaceName(m.name)) refuse("interface", m.name);
      return `${m.dir === "in" ? "iifname" : "oifname"} "${m.name}"`;
    case "owner":
      return `meta sk${m.id} ${op(m.not)}${id(m.value)}`;
    case "ctstate":
      return `ct state ${CT_STATES.filter((s) => m.states.includes(s.toUpperCase() as never)).join(",")}`;
    case "mark":
      return `meta mark ${op(m.not)}${hex32(m.value)}`;
    case "connmark":
      return `ct mark ${hex32(m.value)}`;
    case "comment":
      return undefined;
  }
}

function actionText(a: Action, stage: Stage): string {
  switch (a.a) {
    case "return":
    case "accept":
    case "drop":
      return a.a;
    case "jump":
      return `jump ${chainRef(stage, a.chain)}`;
    case "redirect":
      return `redirect to :${port(a.port)}`;
    case "tproxy":
      return `tproxy to :${port(a.port)} meta mark set ${hex32(a.mark)} accept`;
    case "mark":
      return `meta mark set ${hex32(a.value)}`;
    case "save-mark":
      return "ct mark set meta mark";
    case "restore-mark":
      return "meta mark set ct mark";
    case "ct-zone":
      return `ct zone set ${int(a.zone, 65535, "zone")}`;
  }
}

/** One rule as `nft list` prints it. */
export function ruleText(match: readonly Match[], action: Action, stage: Stage, family: Family): string {
  const parts: string[] = [];
  match.forEach((m, i) => {
    const t = matchText(m, family, match.slice(i + 1));
    if (t !== undefined) parts.push(t);
  });
  parts.push(actionText(action, stage));
  const comments = match.filter((m) => m.m === "comment").map((m) => (m as { text: string }).text);
  if (comments.length > 0) {
    const text = comments.join(" ");
    if (!isCommentText(text)) refuse("comment", text);
    parts.push(`comment "${text}"`);
  }
  return parts.join(" ");
}

export interface NftChain {
  name: string;
  /** The base chain's `type … hook … priority …; policy accept;`, or undefined for a regular chain. */
  spec?: string;
  rules: string[];
}

/** The chains of one family's table, in the order the script declares them. */
export function familyChains(fp: FamilyPlan): NftChain[] {
  const out: NftChain[] = [];
  for (const c of fp.chains) {
    out.push({
      name: chainRef(c.stage, c.name),
      rules: orderedRules(fp, c.stage, c.name).map((r) => ruleText(r.match, r.action, r.stage, fp.family)),
    });
  }
  for (const stage of STAGES) {
    for (const hook of HOOK_ORDER) {
      const rules = orderedRules(fp, stage, hook);
      if (rules.length === 0) continue;
      out.push({
        name: chainName(stage, hook),
        spec: baseChainSpec(stage, hook),
        rules: rules.map((r) => ruleText(r.match, r.action, r.stage, fp.family)),
      });
    }
  }
  return out;
}

/** One family's table as `nft list table` prints it (tabs, blank lines between chains). */
export function tableText(fp: FamilyPlan): string {
  const chains = familyChains(fp).map((c) => {
    const lines = [`\tchain ${c.name} {`];
    if (c.spec) lines.push(`\t\t${c.spec}`);
    for (const r of c.rules) lines.push(`\t\t${r}`);
    lines.push("\t}");
    return lines.join("\n");
  });
  return `table ${tableFamily(fp.family)} ${TABLE} {\n${chains.join("\n\n")}\n}\n`;
}

/**
 * The first try of an ADD, for a namespace without meshcni's tables (every new pod's): each
 * family's table created (`create` fails if it exists, and with it the whole transaction) and
 * written. It deletes nothing: a transaction that deletes a table makes the kernel wait for an
 * RCU grace period when the netlink socket closes (perf: see docs/benchmarks.md), and a new pod
 * has nothing to delete. When it fails, the ADD sends renderScript's transaction instead.
 */
export function renderCreateScript(plan: Plan): string {
  const out: string[] = [];
  for (const fp of plan.families) out.push(`create table ${tableFamily(fp.family)} ${TABLE}\n${tableText(fp)}`);
  return out.join("");
}

/**
 * The whole ADD as one nft transaction: each family's table is created if missing, deleted,
 * and written again, so a second ADD leaves exactly one copy and a failure leaves nothing new.
 */
export function renderScript(plan: Plan): string {
  const out: string[] = [];
  for (const fp of plan.families) {
    const t = `${tableFamily(fp.family)} ${TABLE}`;
    out.push(`add table ${t}\ndelete table ${t}\n${tableText(fp)}`);
  }
  return out.join("");
}

/**
 * The script DEL runs: each family's table created if missing and deleted, in one transaction,
 * so it succeeds whether or not ADD ever ran, and leaves no meshcni table behind.
 */
export function renderDelete(families: readonly Family[]): string {
  return families
    .map((f) => `add table ${tableFamily(f)} ${TABLE}\ndelete table ${tableFamily(f)} ${TABLE}\n`)
    .join("");
}
