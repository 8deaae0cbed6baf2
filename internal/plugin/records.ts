// The plugin's records of the containers it handled (wire/state.ts's PodRecord): written before an
// ADD for a Kubernetes pod returns success, read and removed by DEL, pruned by GC. A DEL that finds
// no record, or one saying the pod was skipped, runs no process at all.
import type { PodRecord } from "../wire/state.ts";
import type { PluginConf } from "../config/plugin-config.ts";
import type { Family } from "../plan/model.ts";
import { NotPlannable, type PluginDeps } from "./deps.ts";
import type { PluginLogger } from "./log.ts";
import type { Summary } from "../wire/summary.ts";

interface RecordCtx {
  args: { containerId?: string | undefined };
  conf: PluginConf;
  deps: PluginDeps;
  log: PluginLogger;
  summary: Summary;
}

export async function addRecord(
  ctx: RecordCtx,
  what: { decision: PodRecord["decision"]; reason: string; backend?: string; families?: Family[] },
): Promise<void> {
  const { deps, args, summary } = ctx;
  if (!deps.records || !args.containerId || !summary.pod) return;
  const record: PodRecord = {
    v: 1,
    containerId: args.containerId,
    namespace: summary.pod.namespace,
    name: summary.pod.name,
    decision: what.decision,
    reason: what.reason,
    time: new Date().toISOString(),
  };
  if (summary.pod.uid !== undefined) record.uid = summary.pod.uid;
  if (what.backend !== undefined) record.backend = what.backend;
  if (what.families !== undefined) record.families = what.families;
  try {
    await deps.records.write(ctx.conf.state_dir, record);
  } catch (e) {
    if (e instanceof NotPlannable) throw e;
    // The pod is set up; a missing record costs only the agent's view of it.
    ctx.log.warn(`could not write the record of this container in ${ctx.conf.state_dir}: ${(e as Error).message}`);
  }
}

/** Why a DEL whose record says "skipped" runs nothing (here and in io/report.ts's fast path). */
export const skippedReason = (record: PodRecord) => `the pod got no rules at ADD (${record.reason})`;

/** "done": DEL has nothing more to do (no process runs); "rules": DEL removes the rules. */
export async function delByRecord(ctx: RecordCtx): Promise<"done" | "rules"> {
  const { deps, args, conf, summary, log } = ctx;
  if (!deps.records || !args.containerId) return "rules";
  const record = await deps.records.read(conf.state_dir, args.containerId);
  if (record === undefined) {
    Object.assign(summary, {
      outcome: "untouched",
      reason: "no record of this container: meshcni applied no rules to it",
    });
    return "done";
  }
  if (record === "unreadable") {
    log.warn(`the record of this container in ${conf.state_dir} is unreadable; removing any rules`);
    await deps.records.remove(conf.state_dir, args.containerId);
    return "rules";
  }
  summary.pod = { namespace: record.namespace, name: record.name, ...(record.uid ? { uid: record.uid } : {}) };
  await deps.records.remove(conf.state_dir, args.containerId);
  if (record.decision === "skipped") {
    Object.assign(summary, { outcome: "untouched", reason: skippedReason(record) });
    return "done";
  }
  return "rules";
}

/** GC: records of containers the runtime no longer lists in cni.dev/valid-attachments go. */
export async function gcRecords(ctx: RecordCtx): Promise<void> {
  const { deps, conf, summary, log } = ctx;
  const valid = (conf as Record<string, unknown>)["cni.dev/valid-attachments"];
  if (!deps.records || !Array.isArray(valid)) {
    summary.reason = "no valid-attachments list: nothing pruned";
    return;
  }
  const keep = new Set<string>();
  for (const a of valid) {
    const id = (a as { containerID?: unknown } | null)?.containerID;
    if (typeof id === "string") keep.add(id);
  }
  const removed = await deps.records.prune(conf.state_dir, keep);
  if (removed.length > 0)
    log.info(`removed the records of ${removed.length} container(s) the runtime no longer has: ${removed.join(", ")}`);
  summary.reason = `kept ${keep.size} attachment(s), removed ${removed.length} record(s)`;
}
