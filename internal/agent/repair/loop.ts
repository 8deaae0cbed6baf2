// Repair's shell: every few seconds (and after each change of the node's pods) it plans with
// internal/agent/repair/plan.ts, evicts or deletes what the plan says (the pod's UID as a precondition,
// a Warning Event on it first), logs each action, and keeps the memory for /status and /metrics.
// It also takes the startup taint off the node once the chain, the binary and the view of the
// node's pods are ready (internal/agent/repair/taint.ts).
import type { PodRecord } from "../../wire/state.ts";
import {
  type ActResult,
  afterActs,
  eventMessage,
  newRepairMemory,
  noteActs,
  planRepair,
  type RepairConfig,
  type RepairMemory,
  type PodRef,
  type RepairPlan,
  repairStatus,
} from "./plan.ts";
import { untaintPatch } from "./taint.ts";
import type { NodeView, RepairStatus } from "../types.ts";
import type { Logger } from "../../log/logger.ts";
import { type AgentApi, nodePath } from "../api.ts";
import { type AgentWriter, postPodEvent, WRITE_TIMEOUT_MS } from "./api-write.ts";
import { podPath } from "../../plugin/io/kube-http.ts";

export const EVENT_REASON = "MeshcniRepair";

/** The Eviction API's subresource of a pod. */
export const evictionPath = (namespace: string, name: string) => `${podPath(namespace, name)}/eviction`;

export interface RepairDeps {
  cfg: RepairConfig;
  view: NodeView;
  api: AgentApi;
  writer: AgentWriter;
  log: Logger;
  /** The plugin's records of the node's sandboxes (read at each round; one function, so an index can serve them). */
  records(): readonly PodRecord[];
  /**
   * meshcni's entry is in the config the runtime reads first: every sandbox made from then on goes
   * through the plugin (or fails). A stale kubeconfig or binary makes ADDs fail, not skip.
   */
  chained(): boolean;
  /** The chain, the binary and the kubeconfig are current (the startup taint waits for all). */
  ready(): boolean;
  startupTaint?: string;
  intervalMs: number;
  /**
   * --repair in-place: writes the pod's rules back in its namespace (an Event posted) when the
   * agent reaches it; "unreachable": the pod is evicted as --repair evict does.
   */
  inPlace?(ref: PodRef & { reason: string }): Promise<"written" | "unreachable" | "failed">;
  /** Verification's evidence of missing rules (pod UID -> why), for the modes that do not write in place. */
  missingRules?(): ReadonlyMap<string, string>;
}

export interface RepairLoop {
  status(): RepairStatus;
  /** Pods with evidence of bypassing that were not evicted or deleted (yet). */
  bypassing(): number;
  unverified(): number;
  repaired(): number;
  refusals(): number;
  /** The startup taint is off the node (or there is none to take off). */
  untainted(): boolean;
  /** Plans again soon (new evidence). */
  poke(): void;
  stop(): void;
}

/** How often a settled repair loop looks again without a change from the watch. */
export const SETTLED_INTERVAL_MS = 30_000;
/** How many unverified pods a log line names. */
const NAMED_IN_LOG = 10;

