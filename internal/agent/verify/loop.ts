// Verify's shell: a timer that, spread over the period (each pod at its own slot, plan.ts's
// dueIn), runs the backend's CHECK for the node's meshed pods in their namespaces with the same
// code the socket's CHECK runs (../socket/check.ts), and once right after each ADD the agent
// applied. With --repair in-place, rules found missing or altered are written back with the same
// code the socket's ADD runs (../socket/plan-add.ts, no record written), an Event is posted on
// the pod, a line logged and the act counted; otherwise the pod is reported (/status, /metrics,
// the log). One pod at a time: the CHECKs and writes enter namespaces on the JS thread.
import type { Logger } from "../../log/logger.ts";
import type { AddRequest } from "../../wire/protocol.ts";
import type { PodRecord } from "../../wire/state.ts";
import type { JsonObject } from "../install/conflist/chain.ts";
import type { RepairConfig } from "../repair/plan.ts";
import { type AgentWriter, postPodEvent } from "../repair/api-write.ts";
import type { CheckResult } from "../socket/check.ts";
import type { PlanAnswer } from "../socket/plan-add.ts";
import type { NodeView, VerifyFinding, VerifyStatus } from "../types.ts";
import {
  actOn,
  dueIn,
  inPlaceMessage,
  type PendingPod,
  planTargets,
  podRequest,
  redirectGone,
  resolveByAddress,
  type UnreachablePod,
  type Verdict,
  type VerifyMode,
  type VerifyTarget,
  judgeCheck,
} from "./plan.ts";

export const VERIFY_EVENT_REASON = "MeshcniRepair";
/** A read of the namespaces' addresses younger than this is not read again for a pod it lacks. */
const ADDRESSES_FRESH_MS = 5000;
/** How long a pod's verdict of missing rules stays listed in /status after it was last seen. */
const NAMED_MS = 10 * 60_000;

export interface VerifyDeps {
  cfg: RepairConfig;
  mode: VerifyMode;
  view: NodeView;
  records(): readonly PodRecord[];
  /** The plugin's entry as the agent wrote it (the CHECK's and ADD's stdin). */
  entry: JsonObject;
  version: string;
  /** The socket's CHECK, run in the agent. */
  check(req: AddRequest, signal: AbortSignal): Promise<CheckResult>;
  /** The socket's ADD planner with the applier, writing no record. */
  write(req: AddRequest, signal: AbortSignal): Promise<PlanAnswer>;
  /** Whether the namespace of this name is (still) in the netns folder. */
  netnsThere(name: string): boolean;
  /** address -> names of the namespaces holding it (read only when a pod needs it). */
  addresses(): Map<string, string[]>;
  writer: AgentWriter;
  log: Logger;
  /** 0: no periodic verification (only after each ADD the agent applied). */
  periodMs: number;
  /** The set of pods with missing rules reported (not written back) changed. */
  onEvidence?(): void;
}

export interface VerifyLoop {
  status(): VerifyStatus;
  /** The pod of an ADD the agent applied: verified soon after. */
  afterAdd(t: VerifyTarget): void;
  /** The validator's evidence (repair in-place): write the pod's rules where the agent reaches its namespace. */
  writeInPlace(ref: { namespace: string; name: string; uid: string; reason: string }): Promise<WriteOutcome>;
  /** Pods whose rules the latest check found missing and that were not written back: UID -> why. */
  missingRules(): ReadonlyMap<string, string>;
  runs(): number;
  missing(): number;
  rewritten(): number;
  failures(): number;
  stop(): void;
}

export type WriteOutcome = "written" | "unreachable" | "failed";

