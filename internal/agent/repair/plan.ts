// Repair: which pods of this node run outside the mesh, and what the agent does about them.
// Pure: the node's pods (as the watch cache holds them), the plugin's records, the plugin's own
// decision (internal/plugin/pre-api.ts, then the mesh profile's decide), the clock and the
// agent's memory of earlier rounds go in; the bypassing and unverified pods, the acts to make and
// the next memory come out. The shell (internal/agent/repair/loop.ts) evicts or deletes, posts
// Events and logs. A pod's parse is kept per cached object (../cache/parsed.ts).
//
// The agent acts only on positive evidence that a pod bypasses the mesh: its mesh's validator
// init container's latest run failed with the code that means "no redirect" (validator.ts).
// Nothing is acted on for what is absent: a meshed pod with no record of an ADD for its current
// sandbox (record-match.ts) is reported as unverified, never removed for that (the records may
// have been lost: a reinstall, a wiped state folder, a plugin from before records). A false
// repair removes a healthy pod, so every doubt keeps the pod: see judgePod's "never" list, the
// confirmation delay, the grace period and the rate limit.
import type { PluginConf } from "../../config/plugin-config.ts";
import type { Pod } from "../../kube/objects.ts";
import type { MeshProfile } from "../../mesh/profile.ts";
import { skipBeforeLookup } from "../../plugin/pre-api.ts";
import { cachedPod } from "../cache/parsed.ts";
import type { PodRecord } from "../../wire/state.ts";
import { matchRecord } from "./record-match.ts";
import type { BypassingPod, RepairStatus, UnverifiedPod } from "../types.ts";
import { describeValidatorFailure, sandboxReadyAt, validatorFailure } from "./validator.ts";

export { VALIDATOR_CONTAINERS } from "./validator.ts";

export type RepairMode = "evict" | "delete" | "off" | "in-place";
export const REPAIR_MODES: readonly RepairMode[] = ["evict", "delete", "off", "in-place"];

/** The mesh init containers that set up their own rules (the mesh runs without CNI for that pod). */
export const MESH_INIT_CONTAINERS = ["linkerd-init", "istio-init"] as const;
export const MIRROR_ANNOTATION = "kubernetes.io/config.mirror";

export const DEFAULT_GRACE_SECONDS = 30;
export const DEFAULT_RATE_PER_MINUTE = 10;
/** A pod whose UID was evicted or deleted is not acted on again for this long (the cache may lag behind). */
export const ACTED_MEMORY_MS = 10 * 60_000;
/**
 * A pod is acted on only after its evidence has been seen this long (at most the grace period):
 * a status in flux (a validator restarting) is not acted on at its first sight.
 */
export const CONFIRM_MAX_MS = 10_000;
/**
 * An eviction a PodDisruptionBudget refused (429) is tried again after this (--repair-retry-seconds),
 * doubled at each refusal in a row up to the cap.
 */
export const DEFAULT_RETRY_SECONDS = 60;
export const REFUSED_BACKOFF_MAX_MS = 10 * 60_000;

export interface RepairConfig {
  mode: RepairMode;
  /** This node: pods of any other node are never touched. */
  node: string;
  /** The plugin's conflist entry, as the agent writes it (exclude_namespaces, pod_namespace). */
  conf: PluginConf;
  profile: MeshProfile;
  /** The agent's own DaemonSet (in conf.kubernetes.pod_namespace). */
  daemonSetName: string;
  graceMs: number;
  ratePerMinute: number;
  /** How long after a refused eviction the next try comes (doubled at each refusal in a row, up to the cap). */
  retryMs: number;
}

/** A refused eviction: when it may be tried again, and what the API server said. */
export interface Refusal {
  until: number;
  message: string;
  /** Refusals in a row for this pod (the backoff doubles with each). */
  count: number;
}

