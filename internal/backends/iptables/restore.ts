// Rendering RuleSets as iptables-restore payloads (applied with --noflush), and the line format
// shared with iptables-save.
import { type Rule, type RuleSet, TABLE_ORDER, type Table } from "./model.ts";
import type { SavedState } from "./save.ts";

const PLAIN_TOKEN = /^[A-Za-z0-9_.,:/!+=@%^-]+$/;

/**
 * Quotes a token as iptables-save does. Comments are always quoted; tokens with anything but
 * plain characters are quoted too. A line break can never be part of a token: it would start a
 * new restore command, so it is refused outright (defence in depth behind the parsers).
 */
function renderToken(token: string, quoted: boolean): string {
  if (/[\r\n\0]/.test(token)) throw new Error(`refusing an iptables token with a line break: ${JSON.stringify(token)}`);
  if (!quoted && PLAIN_TOKEN.test(token)) return token;
  return `"${token.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
}

/** The argument text of a rule, exactly as iptables-save prints it after `-A CHAIN `. */
export function renderArgs(args: readonly string[]): string {
  let out = "";
  for (let i = 0; i < args.length; i++) out += (i > 0 ? " " : "") + renderToken(args[i]!, args[i - 1] === "--comment");
  return out;
}

function renderRule(r: Rule): string {
  const op = r.insertAt !== undefined ? `-I ${r.chain} ${r.insertAt}` : `-A ${r.chain}`;
  return `${op} ${renderArgs(r.args)}`;
}

function tablesOf(rs: RuleSet): Table[] {
  const used = new Set<Table>();
  for (const c of rs.chains) used.add(c.table);
  for (const r of rs.rules) used.add(r.table);
  const out: Table[] = [];
  for (const t of TABLE_ORDER) if (used.has(t)) out.push(t);
  return out;
}

/**
 * The payload for a namespace that has none of our chains yet. Chains are created with `-N`,
 * so if any of them already exists the whole payload fails and nothing is applied: the caller
 * then reads the current state and applies `renderReconcile` instead.
 */
export function renderFresh(rs: RuleSet): string {
  const out: string[] = [];
  for (const table of tablesOf(rs)) {
    out.push(`*${table}`);
    for (const c of rs.chains) if (c.table === table) out.push(`-N ${c.name}`);
    for (const r of rs.rules) if (r.table === table) out.push(renderRule(r));
    out.push("COMMIT");
  }
  return out.join("\n") + "\n";
}

/** Rules in chains we do not own that are ours: they jump to our chains or equal one we add. */
function strayRules(rs: RuleSet, saved: SavedState, table: Table): { chain: string; args: string }[] {
  const owned = new Set(rs.chains.filter((c) => c.table === table).map((c) => c.name));
  const ours = new Set(rs.rules.filter((r) => r.table === table && !owned.has(r.chain))
    .map((r) => `${r.chain} ${renderArgs(r.args)}`));
  const t = saved.tables.get(table);
  if (!t) return [];
  return t.rules.filter((r) => !owned.has(r.chain) &&
    (ours.has(`${r.chain} ${r.args}`) || [...owned].some((c) => jumpsTo(r.args, c))));
}

function jumpsTo(args: string, chain: string): boolean {
  const parts = args.split(" ");
  for (let i = 0; i < parts.length - 1; i++) {
    if ((parts[i] === "-j" || parts[i] === "-g") && parts[i + 1] === chain) return true;
  }
  return false;
}

/**
 * The payload for a namespace that already has some of our state (ADD run twice, or an earlier
 * version's rules): flush our chains, drop our rules from built-in chains, then add everything
 * again, in one transaction. The result has exactly one copy of every rule.
 */
export function renderReconcile(rs: RuleSet, saved: SavedState): string {
  const out: string[] = [];
  for (const table of tablesOf(rs)) {
    const existing = saved.tables.get(table)?.chains ?? new Set<string>();
    out.push(`*${table}`);
    for (const c of rs.chains) {
      if (c.table === table) out.push(existing.has(c.name) ? `:${c.name} - [0:0]` : `-N ${c.name}`);
    }
    for (const r of strayRules(rs, saved, table)) out.push(`-D ${r.chain} ${r.args}`);
    for (const r of rs.rules) if (r.table === table) out.push(renderRule(r));
    out.push("COMMIT");
  }
  return out.join("\n") + "\n";
}

/**
 * The payload that removes everything of ours found in `saved` (DEL). Returns "" when there
 * is nothing to remove.
 */
export function renderCleanup(owned: readonly { table: Table; name: string }[], saved: SavedState): string {
  const out: string[] = [];
  for (const table of TABLE_ORDER) {
    const t = saved.tables.get(table);
    if (!t) continue;
    const present = owned.filter((c) => c.table === table && t.chains.has(c.name)).map((c) => c.name);
    if (present.length === 0) continue;
    out.push(`*${table}`);
    for (const r of t.rules) {
      if (!present.includes(r.chain) && present.some((c) => jumpsTo(r.args, c))) out.push(`-D ${r.chain} ${r.args}`);
    }
    for (const c of present) out.push(`-F ${c}`);
    for (const c of present) out.push(`-X ${c}`);
    out.push("COMMIT");
  }
  return out.length === 0 ? "" : out.join("\n") + "\n";
}
