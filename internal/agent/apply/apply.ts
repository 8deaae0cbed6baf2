// The agent applies a planned ADD itself (internal/agent/socket/plan-add.ts hands it the plan its
// run of the plugin's code made): in the pod's network namespace, with its own image's userland
// (io/firewall.ts), through the same backends and applyPlan as the plugin. Its log lines are the
// plugin's, in the answer. When the image lacks what this pod needs (the configured iptables
// variant, `ip` for Istio's TPROXY routes), the agent declines and the plugin applies the plan
// with the host's userland as before; a failure to apply fails the ADD (the backends roll back
// what they applied), as it would in the plugin.
import { type CniError, toCniError } from "../../cni/errors.ts";
import { applyPlan } from "../../firewall/apply.ts";
import type { OpenFirewall } from "../../firewall/io/open.ts";
import type { FirewallSettings } from "../../firewall/registry.ts";
import { countRules, type Family, type Plan } from "../../plan/model.ts";
import { createLogger, type Level } from "../../plugin/log.ts";
import type { Choice, Userland } from "../../firewall/namespace-choice.ts";

export interface ApplyRequest {
  /** The pod's namespace as the agent sees it (its netns folder). */
  path: string;
  plan: Plan;
  settings: FirewallSettings;
  /** The decision's reason, for the "applied" line. */
  reason: string;
  level: Level;
  context: string;
  signal: AbortSignal;
}

export type ApplyOutcome =
  | { kind: "applied"; backend: string; rules: number; lines: string[] }
  /** The agent's image lacks what this pod needs: the plugin applies the plan. */
  | { kind: "declined"; why: string }
  | { kind: "failed"; error: CniError; lines: string[] };

export type Applier = (r: ApplyRequest) => Promise<ApplyOutcome>;

export type OpenAgentFirewall = (o: {
  path: string;
  settings: FirewallSettings;
  families: readonly Family[];
  userland: Userland;
}) => Promise<{ fw: OpenFirewall; why: string } | Extract<Choice, { missing: string }>>;

export function createApplier(d: { userland: Userland; open: OpenAgentFirewall }): Applier {
  return async (r) => {
    if (r.plan.ipCommands.length > 0 && !d.userland.has("ip")) {
      return { kind: "declined", why: "the plan has ip commands and the agent's image has no ip" };
    }
    const lines: string[] = [];
    const log = createLogger(r.level, (l) => lines.push(l), r.context);
    const families: Family[] = [];
    for (const f of r.plan.families) families.push(f.family);
    let opened;
    try {
      opened = await d.open({ path: r.path, settings: r.settings, families, userland: d.userland });
    } catch (e) {
      const error = toCniError(e);
      log.error(`${error.msg}${error.details ? `: ${error.details}` : ""}`);
      return { kind: "failed", error, lines };
    }
    if ("missing" in opened)
      return { kind: "declined", why: `${opened.why}: the agent's image has no ${opened.missing}` };
    const { fw, why } = opened;
    if (fw.warning) log.warn(fw.warning);
    try {
      await applyPlan(fw, r.plan, log, r.signal);
    } catch (e) {
      const error = toCniError(e);
      log.error(`${error.msg}${error.details ? `: ${error.details}` : ""}`);
      return { kind: "failed", error, lines };
    }
    const rules = countRules(r.plan);
    log.info(`${r.reason}; applied ${rules} rules (${fw.backend}, IPv${families.join("+IPv")}) by the agent; ${why}`);
    if (log.enabled("debug")) log.debug(`applied:\n${fw.driver.render(r.plan)}`);
    return { kind: "applied", backend: fw.backend, rules, lines };
  };
}
