// Which of the plugin's records (wire/state.ts's PodRecord: one per sandbox it ADDed, with the
// container ID and the time of the ADD) covers a pod's CURRENT sandbox. A record is the pod's when
// its UID is the pod's (or, when either side has no UID, its namespace and name are); it is the
// current sandbox's when the ADD came at most ADD_BEFORE_READY_MAX_MS before the sandbox became
// ready: kubelet makes the sandbox (the runtime runs the CNI ADD, the plugin writes the record
// before it answers) and then reports PodReadyToStartContainers True, so the ADD of the current
// sandbox comes just before that condition's lastTransitionTime, and the ADD of an earlier sandbox
// of the same pod came before that sandbox was ready, went and was made again. Without the
// condition (older kubelets), the UID alone decides. Pure.
import type { PodRecord } from "../../wire/state.ts";

/**
 * How long before the sandbox's PodReadyToStartContainers transition its ADD may have been: the
 * rest of the runtime's RunPodSandbox, kubelet's next look at the pod (its PLEG relists every
 * second) and the status it then writes, with room for a busy node.
 */
export const ADD_BEFORE_READY_MAX_MS = 30_000;

export interface SandboxRef {
  namespace: string;
  name: string;
  uid?: string;
  /** ms since the epoch of PodReadyToStartContainers' lastTransitionTime (True); undefined: not reported. */
  readyAt?: number;
}

export type RecordMatch =
  /** The plugin ran the ADD of the current sandbox: `record` is its record (the newest, when there are several). */
  | { kind: "current"; record: PodRecord }
  /** Records of this pod, all of sandboxes older than the current one; `record` is the newest. */
  | { kind: "older"; record: PodRecord }
  | { kind: "none" };

const when = (r: PodRecord): number => {
  const t = Date.parse(r.time);
  return Number.isNaN(t) ? Number.NEGATIVE_INFINITY : t;
};

/** Whether a record was written for this pod (any of its sandboxes). */
export function recordOfPod(r: PodRecord, pod: SandboxRef): boolean {
  if (r.namespace !== pod.namespace || r.name !== pod.name) return false;
  return r.uid === undefined || pod.uid === undefined || r.uid === pod.uid;
}

/** The record of the pod's current sandbox, else the newest record of an older one, else none. */
export function matchRecord(pod: SandboxRef, records: readonly PodRecord[]): RecordMatch {
  let newest: PodRecord | undefined;
  for (const r of records) {
    if (!recordOfPod(r, pod)) continue;
    if (!newest || when(r) > when(newest)) newest = r;
  }
  if (!newest) return { kind: "none" };
  // Times in a pod's status are truncated to the second: that only moves the bound earlier.
  const current = pod.readyAt === undefined || when(newest) >= pod.readyAt - ADD_BEFORE_READY_MAX_MS;
  if (current) return { kind: "current", record: newest };
  return { kind: "older", record: newest };
}
