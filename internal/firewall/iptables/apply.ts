// Applying RuleSets with iptables-restore: one transaction per family, so a pod gets all of a
// family's rules or none; ADD run twice leaves one copy. CHECK reads iptables-save; DEL removes
// our chains, the jumps into them and the rules the profile claims.
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import type { Logger } from "../../log/logger.ts";
import type { ExecResult, Firewall } from "../backend.ts";
import { BUILTIN_CHAINS, type Family, type RuleSet, type Table } from "./model.ts";
import { renderCleanup, renderFresh, renderReconcile } from "./restore.ts";
import type { SavedState } from "./model.ts";
import { diffRuleSet, hasOwnedChains, parseSave } from "./save.ts";

const tool = (f: Family, what: "restore" | "save") => `${f === 6 ? "ip6tables" : "iptables"}-${what}`;

function failed(fw: Firewall, family: Family, what: "restore" | "save", r: ExecResult): CniError {
  const err = r.stderr.trim().split("\n").slice(-3).join(" | ") || `exit code ${r.code}`;
  return new CniError(
    Code.ApplyFailed,
    `${tool(family, what)} failed in the pod network namespace`,
    `${err} (backend ${fw.backend}); if the host's kernel lacks ` +
      `this backend, set iptables-mode to the one the host uses`,
  );
}

/** iptables-restore --noflush of one family's payload, with the lock flags this host's iptables takes. */
export const restore = (fw: Firewall, family: Family, payload: string, signal: AbortSignal) =>
  fw.run(`restore${family}`, ["--noflush", ...(fw.waitArgs ?? (fw.wait ? ["--wait"] : []))], payload, signal);

async function readState(fw: Firewall, family: Family, signal: AbortSignal): Promise<SavedState> {
  const r = await fw.run(`save${family}`, [], undefined, signal);
  if (r.code !== 0) throw failed(fw, family, "save", r);
  return parseSave(r.stdout);
}

async function applyRuleSet(fw: Firewall, rs: RuleSet, log: Logger, signal: AbortSignal): Promise<void> {
  const fresh = await restore(fw, rs.family, renderFresh(rs), signal);
  if (fresh.code === 0) return;
  // The fresh payload creates our chains with -N and fails as a whole if one exists: ADD ran
  // before in this namespace. Read what is there and replace it in one transaction.
  const state = await readState(fw, rs.family, signal);
  if (!hasOwnedChains(rs.chains, state)) throw failed(fw, rs.family, "restore", fresh);
  log.info(`IPv${rs.family} rules already present; replacing them`);
  const again = await restore(fw, rs.family, renderReconcile(rs, state), signal);
  if (again.code !== 0) throw failed(fw, rs.family, "restore", again);
}

/** Rules of ours in built-in chains that jump to none of our chains (see MeshProfile.ownsBuiltinRule). */
export type OwnsBuiltinRule = (table: Table, chain: string, args: string) => boolean;

function renderBuiltinDeletes(state: SavedState, owns: OwnsBuiltinRule): string {
  const out: string[] = [];
  for (const [table, t] of state.tables) {
    const mine = t.rules.filter((r) => BUILTIN_CHAINS.has(r.chain) && owns(table, r.chain, r.args));
    if (mine.length > 0) out.push(`*${table}`, ...mine.map((r) => `-D ${r.chain} ${r.args}`), "COMMIT");
  }
  return out.length === 0 ? "" : `${out.join("\n")}\n`;
}

/** Removes every chain of ours (and the jumps into them, and the rules `owns` claims) from the namespace. */
export async function removeChains(
  fw: Firewall,
  family: Family,
  owned: readonly { table: Table; name: string }[],
  signal: AbortSignal,
  owns?: OwnsBuiltinRule,
): Promise<boolean> {
  const state = await readState(fw, family, signal);
  const payload = renderCleanup(owned, state) + (owns ? renderBuiltinDeletes(state, owns) : "");
  if (payload === "") return false;
  const r = await restore(fw, family, payload, signal);
  if (r.code !== 0) throw failed(fw, family, "restore", r);
  return true;
}

/**
 * Applies every family; if one fails, the ones applied are rolled back. Where the binaries share
 * no lock (fw.concurrent), the families' transactions run at the same time: a dual-stack pod's
 * ADD then waits for one iptables-restore instead of two (perf: see docs/benchmarks.md).
 */
export async function applyRuleSets(
  fw: Firewall,
  rulesets: readonly RuleSet[],
  log: Logger,
  signal: AbortSignal,
): Promise<void> {
  if (fw.concurrent && rulesets.length > 1) {
    const results = await Promise.allSettled(rulesets.map((rs) => applyRuleSet(fw, rs, log, signal)));
    const applied: RuleSet[] = [];
    let failure: { reason: unknown } | undefined;
    for (let i = 0; i < results.length; i++) {
      const rs = rulesets[i]!;
      if (results[i]!.status === "fulfilled") {
        applied.push(rs);
        continue;
      }
      // Once more, alone: an iptables-nft that does not retry a transaction whose ruleset
      // generation moved on meanwhile (older releases) may fail the second of two at once.
      try {
        await applyRuleSet(fw, rs, log, signal);
        applied.push(rs);
      } catch (e) {
        failure ??= { reason: e };
      }
    }
    if (!failure) return;
    await rollback(fw, applied, log);
    throw failure.reason;
  }
  const done: RuleSet[] = [];
  try {
    for (const rs of rulesets) {
      await applyRuleSet(fw, rs, log, signal);
      done.push(rs);
    }
  } catch (e) {
    await rollback(fw, done, log);
    throw e;
  }
}

export async function rollback(fw: Firewall, rulesets: readonly RuleSet[], log: Logger): Promise<void> {
  for (const rs of rulesets) {
    try {
      await removeChains(fw, rs.family, rs.chains, AbortSignal.timeout(2000));
    } catch (undoErr) {
      log.error(`could not roll back IPv${rs.family} rules after a failure: ${(undoErr as Error).message}`);
    }
  }
}

/** CHECK: the problems with the installed rules, empty when they are exactly as ADD makes them. */
export async function verifyRuleSets(
  fw: Firewall,
  rulesets: readonly RuleSet[],
  signal: AbortSignal,
): Promise<string[]> {
  const problems: string[] = [];
  for (const rs of rulesets) problems.push(...diffRuleSet(rs, await readState(fw, rs.family, signal)));
  return problems;
}
