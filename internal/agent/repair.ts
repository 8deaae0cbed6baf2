// Repair: which pods of this node run outside the mesh, and what the agent does about them.
// Pure: the node's pods (as the watch cache holds them), the plugin's records, the plugin's own
// decision (internal/plugin/pre-api.ts, then the mesh profile's decide), the clock and the
// agent's memory of earlier rounds go in; the bypassing pods, the deletions to make and the next
// memory come out. The shell (internal/io/agent-repair.ts) deletes, posts Events and logs. A
// pod's parse is kept per cached object (parsed.ts): the same object, the same parse, any round.
//
// A pod bypasses the mesh when the profile redirects it, its sandbox exists, and the plugin never
// ran an ADD for it (no record with its UID, or with its name when the record has no UID): it
// started before meshcni was chained. Or when its mesh's validator init container exited non-zero
// (the validator found no redirect). A false repair deletes a healthy pod, so every doubt keeps
// the pod: see judgePod's "never" list, the grace period, the start-time rules and the rate limit.
import type { PluginConf } from "../config/plugin-config.ts";
import type { Pod } from "../kube/objects.ts";
import type { MeshProfile } from "../mesh/profile.ts";
import { skipBeforeLookup } from "../plugin/pre-api.ts";
import { cachedPod } from "./parsed.ts";
import type { PodRecord } from "./protocol.ts";
import type { BypassingPod, RepairStatus } from "./types.ts";

export type RepairMode = "delete" | "off";
export const REPAIR_MODES: readonly RepairMode[] = ["delete", "off"];

/** The mesh init containers that set up their own rules (the mesh runs without CNI for that pod). */
export const MESH_INIT_CONTAINERS = ["linkerd-init", "istio-init"] as const;
/** The init containers that check the redirect is in place and fail when it is not. */
export const VALIDATOR_CONTAINERS = ["linkerd-network-validator", "istio-validation"] as const;
export const MIRROR_ANNOTATION = "kubernetes.io/config.mirror";

export const DEFAULT_GRACE_SECONDS = 30;
export const DEFAULT_RATE_PER_MINUTE = 10;
/** A pod whose UID was deleted is not deleted again for this long (the cache may lag behind). */
export const DELETED_MEMORY_MS = 10 * 60_000;
/** Pods that started this long after the chain was in place went through it (at most the grace period). */
export const SETTLE_MAX_MS = 5000;
/**
 * A pod is deleted only after it has been seen bypassing this long (at most the grace period):
 * a sandbox made again (DEL removed the record, the next ADD has not written one yet) or a record
 * being written is never mistaken for a pod that never went through the plugin.
 */
export const CONFIRM_MAX_MS = 10_000;

export interface RepairConfig {
  mode: RepairMode;
  /** This node: pods of any other node are never touched. */
  node: string;
  /** The plugin's conflist entry, as the installer writes it (exclude_namespaces, pod_namespace). */
  conf: PluginConf;
  profile: MeshProfile;
  /** The agent's own DaemonSet (in conf.kubernetes.pod_namespace). */
  daemonSetName: string;
  graceMs: number;
  ratePerMinute: number;
}

/** What the agent remembers between rounds. */
export interface RepairMemory {
  /** Pod key (UID, else namespace/name) -> ms when first seen bypassing. */
  firstSeen: Record<string, number>;
  /** ms of the deletions of the last minute (the rate limit). */
  recentDeletions: number[];
  /** Pod key -> ms of its deletion: never deleted twice while the cache lags. */
  deleted: Record<string, number>;
  repaired: number;
}

export const newRepairMemory = (): RepairMemory => ({ firstSeen: {}, recentDeletions: [], deleted: {}, repaired: 0 });

export interface RepairInput {
  /** The node's pods as the cache holds them. */
  pods: readonly unknown[];
  records: readonly PodRecord[];
  /** The cache is listed and watching. */
  synced: boolean;
  /** ms since the chain has been in place without a break as the agent saw it; undefined: not in place. */
  chainSince: number | undefined;
  /**
   * ms from which the records are complete: pods that started earlier are not judged by a missing
   * record (an upgrade from a plugin that kept none). 0: always complete.
   */
  recordsSince: number;
  now: number;
}

export interface PodRef {
  namespace: string;
  name: string;
  uid?: string;
}

export interface RepairPlan {
  active: boolean;
  /** Why the agent does not act yet (when not active). */
  waitingFor?: string;
  /** What it waits for, the same from round to round while the reason is (waitingFor counts seconds down). */
  waitingOn?: WaitingOn;
  bypassing: BypassingPod[];
  /** Pods to delete now (mode delete, active, within the rate limit), with the reason for their Event. */
  delete: (PodRef & { reason: string })[];
  memory: RepairMemory;
}

export type Judgement =
  | { kind: "ignore"; why: string }
  | { kind: "handled"; why: string }
  | { kind: "bypassing"; reason: string };

