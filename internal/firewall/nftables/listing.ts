// Reading `nft list table` output back into chains and rule lines, and comparing them with the
// chains the plan renders (CHECK). Handles and counters are not printed (no -a, no counters).
import type { NftChain } from "./render.ts";

export interface ListedChain {
  spec?: string;
  rules: string[];
}

export function parseTable(text: string): Map<string, ListedChain> {
  const chains = new Map<string, ListedChain>();
  let current: ListedChain | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    const head = /^chain (\S+) \{$/.exec(line);
    if (head) {
      current = { rules: [] };
      chains.set(head[1]!, current);
    } else if (line === "}") {
      current = undefined;
    } else if (current && line !== "") {
      if (line.startsWith("type ")) current.spec = line;
      else current.rules.push(line);
    }
  }
  return chains;
}

/** Problems, empty when the listed table holds exactly the plan's chains and rules. */
export function diffTable(table: string, want: readonly NftChain[], have: Map<string, ListedChain>): string[] {
  const problems: string[] = [];
  for (const c of want) {
    const h = have.get(c.name);
    if (!h) {
      problems.push(`nft chain ${c.name} is missing from table ${table}`);
      continue;
    }
    if ((c.spec ?? "") !== (h.spec ?? ""))
      problems.push(`nft ${table}/${c.name}: declared '${h.spec ?? "regular"}', expected '${c.spec ?? "regular"}'`);
    if (c.rules.join("\n") !== h.rules.join("\n")) {
      const missing = c.rules.filter((w) => !h.rules.includes(w));
      const extra = h.rules.filter((x) => !c.rules.includes(x));
      const parts: string[] = [];
      if (missing.length) parts.push(`missing ${missing.map((m) => `'${m}'`).join(", ")}`);
      if (extra.length) parts.push(`unexpected ${extra.map((m) => `'${m}'`).join(", ")}`);
      if (!parts.length) parts.push("rules are out of order or repeated");
      problems.push(`nft ${table}/${c.name}: ${parts.join("; ")}`);
    }
  }
  for (const name of have.keys()) {
    if (!want.some((c) => c.name === name)) problems.push(`nft ${table}: unexpected chain ${name}`);
  }
  return problems;
}
