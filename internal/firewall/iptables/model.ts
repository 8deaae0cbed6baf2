// Firewall rules as data. A RuleSet is everything meshcni owns in one address family of one pod
// network namespace: the chains it creates and the rules it adds, in the order they must apply.
// Rule arguments are kept in the exact form `iptables-save` prints, so that the same text serves
// as the restore payload and as the expectation CHECK compares against.

export type Table = "filter" | "mangle" | "nat" | "raw";
export type Family = 4 | 6;

export interface Rule {
  table: Table;
  chain: string;
  /** Arguments after `-A CHAIN`, one token each, as iptables-save prints them. */
  args: readonly string[];
  /** Insert at this 1-based position (`-I CHAIN N`) instead of appending. */
  insertAt?: number;
}

export interface RuleSet {
  family: Family;
  /** Chains meshcni creates, per table, in first-use order. */
  chains: readonly { table: Table; name: string }[];
  rules: readonly Rule[];
}

/** Built-in chains, which are never created or deleted. */
export const BUILTIN_CHAINS = new Set(["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]);

/** Tables in the order iptables-restore payloads list them. */
export const TABLE_ORDER: readonly Table[] = ["filter", "mangle", "nat", "raw"];

/** A small builder that records chains as rules first use them. */
export class RuleSetBuilder {
  private readonly chains: { table: Table; name: string }[] = [];
  private readonly rules: Rule[] = [];
  constructor(readonly family: Family) {}

  /** Declares a chain meshcni owns (idempotent). */
  chain(table: Table, name: string): this {
    if (!BUILTIN_CHAINS.has(name) && !this.chains.some((c) => c.table === table && c.name === name)) {
      this.chains.push({ table, name });
    }
    return this;
  }

  append(table: Table, chain: string, ...args: string[]): this {
    this.chain(table, chain);
    this.rules.push({ table, chain, args });
    return this;
  }

  insert(table: Table, chain: string, position: number, ...args: string[]): this {
    this.chain(table, chain);
    this.rules.push({ table, chain, args, insertAt: position });
    return this;
  }

  build(): RuleSet {
    return { family: this.family, chains: [...this.chains], rules: [...this.rules] };
  }
}

// What iptables-save shows of a namespace (save.ts parses it).
export interface SavedTable {
  chains: Set<string>;
  /** Rules in file order; `args` is the text after `-A CHAIN `. */
  rules: { chain: string; args: string }[];
}

export interface SavedState {
  tables: Map<Table, SavedTable>;
}
