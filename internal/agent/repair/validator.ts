// The mesh's validator init container as evidence that a pod's traffic bypasses the proxy. In CNI
// mode each mesh's injector adds one that checks the redirect is in place and fails with its own
// exit code when it is not: Linkerd's linkerd-network-validator exits 95, Istio's
// istio-validation exits 126. Only the validator's latest run counts, read the way kubelet reports
// it: `state.terminated` when present (an exit 0 there is a success, whatever `lastState` holds),
// `lastState.terminated` while the container waits to run again (CrashLoopBackOff), and nothing
// while it runs (the run in progress decides). A failure that ended before the pod's current
// sandbox was ready (PodReadyToStartContainers' lastTransitionTime) was in an earlier sandbox and
// says nothing about this one. Pure; shared by repair (plan.ts) and `meshcnictl check --pods`.

/** Validator init container -> the exit code with which it reports a missing redirect. */
export const VALIDATOR_EXIT_CODES: Readonly<Record<string, number>> = {
  "linkerd-network-validator": 95,
  "istio-validation": 126,
};
export const VALIDATOR_CONTAINERS = Object.keys(VALIDATOR_EXIT_CODES);

export interface ValidatorFailure {
  container: string;
  exitCode: number;
  /** kubelet's reason and the container's termination message (first line), when given. */
  detail?: string;
  /** RFC 3339 time the failed run finished, when given. */
  finishedAt?: string;
}

type Obj = Record<string, unknown>;
const isObj = (x: unknown): x is Obj => typeof x === "object" && x !== null && !Array.isArray(x);
const obj = (x: unknown): Obj => (isObj(x) ? x : {});
const str = (x: unknown): string | undefined => (typeof x === "string" ? x : undefined);

function time(x: unknown): number | undefined {
  const s = str(x);
  if (s === undefined) return undefined;
  const t = Date.parse(s);
  return Number.isNaN(t) ? undefined : t;
}

/**
 * The run that says how the validator did last: the terminated state when it is there, the last
 * termination while it waits, undefined while it runs or before it ever ran.
 */
export function latestRun(containerStatus: unknown): Obj | undefined {
  const c = obj(containerStatus);
  const state = obj(c.state);
  if (isObj(state.terminated)) return state.terminated;
  if (isObj(state.running)) return undefined;
  if (isObj(state.waiting)) {
    const last = obj(c.lastState).terminated;
    return isObj(last) ? last : undefined;
  }
  return undefined;
}

/**
 * When the pod's current sandbox became ready: PodReadyToStartContainers' lastTransitionTime while
 * that condition is True; undefined when kubelet does not report it (or it is not True).
 */
export function sandboxReadyAt(status: unknown): number | undefined {
  const conditions = obj(status).conditions;
  const list = Array.isArray(conditions) ? conditions : [];
  const ready = list.map(obj).find((c) => c.type === "PodReadyToStartContainers");
  return ready?.status === "True" ? time(ready.lastTransitionTime) : undefined;
}

/**
 * The pod's validator whose latest run, in the current sandbox, failed with the code that means
 * "no redirect"; undefined for anything else (a success, another exit code, a run in progress, a
 * failure of an earlier sandbox, no validator).
 */
export function validatorFailure(status: unknown): ValidatorFailure | undefined {
  const st = obj(status);
  const statuses = Array.isArray(st.initContainerStatuses) ? st.initContainerStatuses.map(obj) : [];
  const since = sandboxReadyAt(st);
  for (const c of statuses) {
    const name = str(c.name);
    const want = name === undefined ? undefined : VALIDATOR_EXIT_CODES[name];
    if (name === undefined || want === undefined) continue;
    const run = latestRun(c);
    if (!run || run.exitCode !== want) continue;
    const finished = time(run.finishedAt);
    // Times in a pod's status are whole seconds: a run that finished in the same second as the
    // transition still counts.
    if (since !== undefined && finished !== undefined && finished < since) continue;
    const reason = str(run.reason);
    const message = str(run.message)?.trim().split("\n")[0];
    const detail = [reason, message].filter((s) => s).join(": ");
    const finishedAt = str(run.finishedAt);
    return { container: name, exitCode: want, ...(detail ? { detail } : {}), ...(finishedAt ? { finishedAt } : {}) };
  }
  return undefined;
}

/** One line for logs, Events and /status. */
export function describeValidatorFailure(f: ValidatorFailure): string {
  const code = `exit code ${f.exitCode}${f.detail ? `, ${f.detail}` : ""}`;
  return `its ${f.container} init container's latest run failed (${code}): the redirect was not in place`;
}