type Obj = Record<string, unknown>;
const isObj = (x: unknown): x is Obj => typeof x === "object" && x !== null && !Array.isArray(x);
const obj = (x: unknown): Obj => (isObj(x) ? x : {});
const arr = (x: unknown): unknown[] => (Array.isArray(x) ? x : []);
const str = (x: unknown): string | undefined => (typeof x === "string" ? x : undefined);

function time(x: unknown): number | undefined {
  const s = str(x);
  if (s === undefined) return undefined;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : t;
}

export const podKey = (p: PodRef): string => p.uid ?? `${p.namespace}/${p.name}`;

/**
 * Whether the pod's sandbox exists. PodReadyToStartContainers, where kubelet reports it, says so
 * (False while a sandbox is being made again); without it, a container that ran or runs, or
 * phase Running.
 */
function sandboxEvidence(status: Obj): string | undefined {
  const ready = arr(status.conditions).map(obj).find((c) => c.type === "PodReadyToStartContainers");
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

/** A validator init container that exited non-zero (now, or before its restart). */
function failedValidator(status: Obj): string | undefined {
  for (const c of arr(status.initContainerStatuses).map(obj)) {
    const name = str(c.name);
    if (!name || !(VALIDATOR_CONTAINERS as readonly string[]).includes(name)) continue;
    for (const t of [obj(obj(c.state).terminated), obj(obj(c.lastState).terminated)]) {
      const code = t.exitCode;
      if (typeof code === "number" && code !== 0) return `its ${name} init container failed (exit code ${code}): the redirect was not in place`;
    }
  }
  return undefined;
}

function hasRecord(records: readonly PodRecord[], ref: PodRef): boolean {
  return records.some((r) => r.namespace === ref.namespace && r.name === ref.name && (r.uid === undefined || ref.uid === undefined || r.uid === ref.uid));
}

/**
 * One pod: never touched (and why), handled, or bypassing (and why). Order matters only for the
 * reason given; every "never" rule is checked before anything can say bypassing.
 */
export function judgePod(cfg: RepairConfig, raw: unknown, input: Omit<RepairInput, "pods" | "synced" | "now">): Judgement {
  const meta = obj(obj(raw).metadata);
  const spec = obj(obj(raw).spec);
  const status = obj(obj(raw).status);
  const namespace = str(meta.namespace);
  const name = str(meta.name);
  if (!namespace || !name) return { kind: "ignore", why: "not a pod object (no namespace or name)" };
  if (spec.nodeName !== cfg.node) return { kind: "ignore", why: `runs on node ${str(spec.nodeName) ?? "(none)"}, not ${cfg.node}` };
  if (meta.deletionTimestamp !== undefined && meta.deletionTimestamp !== null) return { kind: "ignore", why: "already being deleted" };
  if (obj(meta.annotations)[MIRROR_ANNOTATION] !== undefined) return { kind: "ignore", why: "a mirror (static) pod: kubelet owns it, a delete does nothing" };
  if (spec.hostNetwork === true) return { kind: "ignore", why: "uses the host's network (no CNI ADD)" };
  const k = cfg.conf.kubernetes;
  const own = skipBeforeLookup(k, namespace, name);
  if (own) return { kind: "ignore", why: own };
  if (namespace === k.pod_namespace && arr(meta.ownerReferences).map(obj).some((o) => o.kind === "DaemonSet" && o.name === cfg.daemonSetName)) {
    return { kind: "ignore", why: "one of meshcni's own DaemonSet pods" };
  }
  if (status.phase === "Succeeded" || status.phase === "Failed") return { kind: "ignore", why: `phase ${status.phase}: nothing runs` };
  const init = arr(spec.initContainers).map((c) => str(obj(c).name));
  const meshInit = MESH_INIT_CONTAINERS.find((n) => init.includes(n));
  if (meshInit) return { kind: "ignore", why: `carries ${meshInit}, which sets up its own rules` };
  // Parsed once per cached object (parsed.ts): a round parses only the pods that changed.
  const pod: Pod | undefined = cachedPod(raw);
  if (!pod) return { kind: "ignore", why: "a pod object the plugin could not read" };
  const decision = cfg.profile.decide(pod, cfg.conf);
  if (!decision.redirect) return { kind: "ignore", why: decision.reason };
  const sandbox = sandboxEvidence(status);
  if (!sandbox) return { kind: "ignore", why: "no sandbox yet (the plugin runs when it is made)" };

  const ref: PodRef = { namespace, name, ...(str(meta.uid) ? { uid: str(meta.uid)! } : {}) };
  const validator = failedValidator(status);
  if (validator) return { kind: "bypassing", reason: validator };
  if (hasRecord(input.records, ref)) return { kind: "handled", why: "the plugin's record of its ADD" };
  const started = time(status.startTime);
  if (started === undefined) return { kind: "handled", why: "no start time: cannot tell whether it started before the chain" };
  if (started < input.recordsSince) return { kind: "handled", why: "started before the plugin kept records on this node" };
  if (input.chainSince !== undefined && started >= input.chainSince + settleMs(cfg)) {
    return { kind: "handled", why: "started after meshcni was chained (the plugin ran, or the sandbox would have failed)" };
  }
  return { kind: "bypassing", reason: `started before meshcni was chained (no record of an ADD; ${sandbox})` };
}

const settleMs = (cfg: RepairConfig) => Math.min(cfg.graceMs, SETTLE_MAX_MS);
export const confirmMs = (cfg: RepairConfig) => Math.min(cfg.graceMs, CONFIRM_MAX_MS);

/** Forgets what no longer matters: deletions older than a minute (rate) or DELETED_MEMORY_MS (per pod). */
function pruned(m: RepairMemory, now: number, current: Set<string>): RepairMemory {
  return {
    firstSeen: Object.fromEntries(Object.entries(m.firstSeen).filter(([k]) => current.has(k))),
    recentDeletions: m.recentDeletions.filter((t) => now - t < 60_000),
    deleted: Object.fromEntries(Object.entries(m.deleted).filter(([, t]) => now - t < DELETED_MEMORY_MS)),
    repaired: m.repaired,
  };
}

export type WaitingOn = "cache" | "chain" | "grace";

/** Why the agent does not act yet, or undefined when it may. */
function waitingFor(cfg: RepairConfig, input: RepairInput): { on: WaitingOn; why: string } | undefined {
  if (!input.synced) return { on: "cache", why: "the watch cache is not in sync" };
  if (input.chainSince === undefined) return { on: "chain", why: "meshcni is not chained" };
  const left = input.chainSince + cfg.graceMs - input.now;
  if (left > 0) return { on: "grace", why: `the chain has been in place for less than the grace period (${Math.ceil(left / 1000)} s left)` };
  return undefined;
}

export function planRepair(cfg: RepairConfig, memory: RepairMemory, input: RepairInput): RepairPlan {
  const { now } = input;
  const found: { ref: PodRef; reason: string }[] = [];
  // Judged only once in sync: a half-listed node says nothing about the pods it has not listed.
  if (input.synced) {
    for (const raw of input.pods) {
      const j = judgePod(cfg, raw, input);
      if (j.kind !== "bypassing") continue;
      const meta = obj(obj(raw).metadata);
      found.push({ ref: { namespace: str(meta.namespace)!, name: str(meta.name)!, ...(str(meta.uid) ? { uid: str(meta.uid)! } : {}) }, reason: j.reason });
    }
  }
  const m = pruned(memory, now, new Set(found.map((f) => podKey(f.ref))));
  for (const f of found) m.firstSeen[podKey(f.ref)] ??= now;
  const waiting = waitingFor(cfg, input);
  const active = waiting === undefined;
  const del: RepairPlan["delete"] = [];
  const bypassing: BypassingPod[] = found.map(({ ref, reason }) => {
    const key = podKey(ref);
    let action: BypassingPod["action"];
    if (m.deleted[key] !== undefined) action = "deleted";
    else if (cfg.mode === "off") action = "reported";
    else if (!active || now - m.firstSeen[key]! < confirmMs(cfg) || m.recentDeletions.length + del.length >= cfg.ratePerMinute) action = "waiting";
    else {
      del.push({ ...ref, reason });
      action = "deleted";
    }
    return { namespace: ref.namespace, name: ref.name, ...(ref.uid ? { uid: ref.uid } : {}), reason, action, since: new Date(m.firstSeen[key]!).toISOString() };
  });
  return { active, ...(waiting ? { waitingFor: waiting.why, waitingOn: waiting.on } : {}), bypassing, delete: del, memory: m };
}

/** After the shell tried the plan's deletions: each attempt counts against the rate; successes are repairs. */
export function noteDeletions(m: RepairMemory, results: readonly { ref: PodRef; ok: boolean }[], now: number): RepairMemory {
  const next: RepairMemory = { ...m, recentDeletions: [...m.recentDeletions], deleted: { ...m.deleted } };
  for (const r of results) {
    next.recentDeletions.push(now);
    if (r.ok) {
      next.deleted[podKey(r.ref)] = now;
      next.repaired++;
    }
  }
  return next;
}

export function repairStatus(cfg: Pick<RepairConfig, "mode">, plan: RepairPlan | undefined, memory: RepairMemory): RepairStatus {
  return { mode: cfg.mode, active: plan?.active ?? false, bypassing: plan?.bypassing ?? [], repaired: memory.repaired };
}

/** The Event's message for a repaired pod. */
export function eventMessage(reason: string, node: string): string {
  return `meshcni deleted this pod on node ${node} so that its controller creates it again with the mesh's redirect: ${reason}`;
}
