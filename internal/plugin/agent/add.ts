// A warm ADD: the node agent plans it (POST /v1/add, internal/agent/socket/plan-add.ts) and, when
// it can enter pods' namespaces, applies the rules itself; otherwise the plugin applies the plan.
// The agent, a warm process with the pod in its watch cache, checks the environment and config,
// decides and builds the rules with the plugin's own code (run.ts), and writes the container's
// record; the plugin loads no config schema, mesh profile or API client, and, unless it has a plan
// to apply, no backend and starts no process.
//
// The plugin takes the agent's decision (the agent can write the plugin's binary, so deciding
// again would guard nothing) but neither its result nor a decision it does not state in full:
// what the plugin prints is its own conversion of the request's prevResult, or the agent's error
// rendered by the plugin in the request's version; a skip must name the pod and its UID, and the
// plugin logs it on a line of its own; a plan is checked against the model (plan/check.ts) before
// any backend renders it, and the binaries are the host's, found by the plugin (apply.ts,
// imported only when there are rules). When the agent is not there, does not answer in time, or
// declines (409), the caller runs the whole ADD itself, exactly as without an agent.
import { checkAddAnswer } from "../../wire/answer.ts";
import { ADD_ENV_KEYS, ADD_PATH, type AddAnswer, type AddRequest, REPORT_LIMITS } from "../../wire/protocol.ts";
import { CniError, renderError } from "../../cni/errors.ts";
import { renderAddResultOf } from "../../cni/result.ts";
import type { CodeValue } from "../../cni/spec.ts";
import { createLogger, logContext, parseLevel, renderLine } from "../log.ts";
import { peekConf } from "../peek.ts";
import { escapeText } from "../../text/escape.ts";
import type { Summary } from "../../wire/summary.ts";
import { agentRequest } from "./client.ts";
import { agentLines, declinedOf, type PlannedAdd } from "./planned.ts";

/** The answer in `body`, or why the plugin cannot use it (internal/wire/answer.ts). */
function parseAnswer(body: string, cniArgs: string | undefined): AddAnswer | string {
  let a: unknown;
  try {
    a = JSON.parse(body);
  } catch {
    return "the agent's answer is not JSON";
  }
  return checkAddAnswer(a, cniArgs);
}

/**
 * The request as the agent reads it: the CNI variables and stdin, and when the command started
 * (`t0`: its performance.now() then).
 */
export function renderAddRequest(
  stdin: string,
  env: Record<string, string | undefined>,
  version: string,
  t0: number,
): string {
  const e: AddRequest["env"] = {};
  for (const k of ADD_ENV_KEYS) if (env[k] !== undefined) e[k] = env[k];
  const startedMs = Math.round((performance.timeOrigin + t0) * 1000) / 1000;
  return JSON.stringify({ v: 1, version, env: e, stdin, startedMs } satisfies AddRequest);
}

