// The iptables backend: the plan as iptables-restore payloads, one transaction per family,
// applied with the host's iptables binaries (legacy, nft or plain) inside the pod's namespace.
import type { Plan } from "../../plan/model.ts";
import type { Backend } from "../backend.ts";
import { applyRuleSets, removeChains, verifyRuleSets } from "./apply.ts";
import { chooseBinaries, type Variant } from "./binaries.ts";
import { ruleSetOf } from "./from-plan.ts";
import type { RuleSet } from "./model.ts";
import { renderFresh } from "./restore.ts";

function ruleSets(plan: Plan): RuleSet[] {
  // A loop, not map: the plugin's fresh process compiles each callback builtin on first use.
  const out: RuleSet[] = [];
  for (const f of plan.families) out.push(ruleSetOf(f));
  return out;
}

export const iptablesBackend: Backend = {
  name: "iptables",
  tools(mode, families, host) {
    const chosen = chooseBinaries(
      (mode === "nftables" ? "auto" : mode) as "auto" | Variant,
      families,
      host.has,
      host.hostIptables,
    );
    if ("missing" in chosen) return chosen;
    const bins: Record<string, string> = {};
    for (const f of families) {
      bins[`restore${f}`] = chosen.restore[f];
      bins[`save${f}`] = chosen.save[f];
    }
    const warning = chosen.fallback
      ? `iptables-mode ${chosen.fallback.from}: ${chosen.fallback.missing} not found on the host; ` +
        `using the ${chosen.variant} binaries instead (set iptables-mode to the backend the node has)`
      : undefined;
    return { label: chosen.variant, bins, lockAtNetns: chosen.variant !== "nft", ...(warning ? { warning } : {}) };
  },
  render(plan) {
    const parts: string[] = [];
    for (const rs of ruleSets(plan)) {
      parts.push(
        `# ${rs.family === 6 ? "ip6tables" : "iptables"}-restore --noflush (IPv${rs.family})\n${renderFresh(rs)}`,
      );
    }
    for (const cmd of plan.ipCommands) parts.push(`# ip -${cmd.family} ${cmd.argv.join(" ")}\n`);
    return parts.join("");
  },
  apply: (fw, plan, log, signal) => applyRuleSets(fw, ruleSets(plan), log, signal),
  verify: (fw, plan, signal) => verifyRuleSets(fw, ruleSets(plan), signal),
  async remove(fw, what, signal) {
    let removed = false;
    const owned = what.ownedChains.map((c) => ({ table: c.stage, name: c.name }));
    for (const f of what.families) {
      if (await removeChains(fw, f, owned, signal, what.ownsBuiltinRule)) removed = true;
    }
    return removed;
  },
};
