// ADD through any backend: the backend's rules, then the plan's `ip` commands, all at once (each
// is its own netlink change: Istio's TPROXY rule and route, the IPv6 ::6 address). When an `ip`
// command fails, the ones this ADD carried out are undone and the rules removed again, so a
// failed ADD leaves nothing.
import { CniError } from "../cni/errors.ts";
import { Code } from "../cni/spec.ts";
import type { Logger } from "../log/logger.ts";
import { type IpCommand, type Plan, undoIpCommand } from "../plan/model.ts";
import type { Backend, Firewall } from "./backend.ts";

export async function applyPlan(
  fw: Firewall & { driver: Backend },
  plan: Plan,
  log: Logger,
  signal: AbortSignal,
): Promise<void> {
  await fw.driver.apply(fw, plan, log, signal);
  // Most plans have none (every Linkerd pod): no Promise.allSettled then, a builtin the plugin's
  // fresh process would compile on its first use.
  if (plan.ipCommands.length === 0) return;
  // Each `ip` is a process of its own (nsenter + ip): started together, a dual-stack TPROXY
  // pod's five take about as long as one.
  const settled = await Promise.allSettled(plan.ipCommands.map((cmd) => fw.ip(cmd.family, cmd.argv, signal)));
  const changed: IpCommand[] = [];
  let failure: unknown;
  let timeout: unknown;
  for (let i = 0; i < settled.length; i++) {
    const s = settled[i]!;
    const cmd = plan.ipCommands[i]!;
    if (s.status === "rejected") {
      timeout ??= s.reason;
      continue;
    }
    const r = s.value;
    if (r.code === 0) changed.push(cmd);
    // "File exists": the route or rule is there from an earlier ADD.
    else if (!/File exists/i.test(r.stderr)) {
      failure ??= new CniError(
        Code.ApplyFailed,
        `ip ${cmd.argv.join(" ")} failed in the pod network namespace`,
        r.stderr.trim(),
      );
    }
  }
  // A command's own failure says more than another's timeout.
  const e = failure ?? timeout;
  if (e === undefined) return;
  const bound = AbortSignal.timeout(2000);
  await Promise.all(
    changed.map(async (cmd) => {
      const undo = undoIpCommand(cmd);
      if (!undo) return;
      try {
        const r = await fw.ip(undo.family, undo.argv, bound);
        if (r.code !== 0) log.error(`could not undo ip ${cmd.argv.join(" ")} after a failure: ${r.stderr.trim()}`);
      } catch (undoErr) {
        log.error(`could not undo ip ${cmd.argv.join(" ")} after a failure: ${(undoErr as Error).message}`);
      }
    }),
  );
  try {
    const owned = plan.families.flatMap((f) => f.chains);
    await fw.driver.remove(fw, { families: plan.families.map((f) => f.family), ownedChains: owned }, bound);
  } catch (undoErr) {
    log.error(`could not roll back the rules after a failure: ${(undoErr as Error).message}`);
  }
  throw e;
}
