// The second half of a planned ADD (add.ts), imported only when the agent's answer has
// rules: the plan is checked against the model (plan/check.ts) and applied with the host's
// binaries in the pod's network namespace, as the plugin applies its own plans. A plan that does
// not check is never applied; a failed apply fails ADD and takes the agent's record back.
import type { AddAnswer } from "../../wire/protocol.ts";
import { CniError, renderError, toCniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import type { FirewallSettings } from "../../firewall/registry.ts";
import { checkPlan } from "../../plan/check.ts";
import { countRules, type Family, type Plan } from "../../plan/model.ts";
import { createLogger } from "../log.ts";
import type { Summary } from "../../wire/summary.ts";
import type { FollowUp } from "./client.ts";
import { agentLines, type PlannedAdd } from "./planned.ts";
import { openFirewall } from "../../firewall/io/open.ts";
import { applyPlan } from "../../firewall/apply.ts";
import { pathExists } from "../../firewall/io/which.ts";
import { retryableWhereAgentApplies } from "../missing-userland.ts";

export async function applyPlanned(o: {
  answer: AddAnswer;
  apply: NonNullable<AddAnswer["apply"]>;
  env: Record<string, string | undefined>;
  sink(line: string): void;
  signal: AbortSignal;
  via: { followUp?: FollowUp };
  unusable(why: string): PlannedAdd;
  dropRecord(): Promise<void>;
  /** The plugin's own result (add.ts), printed once the rules are in; the request's cniVersion for an error. */
  stdout: string;
  cniVersion: unknown;
}): Promise<PlannedAdd> {
  const { answer: a, via } = o;
  let plan: Plan;
  try {
    plan = checkPlan(o.apply.plan);
  } catch (e) {
    // Not the model: the plugin plans for itself (and writes its own record).
    await o.dropRecord();
    return o.unusable(`the agent's plan does not check: ${(e as Error).message}`);
  }
  for (const l of agentLines(a.lines)) o.sink(l);
  const summary: Summary = { ...a.summary } as Summary;
  const log = createLogger(a.level, o.sink, a.context);
  const netns = o.env.CNI_NETNS ?? "";
  try {
    const settings = o.apply.settings as FirewallSettings;
    if (!(await pathExists(netns))) {
      throw new CniError(
        Code.InvalidEnvironment,
        "CNI_NETNS does not exist",
        `${netns} is not there; the container may have gone`,
      );
    }
    const families: Family[] = [];
    for (const f of plan.families) families.push(f.family);
    const fw = await openFirewall(netns, settings, families, o.env.PATH).catch((e) => {
      throw retryableWhereAgentApplies(e);
    });
    if (fw.warning) log.warn(fw.warning);
    await applyPlan(fw, plan, log, o.signal);
    log.info(`${summary.reason}; applied ${countRules(plan)} rules (${fw.backend}, IPv${families.join("+IPv")})`);
    if (log.enabled("debug")) log.debug(`applied:\n${fw.driver.render(plan)}`);
    summary.backend = fw.backend;
    return { kind: "done", stdout: o.stdout, exitCode: 0, summary, ...via };
  } catch (e) {
    // The agent's record said "meshed" ahead of the rules: without them there is nothing to record.
    await o.dropRecord();
    const err = toCniError(e);
    log.error(`${err.msg}${err.details ? `: ${err.details}` : ""}`);
    const failed: Summary = {
      ...summary,
      outcome: "failed",
      reason: `${err.msg}${err.details ? `: ${err.details}` : ""}`,
      code: err.code,
    };
    delete failed.rules;
    return { kind: "done", stdout: renderError(err, o.cniVersion), exitCode: 1, summary: failed, ...via };
  }
}
