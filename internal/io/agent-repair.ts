// Repair's shell: every few seconds (and after each change of the node's pods) it plans with
// internal/agent/repair.ts, deletes what the plan says (the pod's UID as a precondition, an Event
// on it first), logs each action, and keeps the memory for /status and /metrics. It also takes the
// startup taint off the node once the chain, the binary and the view of the node's pods are
// ready (internal/agent/taint.ts).
import { mkdirSync, readdirSync, readFileSync, renameSync, unlinkSync, writeFileSync } from "node:fs";
import { CHAINED_SINCE_FILE, RECORDS_SINCE_FILE } from "../agent/protocol.ts";
import { eventMessage, newRepairMemory, podKey, noteDeletions, planRepair, type RepairConfig, type RepairMemory, type RepairPlan, repairStatus } from "../agent/repair.ts";
import { untaintPatch } from "../agent/taint.ts";
import type { NodeView, RepairStatus } from "../agent/types.ts";
import type { Log } from "../installer/deps.ts";
import { type AgentApi, nodePath } from "./agent-api.ts";
import { readRecords } from "./agent-state.ts";
import type { AgentWriter } from "./agent-write.ts";
import { podPath } from "./kube-http.ts";

export const EVENT_REASON = "MeshcniRepair";
const WRITE_TIMEOUT_MS = 5000;

/**
 * Whether any CNI config in the host's folder already has a meshcni entry, whatever its settings
 * (an earlier release's entry differs from this agent's): the node was meshed before this agent.
 */
export function meshcniEntryIn(hostNetDir: string): boolean {
  let names: string[];
  try {
    names = readdirSync(hostNetDir).filter((n) => /\.(conf|conflist|json)$/.test(n));
  } catch {
    return false;
  }
  for (const n of names) {
    try {
      const c = JSON.parse(readFileSync(`${hostNetDir}/${n}`, "utf8")) as { type?: unknown; plugins?: { type?: unknown }[] };
      if (c.type === "meshcni" || (Array.isArray(c.plugins) && c.plugins.some((p) => p?.type === "meshcni"))) return true;
    } catch {
      // not a config
    }
  }
  return false;
}

/**
 * From when the records are complete. Written once: 0 on a node where meshcni was not chained
 * when the first agent started (every ADD since went through a plugin that keeps records); the
 * agent's start on a node that was already chained without that file (an upgrade from a plugin
 * that kept none: the pods that started before are not judged by a missing record).
 */
export function recordsSince(stateDir: string, chainedAtStart: boolean, now: number, log: Log): number {
  const path = `${stateDir}/${RECORDS_SINCE_FILE}`;
  const noted = readNote(path);
  if (noted !== undefined) return noted;
  const since = chainedAtStart ? now : 0;
  writeNote(path, since, log);
  if (chainedAtStart) log.info(`meshcni was chained before this agent kept ${path}: pods that started before ${new Date(now).toISOString()} are not judged by a missing record`);
  return since;
}