/** What the agent remembers between rounds. */
export interface RepairMemory {
  /** Pod key (UID) -> ms when its evidence was first seen. */
  firstSeen: Record<string, number>;
  /** ms of the attempts of the last minute (the rate limit). */
  recentActs: number[];
  /** Pod key -> ms of its eviction or deletion: never acted on twice while the cache lags. */
  acted: Record<string, number>;
  /** Pod key -> the refusal of its last eviction (429), while it is bypassing. */
  refused: Record<string, Refusal>;
  /** Pods evicted or deleted since the agent started. */
  repaired: number;
  /** Evictions refused (429) since the agent started. */
  refusals: number;
}

export const newRepairMemory = (): RepairMemory => ({
  firstSeen: {},
  recentActs: [],
  acted: {},
  refused: {},
  repaired: 0,
  refusals: 0,
});

export interface RepairInput {
  /** The node's pods as the cache holds them. */
  pods: readonly unknown[];
  records: readonly PodRecord[];
  /** The cache is listed and watching. */
  synced: boolean;
  /** ms since the chain has been in place without a break as this agent saw it; undefined: not in place. */
  chainSince: number | undefined;
  now: number;
  /**
   * Pod UID -> why: verification's positive evidence (../verify/) that the pod's rules are missing
   * or altered in its namespace, as its latest check found them (not with --repair in-place, which
   * writes them back instead).
   */
  missingRules?: ReadonlyMap<string, string>;
}

export interface PodRef {
  namespace: string;
  name: string;
  uid: string;
}

export interface RepairPlan {
  active: boolean;
  /** Why the agent does not act yet (when not active). */
  waitingFor?: string;
  /** What it waits for, the same from round to round while the reason is (waitingFor counts seconds down). */
  waitingOn?: WaitingOn;
  bypassing: BypassingPod[];
  unverified: UnverifiedPod[];
  /** Pods to evict or delete now (mode evict or delete, active, within the rate), with the reason for their Event. */
  act: (PodRef & { reason: string })[];
  memory: RepairMemory;
}

export type Judgement =
  | { kind: "ignore"; why: string }
  /** `record`: the plugin's record of the ADD of its current sandbox. */
  | { kind: "handled"; why: string; record: PodRecord }
  /** Meshed, with a sandbox, and no record of the ADD of its current sandbox: reported, never acted on. */
  | { kind: "unverified"; why: string }
  /** Positive evidence that its traffic bypasses the proxy. */
  | { kind: "bypassing"; reason: string };

type Obj = Record<string, unknown>;
const isObj = (x: unknown): x is Obj => typeof x === "object" && x !== null && !Array.isArray(x);
const obj = (x: unknown): Obj => (isObj(x) ? x : {});
const arr = (x: unknown): unknown[] => (Array.isArray(x) ? x : []);
const str = (x: unknown): string | undefined => (typeof x === "string" ? x : undefined);

export const podKey = (p: { uid?: string; namespace: string; name: string }): string =>
  p.uid ?? `${p.namespace}/${p.name}`;

/**
 * Whether the pod's sandbox exists. PodReadyToStartContainers, where kubelet reports it, says so
 * (False while a sandbox is being made again); without it, a container that ran or runs, or
 * phase Running.
 */
function sandboxEvidence(status: Obj): string | undefined {
  const ready = arr(status.conditions)
    .map(obj)
    .find((c) => c.type === "PodReadyToStartContainers");
  if (ready) return ready.status === "True" ? "PodReadyToStartContainers is True" : undefined;
  const statuses = [...arr(status.initContainerStatuses), ...arr(status.containerStatuses)].map(obj);
  for (const c of statuses) {
    const state = obj(c.state);
    if (isObj(state.running) || isObj(state.terminated) || isObj(obj(c.lastState).terminated) || str(c.containerID)) {
      return `container ${str(c.name) ?? "?"} has run`;
    }
  }
  if (status.phase === "Running") return "phase Running";
  return undefined;
}

