// The plugin's records of the containers it handled (wire/state.ts's PodRecord): written before an
// ADD for a Kubernetes pod returns success, removed by DEL, pruned by GC. DEL runs no process.
import type { PodRecord } from "../wire/state.ts";
import type { PluginConf } from "../config/plugin-config.ts";
import type { Family } from "../plan/model.ts";
import { NotPlannable, type PluginDeps } from "./deps.ts";
import type { PluginLogger } from "./log.ts";
import { NO_REMOVAL, type Summary, skippedReason } from "../wire/summary.ts";

interface RecordCtx {
  args: { containerId?: string | undefined; netns?: string | undefined };
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
  if (args.netns) record.netns = args.netns;
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

/** DEL: the container's record goes (report.ts's answerDel does the same before this code loads). */
export async function delByRecord(ctx: RecordCtx): Promise<void> {
  const { deps, args, conf, summary } = ctx;
  if (!deps.records || !args.containerId) return;
  const record = await deps.records.read(conf.state_dir, args.containerId);
  if (record === undefined) {
    Object.assign(summary, {
      outcome: "untouched",
      reason: "no record of this container: meshcni applied no rules to it",
    });
    return;
  }
  await deps.records.remove(conf.state_dir, args.containerId);
  if (record === "unreadable") {
    Object.assign(summary, { outcome: "ok", reason: `an unreadable record removed; ${NO_REMOVAL}` });
    return;
  }
  summary.pod = { namespace: record.namespace, name: record.name, ...(record.uid ? { uid: record.uid } : {}) };
  if (record.decision === "skipped") Object.assign(summary, { outcome: "untouched", reason: skippedReason(record) });
  else
    Object.assign(summary, {
      outcome: "ok",
      reason: NO_REMOVAL,
      ...(record.backend ? { backend: record.backend } : {}),
    });
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