function readNote(path: string): number | undefined {
  try {
    const n = Number(readFileSync(path, "utf8").trim());
    return Number.isFinite(n) && n >= 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

function writeNote(path: string, value: number, log: Log): void {
  try {
    mkdirSync(path.slice(0, path.lastIndexOf("/")) || "/", { recursive: true, mode: 0o700 });
    writeFileSync(`${path}.tmp`, `${value}\n`);
    renameSync(`${path}.tmp`, path);
  } catch (e) {
    log.warn(`cannot write ${path}: ${(e as Error).message}`);
  }
}

export interface RepairDeps {
  cfg: RepairConfig;
  view: NodeView;
  api: AgentApi;
  writer: AgentWriter;
  log: Log;
  stateDir: string;
  /**
   * meshcni's entry is in the config the runtime reads first: every sandbox made from then on goes
   * through the plugin (or fails). A stale kubeconfig or binary makes ADDs fail, not skip.
   */
  chained(): boolean;
  /** The chain, the binary and the kubeconfig are current (the startup taint waits for all). */
  ready(): boolean;
  recordsSince: number;
  startupTaint?: string;
  intervalMs: number;
}

export interface RepairLoop {
  status(): RepairStatus;
  bypassing(): number;
  repaired(): number;
  /** The startup taint is off the node (or there is none to take off). */
  untainted(): boolean;
  stop(): void;
}

/** How often a settled repair loop looks again without a change from the watch. */
export const SETTLED_INTERVAL_MS = 30_000;

export function startRepair(d: RepairDeps): RepairLoop {
  const { cfg, log } = d;
  let memory: RepairMemory = newRepairMemory();
  let plan: RepairPlan | undefined;
  let chainSince: number | undefined;
  // Since when the chain has been in place, as an earlier agent saw it: a restart of the agent
  // does not make the pods started meanwhile look as if they came before the chain.
  const chainedNote = `${d.stateDir}/${CHAINED_SINCE_FILE}`;
  let earlier = readNote(chainedNote);
  const said = new Map<string, string>();
  let running = false;
  let again = false;
  let stopped = false;
  let untainted = d.startupTaint === undefined;
  let taintTries = 0;

  /** Says each kind of thing once until it changes: until `same` changes, when given (a countdown's seconds are no change). */
  const say = (kind: "repair" | "taint", level: "info" | "warn", text: string, same = text) => {
    if (said.get(kind) !== same) log[level](text);
    said.set(kind, same);
  };

  async function repairOne(ref: RepairPlan["delete"][number]): Promise<boolean> {
    const what = `pod ${ref.namespace}/${ref.name}${ref.uid ? ` (uid ${ref.uid})` : ""}`;
    const now = new Date().toISOString();
    const message = eventMessage(ref.reason, cfg.node);
    const event = await d.writer.send("POST", `/api/v1/namespaces/${ref.namespace}/events`, {
      apiVersion: "v1",
      kind: "Event",
      metadata: { generateName: `${ref.name}.meshcni-`, namespace: ref.namespace },
      involvedObject: { apiVersion: "v1", kind: "Pod", namespace: ref.namespace, name: ref.name, ...(ref.uid ? { uid: ref.uid } : {}) },
      reason: EVENT_REASON,
      message,
      type: "Warning",
      source: { component: "meshcni-node", host: cfg.node },
      reportingComponent: "meshcni.io/meshcni-node",
      reportingInstance: cfg.node,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    }, "application/json", WRITE_TIMEOUT_MS);
    if (!event.ok) log.warn(`repair: cannot post the Event on ${what}: ${event.reason}`);
    const del = await d.writer.send("DELETE", podPath(ref.namespace, ref.name), {
      apiVersion: "v1",
      kind: "DeleteOptions",
      ...(ref.uid ? { preconditions: { uid: ref.uid } } : {}),
    }, "application/json", WRITE_TIMEOUT_MS);
    if (del.ok) {
      log.info(`repair: deleted ${what}: ${ref.reason}`);
      return true;
    }
    // 404: gone already; 409: recreated under the same name (the precondition held it back).
    log.warn(`repair: could not delete ${what}: ${del.reason}`);
    return false;
  }

  async function untaint(): Promise<void> {
    const key = d.startupTaint!;
    const got = await d.api.get(nodePath(cfg.node), WRITE_TIMEOUT_MS);
    if (got.kind !== "object") {
      say("taint", "warn", `cannot read node ${cfg.node} to remove the startup taint ${key}: ${got.kind === "status" ? `answered ${got.status}` : got.reason}`);
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
      log.info(`removed the startup taint ${key} from node ${cfg.node}: meshcni is chained and the agent knows the node's pods`);
    } else if (++taintTries % 10 === 1) {
      log.warn(`cannot remove the startup taint ${key} from node ${cfg.node} (trying again): ${r.reason}`);
    }
  }

  async function round(): Promise<void> {
    const now = Date.now();
    if (!d.chained()) {
      if (chainSince !== undefined || earlier !== undefined) {
        try {
          unlinkSync(chainedNote);
        } catch {
          // absent
        }
      }
      chainSince = earlier = undefined;
    } else if (chainSince === undefined) {
      chainSince = earlier !== undefined && earlier <= now ? earlier : now;
      earlier = undefined;
      writeNote(chainedNote, chainSince, log);
    }
    if (!untainted && chainSince !== undefined && d.ready() && d.view.synced()) await untaint();
    plan = planRepair(cfg, memory, { pods: d.view.pods(), records: readRecords(d.stateDir).records, synced: d.view.synced(), chainSince, recordsSince: d.recordsSince, now });
    memory = plan.memory;
    if (plan.waitingFor) say("repair", "info", `repair waits: ${plan.waitingFor}`, `waits on ${plan.waitingOn}`);
    else say("repair", "info", `repair is active (--repair ${cfg.mode}): ${plan.bypassing.length} pod(s) of node ${cfg.node} bypass the mesh`);
    if (cfg.mode === "off") {
      for (const b of plan.bypassing) if (memory.firstSeen[b.uid ?? `${b.namespace}/${b.name}`] === now) log.warn(`repair: pod ${b.namespace}/${b.name} bypasses the mesh (--repair off: reported only): ${b.reason}`);
    }
    if (plan.delete.length === 0) return;
    const results = [];
    for (const ref of plan.delete) results.push({ ref, ok: await repairOne(ref) });
    memory = noteDeletions(memory, results, Date.now());
    // What /status shows: a deletion that failed is tried again, within the rate.
    const failed = new Set(results.filter((r) => !r.ok).map((r) => podKey(r.ref)));
    plan = { ...plan, bypassing: plan.bypassing.map((b) => (failed.has(podKey(b)) ? { ...b, action: "waiting" as const } : b)) };
  }

  // One round at a time; a change during a round asks for one more.
  const kick = () => {
    if (stopped) return;
    if (running) {
      again = true;
      return;
    }
    running = true;
    void round().catch((e) => log.error(`repair: ${(e as Error).message}`)).finally(() => {
      running = false;
      if (again) {
        again = false;
        kick();
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
  // would, and plans again when it broke or the grace period is over. Before, each of those
  // ticks judged every pod and read every record (110 pods: about 4 ms of CPU a second).
  let timer: ReturnType<typeof setTimeout> | undefined;
  const settled = () => chainSince !== undefined && untainted && plan !== undefined && !plan.waitingFor && plan.bypassing.length === 0;
  /** ms until the grace period ends, while it is all that is pending; undefined otherwise. */
  const graceLeft = (): number | undefined => {
    if (chainSince === undefined || !untainted || running || plan === undefined || plan.active || plan.bypassing.length > 0 || !d.view.synced()) return undefined;
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
    timer = setTimeout(tick, settled() ? Math.max(d.intervalMs, SETTLED_INTERVAL_MS) : d.intervalMs);
  };
  tick();
  return {
    status: () => repairStatus(cfg, plan, memory),
    bypassing: () => plan?.bypassing.filter((b) => b.action !== "deleted").length ?? 0,
    repaired: () => memory.repaired,
    untainted: () => untainted,
    stop() {
      stopped = true;
      clearTimeout(timer);
      unsubscribe();
    },
  };
}