/**
 * One pod: never touched (and why), handled, unverified (and why), or bypassing (and why). Order
 * matters only for the reason given; every "never" rule is checked before anything else.
 */
export function judgePod(cfg: RepairConfig, raw: unknown, records: readonly PodRecord[]): Judgement {
  const meta = obj(obj(raw).metadata);
  const spec = obj(obj(raw).spec);
  const status = obj(obj(raw).status);
  const namespace = str(meta.namespace);
  const name = str(meta.name);
  const uid = str(meta.uid);
  if (!namespace || !name) return { kind: "ignore", why: "not a pod object (no namespace or name)" };
  if (spec.nodeName !== cfg.node)
    return { kind: "ignore", why: `runs on node ${str(spec.nodeName) ?? "(none)"}, not ${cfg.node}` };
  if (meta.deletionTimestamp !== undefined && meta.deletionTimestamp !== null)
    return { kind: "ignore", why: "already being deleted" };
  if (obj(meta.annotations)[MIRROR_ANNOTATION] !== undefined) {
    return { kind: "ignore", why: "a mirror (static) pod: kubelet owns it, an eviction or a delete does nothing" };
  }
  if (spec.hostNetwork === true) return { kind: "ignore", why: "uses the host's network (no CNI ADD)" };
  const k = cfg.conf.kubernetes;
  const own = skipBeforeLookup(k, namespace, name);
  if (own) return { kind: "ignore", why: own };
  if (
    namespace === k.pod_namespace &&
    arr(meta.ownerReferences)
      .map(obj)
      .some((o) => o.kind === "DaemonSet" && o.name === cfg.daemonSetName)
  ) {
    return { kind: "ignore", why: "one of meshcni's own DaemonSet pods" };
  }
  if (status.phase === "Succeeded" || status.phase === "Failed")
    return { kind: "ignore", why: `phase ${status.phase}: nothing runs` };
  const init = arr(spec.initContainers).map((c) => str(obj(c).name));
  const meshInit = MESH_INIT_CONTAINERS.find((n) => init.includes(n));
  if (meshInit) return { kind: "ignore", why: `carries ${meshInit}, which sets up its own rules` };
  if (!uid) return { kind: "ignore", why: "no UID (an eviction or a delete could not be held to this pod)" };
  // Parsed once per cached object (../cache/parsed.ts): a round parses only the pods that changed.
  const pod: Pod | undefined = cachedPod(raw);
  if (!pod) return { kind: "ignore", why: "a pod object the plugin could not read" };
  const decision = cfg.profile.decide(pod, cfg.conf);
  if (!decision.redirect) return { kind: "ignore", why: decision.reason };
  const sandbox = sandboxEvidence(status);
  if (!sandbox) return { kind: "ignore", why: "no sandbox yet (the plugin runs when it is made)" };

  const failed = validatorFailure(status);
  if (failed) return { kind: "bypassing", reason: describeValidatorFailure(failed) };
  const readyAt = sandboxReadyAt(status);
  const match = matchRecord({ namespace, name, uid, ...(readyAt !== undefined ? { readyAt } : {}) }, records);
  if (match.kind === "current") {
    const r = match.record;
    const container = r.containerId.slice(0, 12);
    const why = `the plugin's record of the ADD of its sandbox (container ${container}, ${r.decision})`;
    return { kind: "handled", why, record: r };
  }
  if (match.kind === "older") {
    const r = match.record;
    const record = `container ${r.containerId.slice(0, 12)}, ADD at ${r.time}`;
    const ready = new Date(readyAt!).toISOString();
    const why =
      `the plugin's newest record of it (${record}) is of an earlier sandbox: ` +
      `the current one became ready at ${ready}`;
    return { kind: "unverified", why };
  }
  return { kind: "unverified", why: `no record of an ADD for its sandbox on this node (${sandbox})` };
}

export const confirmMs = (cfg: RepairConfig) => Math.min(cfg.graceMs, CONFIRM_MAX_MS);

