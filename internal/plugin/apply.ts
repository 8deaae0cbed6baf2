// Applying a pod's rules through a Firewall: one iptables-restore transaction per family, so a
// pod gets all of a family's rules or none; ADD run twice leaves one copy.
import { CniError } from "../cni/errors.ts";
import { Code } from "../cni/spec.ts";
import type { Redirect } from "../mesh/profile.ts";
import { BUILTIN_CHAINS, type Family, type RuleSet, type Table } from "../rules/model.ts";
import { renderCleanup, renderFresh, renderReconcile } from "../rules/restore.ts";
import { diffRuleSet, hasOwnedChains, parseSave, type SavedState } from "../rules/save.ts";
import type { ExecResult, Firewall } from "./deps.ts";
import type { Logger } from "./log.ts";

const tool = (f: Family, what: "restore" | "save") => `${f === 6 ? "ip6tables" : "iptables"}-${what}`;

function failed(fw: Firewall, family: Family, what: "restore" | "save", r: ExecResult): CniError {
  const err = r.stderr.trim().split("\n").slice(-3).join(" | ") || `exit code ${r.code}`;
  return new CniError(Code.ApplyFailed, `${tool(family, what)} failed in the pod network namespace`,
    `${err} (backend ${fw.backend}); if the host's kernel lacks this backend, set iptables-mode to the one the host uses`);
}

async function readState(fw: Firewall, family: Family, signal: AbortSignal): Promise<SavedState> {
  const r = await fw.save(family, signal);
  if (r.code !== 0) throw failed(fw, family, "save", r);
  return parseSave(r.stdout);
}

async function applyRuleSet(fw: Firewall, rs: RuleSet, log: Logger, signal: AbortSignal): Promise<void> {
  const fresh = await fw.restore(rs.family, renderFresh(rs), signal);
  if (fresh.code === 0) return;
  // The fresh payload creates our chains with -N and fails as a whole if one exists: ADD ran
  // before in this namespace. Read what is there and replace it in one transaction.
  const state = await readState(fw, rs.family, signal);
  if (!hasOwnedChains(rs.chains, state)) throw failed(fw, rs.family, "restore", fresh);
  log.info(`IPv${rs.family} rules already present; replacing them`);
  const again = await fw.restore(rs.family, renderReconcile(rs, state), signal);
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
  return out.length === 0 ? "" : out.join("\n") + "\n";
}

/** Removes every chain of ours (and the jumps into them, and the rules `owns` claims) from the namespace. */
export async function removeChains(
  fw: Firewall, family: Family, owned: readonly { table: Table; name: string }[], signal: AbortSignal,
  owns?: OwnsBuiltinRule,
): Promise<boolean> {
  const state = await readState(fw, family, signal);
  const payload = renderCleanup(owned, state) + (owns ? renderBuiltinDeletes(state, owns) : "");
  if (payload === "") return false;
  const r = await fw.restore(family, payload, signal);
  if (r.code !== 0) throw failed(fw, family, "restore", r);
  return true;
}

/** Applies every family; if a later family fails, the earlier ones are rolled back. */
export async function applyRedirect(fw: Firewall, redirect: Redirect, log: Logger, signal: AbortSignal): Promise<void> {
  const done: RuleSet[] = [];
  try {
    for (const rs of redirect.rulesets) {
      await applyRuleSet(fw, rs, log, signal);
      done.push(rs);
    }
    for (const cmd of redirect.ipCommands) {
      const r = await fw.ip(cmd.family, cmd.argv, signal);
      // "File exists": the route or rule is there from an earlier ADD.
      if (r.code !== 0 && !/File exists/i.test(r.stderr)) {
        throw new CniError(Code.ApplyFailed, `ip ${cmd.argv.join(" ")} failed in the pod network namespace`, r.stderr.trim());
      }
    }
  } catch (e) {
    for (const rs of done) {
      try {
        await removeChains(fw, rs.family, rs.chains, AbortSignal.timeout(2000));
      } catch (undoErr) {
        log.error(`could not roll back IPv${rs.family} rules after a failure: ${(undoErr as Error).message}`);
      }
    }
    throw e;
  }
}

/** CHECK: the problems with the installed rules, empty when they are exactly as ADD makes them. */
export async function verifyRedirect(fw: Firewall, redirect: Redirect, signal: AbortSignal): Promise<string[]> {
  const problems: string[] = [];
  for (const rs of redirect.rulesets) {
    problems.push(...diffRuleSet(rs, await readState(fw, rs.family, signal)));
  }
  return problems;
}
