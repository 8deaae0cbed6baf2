// Reading iptables-save output, and comparing it with the rules a pod should have (CHECK).
import type { RuleSet, SavedState, SavedTable, Table } from "./model.ts";
import { renderArgs } from "./restore.ts";

/** Parses iptables-save text. Comment lines and counters are ignored. */
export function parseSave(text: string): SavedState {
  const tables = new Map<Table, SavedTable>();
  let current: SavedTable | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.trimEnd();
    if (line === "" || line.startsWith("#")) continue;
    if (line.startsWith("*")) {
      current = { chains: new Set(), rules: [] };
      tables.set(line.slice(1).trim() as Table, current);
    } else if (line === "COMMIT") {
      current = undefined;
    } else if (current && line.startsWith(":")) {
      current.chains.add(line.slice(1).split(" ")[0]!);
    } else if (current && line.startsWith("-A ")) {
      const rest = line.slice(3);
      const sp = rest.indexOf(" ");
      current.rules.push(
        sp === -1 ? { chain: rest, args: "" } : { chain: rest.slice(0, sp), args: rest.slice(sp + 1) },
      );
    }
  }
  return { tables };
}

/** Whether any chain we own exists in the saved state. */
export function hasOwnedChains(owned: readonly { table: Table; name: string }[], saved: SavedState): boolean {
  return owned.some((c) => saved.tables.get(c.table)?.chains.has(c.name) ?? false);
}

/**
 * Compares the rules a pod should have with what is installed. Returns human-readable problems;
 * an empty list means the namespace holds exactly our rules. Rules others added to built-in
 * chains are tolerated; ours there must appear exactly once.
 */
export function diffRuleSet(rs: RuleSet, saved: SavedState): string[] {
  const problems: string[] = [];
  const fam = rs.family === 6 ? "ip6tables" : "iptables";
  for (const c of rs.chains) {
    const t = saved.tables.get(c.table);
    if (!t?.chains.has(c.name)) {
      problems.push(`${fam} chain ${c.name} is missing from table ${c.table}`);
      continue;
    }
    const want = rs.rules.filter((r) => r.table === c.table && r.chain === c.name).map((r) => renderArgs(r.args));
    const have = t.rules.filter((r) => r.chain === c.name).map((r) => r.args);
    if (want.join("\n") !== have.join("\n")) {
      const missing = want.filter((w) => !have.includes(w));
      const extra = have.filter((h) => !want.includes(h));
      const parts: string[] = [];
      if (missing.length) parts.push(`missing ${missing.map((m) => `'-A ${c.name} ${m}'`).join(", ")}`);
      if (extra.length) parts.push(`unexpected ${extra.map((m) => `'-A ${c.name} ${m}'`).join(", ")}`);
      if (!parts.length) parts.push("rules are out of order");
      problems.push(`${fam} ${c.table}/${c.name}: ${parts.join("; ")}`);
    }
  }
  const owned = new Set(rs.chains.map((c) => `${c.table}/${c.name}`));
  for (const r of rs.rules) {
    if (owned.has(`${r.table}/${r.chain}`)) continue;
    const args = renderArgs(r.args);
    const n = saved.tables.get(r.table)?.rules.filter((s) => s.chain === r.chain && s.args === args).length ?? 0;
    if (n !== 1) {
      problems.push(`${fam} ${r.table}/${r.chain}: expected one '-A ${r.chain} ${args}', found ${n}`);
    }
  }
  return problems;
}