/** Forgets what no longer matters: attempts older than a minute (rate), acts older than ACTED_MEMORY_MS (per pod). */
function pruned(m: RepairMemory, now: number, current: Set<string>): RepairMemory {
  return {
    firstSeen: Object.fromEntries(Object.entries(m.firstSeen).filter(([k]) => current.has(k))),
    recentActs: m.recentActs.filter((t) => now - t < 60_000),
    acted: Object.fromEntries(Object.entries(m.acted).filter(([, t]) => now - t < ACTED_MEMORY_MS)),
    refused: Object.fromEntries(Object.entries(m.refused).filter(([k]) => current.has(k))),
    repaired: m.repaired,
    refusals: m.refusals,
  };
}

export type WaitingOn = "cache" | "chain" | "grace";

/**
 * Why the agent does not act yet, or undefined when it may. It acts only while meshcni is chained
 * (a pod made again before that would come back without the redirect) and once the chain has been
 * in place for the grace period.
 */
function waitingFor(cfg: RepairConfig, input: RepairInput): { on: WaitingOn; why: string } | undefined {
  if (!input.synced) return { on: "cache", why: "the watch cache is not in sync" };
  if (input.chainSince === undefined) return { on: "chain", why: "meshcni is not chained" };
  const left = input.chainSince + cfg.graceMs - input.now;
  if (left > 0) {
    const why = `the chain has been in place for less than the grace period (${Math.ceil(left / 1000)} s left)`;
    return { on: "grace", why };
  }
  return undefined;
}

const atRate = (m: RepairMemory, planned: number, cfg: RepairConfig) =>
  m.recentActs.length + planned >= cfg.ratePerMinute;
const done = (mode: RepairMode): BypassingPod["action"] =>
  mode === "delete" ? "deleted" : mode === "in-place" ? "rewritten" : "evicted";

export function planRepair(cfg: RepairConfig, memory: RepairMemory, input: RepairInput): RepairPlan {
  const { now } = input;
  const found: { ref: PodRef; reason: string }[] = [];
  const unverified: UnverifiedPod[] = [];
  // Judged only once in sync: a half-listed node says nothing about the pods it has not listed.
  if (input.synced) {
    // Each pod is matched against its own records only (matchRecord looks at namespace and name first).
    const byPod = new Map<string, PodRecord[]>();
    for (const r of input.records) {
      const k = `${r.namespace}/${r.name}`;
      const list = byPod.get(k);
      if (list) list.push(r);
      else byPod.set(k, [r]);
    }
    for (const raw of input.pods) {
      const meta = obj(obj(raw).metadata);
      const j = judgePod(cfg, raw, byPod.get(`${str(meta.namespace)}/${str(meta.name)}`) ?? []);
      if (j.kind === "ignore") continue;
      const ref: PodRef = { namespace: str(meta.namespace)!, name: str(meta.name)!, uid: str(meta.uid)! };
      const missing = input.missingRules?.get(ref.uid);
      if (j.kind === "bypassing") found.push({ ref, reason: j.reason });
      else if (missing !== undefined)
        found.push({ ref, reason: `its rules are missing or altered in its network namespace: ${missing}` });
      else if (j.kind === "unverified") unverified.push({ ...ref, why: j.why });
    }
  }
  const m = pruned(memory, now, new Set(found.map((f) => podKey(f.ref))));
  for (const f of found) m.firstSeen[podKey(f.ref)] ??= now;
  const waiting = waitingFor(cfg, input);
  const active = waiting === undefined;
  const act: RepairPlan["act"] = [];
  const bypassing: BypassingPod[] = found.map(({ ref, reason }) => {
    const key = podKey(ref);
    const refusal = m.refused[key];
    let action: BypassingPod["action"];
    if (m.acted[key] !== undefined) action = done(cfg.mode);
    else if (cfg.mode === "off") action = "reported";
    else if (refusal && now < refusal.until) action = "refused";
    else if (!active || now - m.firstSeen[key]! < confirmMs(cfg) || atRate(m, act.length, cfg)) {
      action = "waiting";
    } else {
      act.push({ ...ref, reason });
      action = done(cfg.mode);
    }
    return {
      ...ref,
      reason,
      action,
      since: new Date(m.firstSeen[key]!).toISOString(),
      ...(refusal ? { refusal: { message: refusal.message, retryAt: new Date(refusal.until).toISOString() } } : {}),
    };
  });
  const wait = waiting ? { waitingFor: waiting.why, waitingOn: waiting.on } : {};
  return { active, ...wait, bypassing, unverified, act, memory: m };
}