export function startRepair(d: RepairDeps): RepairLoop {
  const { cfg, log } = d;
  let memory: RepairMemory = newRepairMemory();
  let plan: RepairPlan | undefined;
  // Since when the chain has been in place as this agent saw it: an agent that starts waits out
  // the grace period again (waiting is the safe side; nothing is kept on disk for it).
  let chainSince: number | undefined;
  const said = new Map<string, string>();
  let running = false;
  let again = false;
  let stopped = false;
  let untainted = d.startupTaint === undefined;
  let taintTries = 0;

  /**
   * Says each kind of thing once until it changes: until `same` changes, when given (a countdown's
   * seconds are no change).
   */
  const say = (kind: "repair" | "taint" | "unverified", level: "info" | "warn", text: string, same = text) => {
    if (said.get(kind) !== same) log[level](text);
    said.set(kind, same);
  };

  async function repairOne(ref: RepairPlan["act"][number]): Promise<ActResult> {
    const what = `pod ${ref.namespace}/${ref.name} (uid ${ref.uid})`;
    if (cfg.mode === "in-place" && d.inPlace) {
      const w = await d.inPlace(ref);
      if (w === "written") {
        log.info(`repair: wrote the rules of ${what} back in its namespace: ${ref.reason}`);
        return { ref, outcome: "done", as: "rewritten" };
      }
      if (w === "failed") return { ref, outcome: "failed" };
      log.info(`repair: the agent cannot reach the namespace of ${what}: it is evicted`);
    }
    const mode = cfg.mode === "delete" ? "delete" : "evict";
    const event = await postPodEvent(d.writer, ref, {
      reason: EVENT_REASON,
      message: eventMessage(mode, ref.reason, cfg.node),
      node: cfg.node,
    });
    if (!event.ok) log.warn(`repair: cannot post the Event on ${what}: ${event.reason}`);
    const preconditions = { uid: ref.uid };
    const r =
      mode === "evict"
        ? await d.writer.send(
            "POST",
            evictionPath(ref.namespace, ref.name),
            {
              apiVersion: "policy/v1",
              kind: "Eviction",
              metadata: { name: ref.name, namespace: ref.namespace },
              deleteOptions: { preconditions },
            },
            "application/json",
            WRITE_TIMEOUT_MS,
          )
        : await d.writer.send(
            "DELETE",
            podPath(ref.namespace, ref.name),
            {
              apiVersion: "v1",
              kind: "DeleteOptions",
              preconditions,
            },
            "application/json",
            WRITE_TIMEOUT_MS,
          );
    if (r.ok) {
      log.info(`repair: ${mode === "evict" ? "evicted" : "deleted"} ${what}: ${ref.reason}`);
      return cfg.mode === "in-place" ? { ref, outcome: "done", as: "evicted" } : { ref, outcome: "done" };
    }
    // 429: a PodDisruptionBudget does not allow the eviction now (kube-apiserver's "Cannot evict
    // pod as it would violate the pod's disruption budget."): tried again after a backoff.
    if (mode === "evict" && r.status === 429) {
      const message = r.message ?? r.reason;
      log.warn(`repair: the eviction of ${what} was refused (trying again later): ${message}`);
      return { ref, outcome: "refused", message };
    }
    // 404: gone already; 409: made again under the same name (the precondition held it back).
    log.warn(`repair: could not ${mode} ${what}: ${r.reason}`);
    return { ref, outcome: "failed" };
  }

  async function untaint(): Promise<void> {
    const key = d.startupTaint!;
    const got = await d.api.get(nodePath(cfg.node), WRITE_TIMEOUT_MS);
    if (got.kind !== "object") {
      say(
        "taint",
        "warn",
        `cannot read node ${cfg.node} to remove the startup taint ${key}: ` +
          `${got.kind === "status" ? `answered ${got.status}` : got.reason}`,
      );
      return;
    }
    const patch = untaintPatch(got.object, key);
    if (!patch) {
      untainted = true;
      log.info(`node ${cfg.node} has no taint ${key}: nothing to remove`);
      return;
    }
    const r = await d.writer.send("PATCH", nodePath(cfg.node), patch, "application/json-patch+json", WRITE_TIMEOUT_MS);
    if (r.ok) {
      untainted = true;
      log.info(
        `removed the startup taint ${key} from node ${cfg.node}: ` +
          `meshcni is chained and the agent knows the node's pods`,
      );
    } else if (++taintTries % 10 === 1) {
      log.warn(`cannot remove the startup taint ${key} from node ${cfg.node} (trying again): ${r.reason}`);
    }
  }

  async function round(): Promise<void> {
    const now = Date.now();
    if (!d.chained()) chainSince = undefined;
    else chainSince ??= now;
    if (!untainted && chainSince !== undefined && d.ready() && d.view.synced()) await untaint();
    const synced = d.view.synced();
    plan = planRepair(cfg, memory, {
      pods: d.view.pods(),
      records: synced ? d.records() : [],
      synced,
      chainSince,
      now,
      ...(d.missingRules ? { missingRules: d.missingRules() } : {}),
    });
    memory = plan.memory;
    if (plan.waitingFor) say("repair", "info", `repair waits: ${plan.waitingFor}`, `waits on ${plan.waitingOn}`);
    else
      say(
        "repair",
        "info",
        `repair is active (--repair ${cfg.mode}): ${plan.bypassing.length} pod(s) of node ${cfg.node} bypass the mesh`,
      );
    if (synced) {
      const names = plan.unverified.map((u) => `${u.namespace}/${u.name}`).sort();
      const more = names.length - NAMED_IN_LOG;
      const shown = more > 0 ? `${names.slice(0, NAMED_IN_LOG).join(", ")} and ${more} more` : names.join(", ");
      const text =
        names.length === 0
          ? "repair: no meshed pod of this node is unverified"
          : `repair: ${names.length} meshed pod(s) of node ${cfg.node} are unverified ` +
            `(no record of an ADD for their sandbox; reported, never removed for that; /status says why): ${shown}`;
      // Said when the set changes; the first "none" is not said.
      if (names.length > 0 || said.has("unverified")) say("unverified", "info", text, names.join(" "));
    }
    if (cfg.mode === "off") {
      for (const b of plan.bypassing) {
        if (memory.firstSeen[b.uid] === now) {
          log.warn(`repair: pod ${b.namespace}/${b.name} bypasses the mesh (--repair off: reported only): ${b.reason}`);
        }
      }
    }
    if (plan.act.length === 0) return;
    const results: ActResult[] = [];
    for (const ref of plan.act) results.push(await repairOne(ref));
    memory = noteActs(cfg, memory, results, Date.now());
    // What /status shows: a refused eviction says so, a failed act is tried again within the rate.
    plan = afterActs(plan, memory, results);
  }

  // One round at a time; a change during a round asks for one more.
  const kick = () => {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    void round()
      .catch((e) => log.error(`repair: ${(e as Error).message}`))
      .finally(() => {
        running = false;
        if (again) {
          again = false;
          kick();
        } else if (long && !stopped && !settled()) {
          // A round the watch kicked found something that waits on the clock (a confirmation, a
          // backoff): the timer looks again soon, not at the settled pace.
          clearTimeout(timer);
          long = false;
          timer = setTimeout(tick, d.intervalMs);
        }
      });
  };
  const unsubscribe = d.view.onChange(kick);
  // Rounds every intervalMs while something is pending (a pod seen bypassing, the taint, the
  // chain or the cache not there yet); once settled, the watch's changes kick rounds and the
  // timer only looks every SETTLED_INTERVAL_MS, so an idle node costs next to no CPU.
  // While only the grace period is pending, nothing but the clock and the chain can change the
  // plan (the watch kicks a round on any change of the node's pods, and with no pod bypassing
  // the records change nothing): the timer looks at the chain every intervalMs, as a round
  // would, and plans again when it broke or the grace period is over, rather than judge every pod
  // and read every record at each tick (perf: see docs/benchmarks.md).
  let timer: ReturnType<typeof setTimeout> | undefined;
  /** The timer is set at the settled pace. */
  let long = false;
  // Settled: nothing waits on the clock (a confirmation, the rate limit, a refused eviction's
  // backoff); pods already acted on or only reported change only with the watch. Not with acts
  // in the plan: it says what a round is about to do, not how that went (a refusal backs off).
  const settled = () =>
    chainSince !== undefined &&
    untainted &&
    plan !== undefined &&
    !plan.waitingFor &&
    plan.act.length === 0 &&
    plan.bypassing.every((b) => b.action !== "waiting" && b.action !== "refused");
  /** ms until the grace period ends, while it is all that is pending; undefined otherwise. */
  const graceLeft = (): number | undefined => {
    if (
      chainSince === undefined ||
      !untainted ||
      running ||
      plan === undefined ||
      plan.active ||
      plan.bypassing.length > 0 ||
      !d.view.synced()
    )
      return undefined;
    const left = chainSince + cfg.graceMs - Date.now();
    return left > 0 ? left : undefined;
  };
  const tick = () => {
    const left = graceLeft();
    // The look at the chain reads the host's CNI folder and can throw (EIO, EACCES, a link out of
    // the mounted folders): a throw here would end the timer (and, uncaught, the agent). A round
    // looks again and logs why.
    let chained = false;
    try {
      chained = left !== undefined && d.chained();
    } catch {
      chained = false;
    }
    if (chained) {
      timer = setTimeout(tick, Math.min(d.intervalMs, left! + 1));
      return;
    }
    kick();
    long = settled();
    timer = setTimeout(tick, long ? Math.max(d.intervalMs, SETTLED_INTERVAL_MS) : d.intervalMs);
  };
  tick();
  return {
    status: () => repairStatus(cfg, plan, memory),
    bypassing: () => plan?.bypassing.filter((b) => !["deleted", "evicted", "rewritten"].includes(b.action)).length ?? 0,
    unverified: () => plan?.unverified.length ?? 0,
    repaired: () => memory.repaired,
    refusals: () => memory.refusals,
    untainted: () => untainted,
    poke: () => kick(),
    stop() {
      stopped = true;
      clearTimeout(timer);
      unsubscribe();
    },
  };
}