export function startVerify(d: VerifyDeps): VerifyLoop {
  const { cfg, log } = d;
  const stopper = new AbortController();
  const counts = { runs: 0, missing: 0, rewritten: 0, failures: 0 };
  let round = { checked: 0, missing: 0, rewritten: 0, unknown: 0, gone: 0 };
  let lastRound: VerifyStatus["lastRound"];
  let unreachable: UnreachablePod[] = [];
  const findings = new Map<string, VerifyFinding>();
  const said = new Map<string, string>();
  /** Pod UID -> ms of its last Event of a rewrite. */
  const evented = new Map<string, number>();
  let queue: Promise<void> = Promise.resolve();
  const serial = (fn: () => Promise<void>) => {
    queue = queue.then(fn).catch((e) => log.error(`verify: ${(e as Error).message}`));
    return queue;
  };

  async function postEvent(t: { namespace: string; name: string; uid: string }, message: string): Promise<void> {
    const r = await postPodEvent(d.writer, t, { reason: VERIFY_EVENT_REASON, message, node: cfg.node });
    if (!r.ok) log.warn(`verify: cannot post the Event on pod ${t.namespace}/${t.name}: ${r.reason}`);
  }

  /** The Event of a rewrite. */
  async function rewritten(t: VerifyTarget, why: string): Promise<void> {
    // One Event per pod per NAMED_MS: something that keeps removing the rules (a tool fighting
    // meshcni) gets them written back every period, logged and counted each time.
    const last = evented.get(t.uid);
    if (last === undefined || Date.now() - last > NAMED_MS) {
      evented.set(t.uid, Date.now());
      await postEvent(t, inPlaceMessage(cfg.node, why));
    }
  }

  /** Writes the pod's rules back in its namespace; true when they are in (the Event is the caller's). */
  async function rewrite(t: VerifyTarget, why: string): Promise<boolean> {
    const what = `pod ${t.namespace}/${t.name} (uid ${t.uid}, namespace ${t.netns})`;
    const a = await d.write(podRequest("ADD", t, d.entry, d.version), AbortSignal.timeout(30_000));
    if (a.ok && a.answer.applied) {
      counts.rewritten++;
      round.rewritten++;
      const rules = a.answer.applied.rules;
      log.warn(
        `verify: wrote ${rules} rules back into ${what} (${a.answer.applied.backend}): ${why}; ` +
          "connections opened before keep their path until they close",
      );
      return true;
    }
    counts.failures++;
    const reason = a.ok ? (a.answer.summary as { reason?: string }).reason : a.why;
    log.warn(`verify: could not write the rules of ${what} back: ${reason ?? "no reason given"}`);
    return false;
  }

  async function verifyOne(t: VerifyTarget): Promise<Verdict> {
    const now = Date.now();
    for (const [k, f] of findings) if (now - Date.parse(f.at) > NAMED_MS) findings.delete(k);
    for (const k of said.keys()) if (!findings.has(k)) said.delete(k);
    for (const [k, at] of evented) if (now - at > NAMED_MS) evented.delete(k);
    counts.runs++;
    round.checked++;
    const r = await d.check(podRequest("CHECK", t, d.entry, d.version), AbortSignal.timeout(30_000));
    const v = judgeCheck(r, d.netnsThere(t.netns));
    const key = t.uid;
    const at = new Date(now).toISOString();
    const finding = (verdict: VerifyFinding["verdict"], why: string, action: VerifyFinding["action"]) =>
      findings.set(key, { namespace: t.namespace, name: t.name, uid: t.uid, via: t.via, verdict, why, action, at });
    if (v.kind === "ok" || v.kind === "gone") {
      if (v.kind === "gone") round.gone++;
      // A rewrite stays listed (for NAMED_MS): what the agent did; a report or a doubt is over.
      const reported = findings.get(key)?.action === "reported";
      if (findings.get(key)?.action !== "rewritten") findings.delete(key);
      if (reported) d.onEvidence?.();
      said.delete(key);
      return v;
    }
    if (v.kind === "unknown") {
      round.unknown++;
      finding("unknown", v.why, "none");
      if (said.get(key) !== v.why) log.info(`verify: cannot tell pod ${t.namespace}/${t.name}'s rules: ${v.why}`);
      said.set(key, v.why);
      return v;
    }
    counts.missing++;
    round.missing++;
    const act = actOn(v, d.mode);
    if (act === "write") {
      const ok = await rewrite(t, v.why);
      finding("missing", v.why, ok ? "rewritten" : "failed");
      if (ok) await rewritten(t, v.why);
    } else {
      const known = findings.get(key)?.action === "reported";
      finding("missing", v.why, "reported");
      if (!known) d.onEvidence?.();
      if (said.get(key) !== v.why) {
        const then = cfg.mode === "off" ? "reported only" : `repair ${cfg.mode === "delete" ? "deletes" : "evicts"} it`;
        log.warn(
          `verify: pod ${t.namespace}/${t.name}'s rules are missing or altered in its namespace ` +
            `(--repair ${cfg.mode}: ${then}): ${v.why}`,
        );
      }
      said.set(key, v.why);
    }
    return v;
  }

  // The node's pods judged again only when the watch or the records changed (the record index
  // hands out the same array until a record changes): a tick between changes only picks the due.
  let planned: ReturnType<typeof planTargets> | undefined;
  let plannedRecords: readonly PodRecord[] | undefined;
  const unwatch = d.view.onChange(() => {
    planned = undefined;
  });
  const plan = () => {
    const recs = d.records();
    if (!planned || recs !== plannedRecords) {
      planned = planTargets(cfg, d.view.pods(), recs);
      plannedRecords = recs;
    }
    return planned;
  };

  // The namespaces' addresses, read at most once a period (each read enters every namespace of the
  // folder), and again when a pod is not found in a read older than ADDRESSES_FRESH_MS (a pod that
  // started since).
  let addresses: { at: number; map: Map<string, string[]> } | undefined;
  const byAddress = (pending: readonly PendingPod[]) => {
    const now = Date.now();
    if (!addresses || now - addresses.at >= Math.max(d.periodMs, ADDRESSES_FRESH_MS))
      addresses = { at: now, map: d.addresses() };
    let found = resolveByAddress(pending, addresses.map);
    if (found.unreachable.length > 0 && now - addresses.at >= ADDRESSES_FRESH_MS) {
      addresses = { at: now, map: d.addresses() };
      found = resolveByAddress(pending, addresses.map);
    }
    return found;
  };

  /** The node's pods to verify now: every pod, or those due in (from, to]. */
  function targets(from: number, to: number): VerifyTarget[] {
    if (!d.view.synced()) return [];
    const planned = plan();
    const due = dueIn(planned.targets, d.periodMs, from, to);
    const pending = dueIn(planned.pending, d.periodMs, from, to);
    if (pending.length === 0) return due;
    const found = byAddress(pending);
    // The unreachable list is replaced pod by pod as each comes due.
    const seen = new Set(pending.map((p) => p.uid));
    const live = new Set([...planned.pending.map((p) => p.uid)]);
    unreachable = [...unreachable.filter((u) => !seen.has(u.uid) && live.has(u.uid)), ...found.unreachable];
    return [...due, ...found.targets];
  }

  let last = Date.now();
  let periodStart = last;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const tickMs = Math.max(200, Math.min(1000, Math.floor(d.periodMs / 10)));
  const tick = () => {
    const now = Date.now();
    const from = last;
    last = now;
    void serial(async () => {
      for (const t of targets(from, now)) {
        if (stopper.signal.aborted) return;
        await verifyOne(t);
      }
      if (now - periodStart >= d.periodMs) {
        lastRound = { at: new Date(now).toISOString(), ...round };
        round = { checked: 0, missing: 0, rewritten: 0, unknown: 0, gone: 0 };
        periodStart = now;
      }
    }).finally(() => {
      if (!stopper.signal.aborted) timer = setTimeout(tick, tickMs);
    });
  };
  if (d.periodMs > 0) {
    timer = setTimeout(tick, tickMs);
    log.info(
      `verify: every meshed pod's rules are checked in its namespace once every ${d.periodMs / 1000} s ` +
        `(--repair ${cfg.mode}: ${d.mode === "in-place" ? "missing rules are written back" : "missing rules are reported"})`,
    );
  } else log.info("verify: no periodic check (--verify-seconds 0); each ADD the agent applied is checked once");

  return {
    status: () => ({
      periodSeconds: d.periodMs / 1000,
      mode: d.mode,
      ...(lastRound ? { lastRound } : {}),
      ...counts,
      unreachable,
      findings: [...findings.values()],
    }),
    afterAdd(t) {
      // Off the ADD's answer: the plugin has its answer before the CHECK runs.
      setTimeout(() => void serial(async () => void (await verifyOne(t))), 0);
    },
    async writeInPlace(ref) {
      let outcome: WriteOutcome = "unreachable";
      await serial(async () => {
        const planned = plan();
        let t = planned.targets.find((x) => x.uid === ref.uid);
        if (!t) {
          const p = planned.pending.find((x) => x.uid === ref.uid);
          if (p) t = byAddress([p]).targets[0];
        }
        if (!t || !d.netnsThere(t.netns)) return;
        // Reached: whatever happens now, the pod is not "unreachable" (which would evict it).
        outcome = "failed";
        const ok = await rewrite(t, ref.reason);
        if (ok) await rewritten(t, ref.reason);
        outcome = ok ? "written" : "failed";
      });
      return outcome;
    },
    missingRules: () => {
      const out = new Map<string, string>();
      for (const f of findings.values())
        if (f.verdict === "missing" && f.action === "reported" && redirectGone(f.why)) out.set(f.uid, f.why);
      return out;
    },
    runs: () => counts.runs,
    missing: () => counts.missing,
    rewritten: () => counts.rewritten,
    failures: () => counts.failures,
    stop() {
      stopper.abort();
      clearTimeout(timer);
      unwatch();
    },
  };
}