/**
 * What became of one act: done (`as`: what was done, when the mode allows more than one: in-place
 * rewrites, else evicts), refused (429: a PodDisruptionBudget; the server's message), or failed otherwise.
 */
export type ActResult = { ref: PodRef } & (
  | { outcome: "done"; as?: "rewritten" | "evicted" }
  | { outcome: "refused"; message: string }
  | { outcome: "failed" }
);

/** After the shell's acts: each try counts against the rate, successes are repairs, a refusal backs off. */
export function noteActs(
  cfg: Pick<RepairConfig, "retryMs">,
  m: RepairMemory,
  results: readonly ActResult[],
  now: number,
): RepairMemory {
  const next: RepairMemory = { ...m, recentActs: [...m.recentActs], acted: { ...m.acted }, refused: { ...m.refused } };
  for (const r of results) {
    next.recentActs.push(now);
    const key = podKey(r.ref);
    if (r.outcome === "done") {
      next.acted[key] = now;
      delete next.refused[key];
      next.repaired++;
    } else if (r.outcome === "refused") {
      const count = (next.refused[key]?.count ?? 0) + 1;
      const wait = Math.min(cfg.retryMs * 2 ** (count - 1), Math.max(cfg.retryMs, REFUSED_BACKOFF_MAX_MS));
      next.refused[key] = { until: now + wait, message: r.message, count };
      next.refusals++;
    }
  }
  return next;
}

/** What /status shows of the plan after the acts: a refused pod says so, a failed one waits for its next try. */
export function afterActs(plan: RepairPlan, m: RepairMemory, results: readonly ActResult[]): RepairPlan {
  const byKey = new Map(results.map((r) => [podKey(r.ref), r]));
  const bypassing = plan.bypassing.map((b): BypassingPod => {
    const r = byKey.get(podKey(b));
    if (!r) return b;
    if (r.outcome === "done") return r.as ? { ...b, action: r.as } : b;
    const refusal = m.refused[podKey(b)];
    if (r.outcome === "refused" && refusal) {
      const retryAt = new Date(refusal.until).toISOString();
      return { ...b, action: "refused", refusal: { message: refusal.message, retryAt } };
    }
    return { ...b, action: "waiting" };
  });
  return { ...plan, bypassing, memory: m };
}

export function repairStatus(
  cfg: Pick<RepairConfig, "mode">,
  plan: RepairPlan | undefined,
  memory: RepairMemory,
): RepairStatus {
  return {
    mode: cfg.mode,
    active: plan?.active ?? false,
    ...(plan?.waitingFor ? { waitingFor: plan.waitingFor } : {}),
    bypassing: plan?.bypassing ?? [],
    unverified: plan?.unverified ?? [],
    repaired: memory.repaired,
    refusals: memory.refusals,
  };
}

/** The Event's message, posted on the pod just before it is evicted or deleted (in-place evicts where it cannot reach). */
export function eventMessage(mode: "evict" | "delete", reason: string, node: string): string {
  const act = mode === "evict" ? "evicts" : "deletes";
  const why = `so that its controller creates it again with the mesh's redirect: ${reason}`;
  return `meshcni ${act} this pod on node ${node} ${why}`;
}
