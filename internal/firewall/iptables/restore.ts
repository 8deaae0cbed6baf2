// Rendering RuleSets as iptables-restore payloads (applied with --noflush), and the line format
// shared with iptables-save.
import { type Rule, type RuleSet, type SavedState, TABLE_ORDER, type Table } from "./model.ts";

/** A token iptables-save prints bare: letters, digits and `_.,:/!+=@%^-` only. */
export const PLAIN_TOKEN = /^[A-Za-z0-9_.,:/!+=@%^-]+$/;
/** What no token may hold: a line break (or NUL) would start a new restore command. */
export const LINE_BREAK = /[\r\n\0]/;

/** `"token"` with `\` and `"` escaped by a backslash, as iptables-save quotes. */
function quoteToken(token: string): string {
  if (token.indexOf('"') === -1 && token.indexOf("\\") === -1) return `"${token}"`;
  let out = '"';
  let from = 0;
  for (let i = 0; i < token.length; i++) {
    const c = token.charCodeAt(i);
    if (c === 92 || c === 34) {
      out += `${token.slice(from, i)}\\`;
      from = i;
    }
  }
  return `${out}${token.slice(from)}"`;
}

/**
 * The argument text of a rule, exactly as iptables-save prints it after `-A CHAIN `: comments
 * are always quoted, other tokens when they hold anything but PLAIN_TOKEN's characters. A line
 * break can never be part of a token: it would start a new restore command, so it is refused
 * outright (defence in depth behind the parsers).
 *
 * The plugin renders every meshed pod's rules in a fresh process, which compiles each RegExp on
 * its first use: line breaks are found with indexOf, and quoting needs no replace(). PLAIN_TOKEN
 * stays a RegExp: it is tested on every token of the plan, and on Istio's plans a character loop
 * over their hundreds of characters costs more than compiling the RegExp once (perf: see
 * docs/benchmarks.md). iptables.test.ts holds this to LINE_BREAK and the replace() calls it
 * stands for, byte for byte.
 */
export function renderArgs(args: readonly string[]): string {
  let out = "";
  for (let i = 0; i < args.length; i++) {
    const token = args[i]!;
    if (token.indexOf("\n") !== -1 || token.indexOf("\r") !== -1 || token.indexOf("\0") !== -1) {
      throw new Error(`refusing an iptables token with a line break: ${JSON.stringify(token)}`);
    }
    const bare = args[i - 1] !== "--comment" && PLAIN_TOKEN.test(token);
    if (i > 0) out += " ";
    out += bare ? token : quoteToken(token);
  }
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
  return `${out.join("\n")}\n`;
}

/** Rules in chains we do not own that are ours: they jump to our chains or equal one we add. */
function strayRules(rs: RuleSet, saved: SavedState, table: Table): { chain: string; args: string }[] {
  const owned = new Set(rs.chains.filter((c) => c.table === table).map((c) => c.name));
  const ours = new Set(
    rs.rules.filter((r) => r.table === table && !owned.has(r.chain)).map((r) => `${r.chain} ${renderArgs(r.args)}`),
  );
  const t = saved.tables.get(table);
  if (!t) return [];
  return t.rules.filter(
    (r) => !owned.has(r.chain) && (ours.has(`${r.chain} ${r.args}`) || [...owned].some((c) => jumpsTo(r.args, c))),
  );
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
  return `${out.join("\n")}\n`;
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
    // Each chain once: a dual-stack plan names its chains once per family, and a second -X of
    // the same chain fails the whole transaction.
    const present: string[] = [];
    for (const c of owned)
      if (c.table === table && t.chains.has(c.name) && !present.includes(c.name)) present.push(c.name);
    if (present.length === 0) continue;
    out.push(`*${table}`);
    for (const r of t.rules) {
      if (!present.includes(r.chain) && present.some((c) => jumpsTo(r.args, c))) out.push(`-D ${r.chain} ${r.args}`);
    }
    for (const c of present) out.push(`-F ${c}`);
    for (const c of present) out.push(`-X ${c}`);
    out.push("COMMIT");
  }
  return out.length === 0 ? "" : `${out.join("\n")}\n`;
}
