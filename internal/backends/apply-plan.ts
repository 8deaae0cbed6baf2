// ADD through any backend: the backend's rules, then the plan's `ip` commands, all at once (each
// is its own netlink change: Istio's TPROXY rule and route, the IPv6 ::6 address); when an `ip`
// command fails, the rules are removed again, so a failed ADD leaves nothing.
import { CniError } from "../cni/errors.ts";
import { Code } from "../cni/spec.ts";
import type { Logger } from "../plugin/log.ts";
import type { Plan } from "../plan/model.ts";
import type { Backend, Firewall } from "./types.ts";

export async function applyPlan(fw: Firewall & { driver: Backend }, plan: Plan, log: Logger, signal: AbortSignal): Promise<void> {
  await fw.driver.apply(fw, plan, log, signal);
  try {
    // Each `ip` is a process (nsenter + ip, 2-3 ms): started together, a dual-stack TPROXY
    // pod's five take about as long as one.
    const results = await Promise.all(plan.ipCommands.map((cmd) => fw.ip(cmd.family, cmd.argv, signal)));
    for (let i = 0; i < results.length; i++) {
      const r = results[i]!;
      const cmd = plan.ipCommands[i]!;
      // "File exists": the route or rule is there from an earlier ADD.
      if (r.code !== 0 && !/File exists/i.test(r.stderr)) {
        throw new CniError(Code.ApplyFailed, `ip ${cmd.argv.join(" ")} failed in the pod network namespace`, r.stderr.trim());
      }
    }
  } catch (e) {
    try {
      const owned = plan.families.flatMap((f) => f.chains);
      await fw.driver.remove(fw, { families: plan.families.map((f) => f.family), ownedChains: owned }, AbortSignal.timeout(2000));
    } catch (undoErr) {
      log.error(`could not roll back the rules after a failure: ${(undoErr as Error).message}`);
    }
    throw e;
  }
}