export async function addThroughAgent(o: {
  socket: string;
  stateDir: string;
  stdin: string;
  env: Record<string, string | undefined>;
  version: string;
  timeoutMs: number;
  /** The plugin's whole bound (timeout_seconds from its start): the agent's part counts against it. */
  deadline: AbortSignal;
  /** Where the plugin's log lines go (stderr, and the report). */
  sink(line: string): void;
  /** When the command started (performance.now()): the agent's report of an answer without rules counts from it. */
  t0: number;
}): Promise<PlannedAdd> {
  const signal = o.deadline;
  let res;
  try {
    res = await agentRequest(
      o.socket,
      "POST",
      ADD_PATH,
      renderAddRequest(o.stdin, o.env, o.version, o.t0),
      o.timeoutMs,
      { keepOpen: true },
    );
  } catch (e) {
    return { kind: "unavailable", why: `the agent at ${o.socket} did not answer: ${(e as Error).message}` };
  }
  if (res.status === 409) {
    res.close?.();
    return declinedOf(res.body);
  }
  // An answer the plugin cannot use is the agent's bug or another version's: said, then the plugin plans.
  const unusable = (why: string): PlannedAdd => {
    res.close?.();
    createLogger("info", o.sink, logContext("ADD", o.env.CNI_CONTAINERID)).warn(
      `${why}; the plugin runs this ADD itself`,
    );
    return { kind: "declined", why };
  };
  if (res.status !== 200) return unusable(`the agent answered ${res.status} to ${ADD_PATH}`);
  const a = parseAnswer(res.body, o.env.CNI_ARGS);
  if (typeof a === "string") return unusable(a);
  const dropRecord = async () => {
    if (!a.record || !o.env.CNI_CONTAINERID) return;
    const { removeRecord } = await import("../io/state.ts");
    await removeRecord(o.stateDir, o.env.CNI_CONTAINERID);
  };
  // What the plugin prints is its own: the request's prevResult converted, or the agent's error
  // in the request's version. The agent decides, but cannot change the result.
  const conf = peekConf(o.stdin);
  let stdout: string;
  if (a.exitCode === 0) {
    try {
      stdout = renderAddResultOf(conf ?? {});
    } catch (e) {
      await dropRecord();
      const err = e as CniError;
      return unusable(
        `the agent answered success, but the plugin cannot render this ADD's result (${err.msg}: ${err.details})`,
      );
    }
  } else {
    stdout = renderAgentError(a, conf?.cniVersion);
  }
  const via = res.followUp ? { followUp: res.followUp } : {};
  // The agent applied the rules (a.applied) or there are none: the plugin only prints and reports.
  if (!a.apply) {
    for (const l of agentLines(a.lines)) o.sink(l);
    if (a.summary.outcome === "skipped") {
      // The decision on a line of the plugin's own, at the entry's log level, whatever lines the agent sent.
      const level = parseLevel(typeof conf?.log_level === "string" ? conf.log_level : undefined);
      const line = renderLine(level, "info", logContext("ADD", o.env.CNI_CONTAINERID), skipLine(a.summary));
      if (line) o.sink(line);
    }
    const summary = { ...a.summary } as Summary;
    if (a.applied) summary.backend = a.applied.backend;
    // Reported by the agent as it answered: the connection has nothing more to carry.
    if (a.reported) {
      res.close?.();
      return { kind: "done", stdout, exitCode: a.exitCode, summary, reported: true };
    }
    return { kind: "done", stdout, exitCode: a.exitCode, summary, ...via };
  }
  // Rules to apply: the check and the backend load only now (an ADD without rules never parses them).
  const { applyPlanned } = await import("./apply.ts");
  return applyPlanned({
    answer: a,
    apply: a.apply,
    env: o.env,
    sink: o.sink,
    signal,
    via,
    unusable,
    dropRecord,
    stdout,
    cniVersion: conf?.cniVersion,
  });
}

/** The plugin's line for a pod the agent skipped: the pod, its UID and the agent's reason. */
export function skipLine(s: AddAnswer["summary"]): string {
  const pod = s.pod ? `${s.pod.namespace}/${s.pod.name}` : "?";
  // The reason as run.ts writes it starts with the pod again ("pod NS/NAME: ...").
  const reason = s.reason.startsWith(`pod ${pod}: `) ? s.reason.slice(pod.length + 6) : s.reason;
  // Escaped whole, so a reason the agent sends stays on this one line.
  return escapeText(`the agent decided: no rules for pod ${pod} uid=${s.pod?.uid ?? "?"}: ${reason}`);
}

/**
 * The agent's failure as the plugin prints it: the answer's code (checkAddAnswer makes sure a
 * failure has one) with the message and details of the error the agent wrote, in the request's
 * version. Whatever the text, exit status 1 fails the ADD: a failure can only fail closed.
 */
export function renderAgentError(a: Pick<AddAnswer, "summary" | "stdout">, requestVersion: unknown): string {
  let msg = a.summary.reason;
  let details = "";
  try {
    const e = JSON.parse(a.stdout) as { msg?: unknown; details?: unknown } | null;
    if (typeof e?.msg === "string" && e.msg !== "") {
      msg = e.msg;
      if (typeof e.details === "string") details = e.details;
    }
  } catch {
    // the summary's reason
  }
  const cap = REPORT_LIMITS.reason;
  const err = new CniError(a.summary.code as CodeValue, msg.slice(0, cap), details.slice(0, cap));
  return renderError(err, requestVersion);
}
