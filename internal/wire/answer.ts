// What the plugin accepts as the agent's answer to POST /v1/add (protocol.ts's AddAnswer), checked
// field by field with bounds a report can carry. Pure, and light enough for the plugin's hot path
// (internal/plugin/agent/add.ts); the agent's socket handler asks the same before it reports an
// answer itself. Loops, not every/some/map: each callback builtin costs the plugin its
// first-use compile.
import { parseK8sArgs } from "../cni/k8s-args.ts";
import { LOG_LEVELS } from "../log/levels.ts";
import { safeContainerId } from "./state.ts";
import { type AddAnswer, type CheckAnswer, LOOKUP_SOURCES, type Outcome, REPORT_LIMITS as L } from "./protocol.ts";
import { IPTABLES_MODES } from "../firewall/registry.ts";

const isObj = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);
/** The lines' context as plugin/run.ts writes it: the command and the container ID's first 12 characters. */
const isContext = (c: string, command = "ADD") =>
  c === command ||
  (c.length <= command.length + 13 && c.startsWith(`${command} `) && safeContainerId(c.slice(command.length + 1)));

/**
 * The parsed answer `a` as an AddAnswer, or why the plugin cannot use it. The agent asks too,
 * before it reports an answer itself: an answer the plugin refuses, the plugin runs and reports.
 * `cniArgs`: the request's CNI_ARGS, whose pod the answer must be about.
 *
 * The plugin does not decide again what the agent decided (the agent can write the plugin's
 * binary), but it takes a decision only in full: rules come with a meshed success, a success
 * without rules is a skip that names the pod and its UID, a failure carries its code.
 */
export function checkAddAnswer(a: unknown, cniArgs: string | undefined): AddAnswer | string {
  if (!isObj(a) || a.v !== 1) return "the agent's answer is not an AddAnswer (v: 1)";
  if (typeof a.stdout !== "string" || (a.exitCode !== 0 && a.exitCode !== 1) || typeof a.record !== "boolean")
    return "the agent's answer lacks stdout, exitCode or record";
  if (!Array.isArray(a.lines)) return "the agent's answer has no lines";
  if (a.reported !== undefined && (a.reported !== true || a.apply !== undefined))
    return "the agent's answer says it reported an ADD with rules";
  if (a.applied !== undefined && a.apply !== undefined) return "the agent's answer both applied rules and has a plan";
  if (a.lines.length > L.lines) return "the agent's answer has too many lines";
  // Loops, not every/some/map: each callback builtin costs the plugin its first-use compile.
  for (const l of a.lines)
    if (typeof l !== "string" || l.length > L.line) return "the agent's answer has lines that are not text or too long";
  if (
    typeof a.level !== "string" ||
    !(LOG_LEVELS as readonly string[]).includes(a.level) ||
    typeof a.context !== "string" ||
    !isContext(a.context)
  ) {
    return "the agent's answer has no log level or context";
  }
  const summary = parseSummary(a.summary);
  if (!summary) return "the agent's answer has no summary a report can carry";
  if (a.apply !== undefined) {
    if (a.exitCode !== 0 || summary.outcome !== "meshed")
      return "the agent's answer has rules but is not a meshed success";
    const st = isObj(a.apply) ? a.apply.settings : undefined;
    if (
      !isObj(st) ||
      typeof st.mode !== "string" ||
      !(IPTABLES_MODES as readonly string[]).includes(st.mode) ||
      typeof st.wait !== "boolean" ||
      typeof st.simulate !== "boolean"
    ) {
      return "the agent's plan has no firewall settings";
    }
  } else if (a.applied !== undefined) {
    // Rules the agent applied: a meshed success that says with what and how many.
    const ap = a.applied;
    if (a.exitCode !== 0 || summary.outcome !== "meshed") return "the agent's answer applied rules but is not meshed";
    if (!isObj(ap) || !str(ap.backend, L.backend) || ap.backend === "" || !count(ap.rules, L.rules))
      return "the agent's answer applied rules without naming the backend and how many";
    if (summary.rules !== ap.rules) return "the agent's answer applied another number of rules than its summary says";
  } else if (a.exitCode === 0 && summary.outcome !== "skipped") {
    return `the agent's answer is a success without rules whose outcome is ${summary.outcome}, not skipped`;
  }
  if (a.exitCode === 1 && (summary.outcome !== "failed" || summary.code === undefined || summary.code === 0)) {
    return "the agent's answer is a failure without a failed outcome and its error code";
  }
  const pod = summary.pod;
  if (summary.outcome === "skipped" && pod?.uid === undefined) {
    return "the agent's answer skips a pod without naming it and its UID";
  }
  if (pod) {
    const wrong = otherPod(pod, cniArgs);
    if (wrong !== undefined) return wrong;
  }
  return { ...(a as unknown as AddAnswer), summary };
}

/**
 * The parsed answer `a` to POST /v1/check as a CheckAnswer, or why the plugin cannot use it (it
 * then runs CHECK itself). As for ADD, the plugin takes the agent's verdict only in full: a
 * success is "meshed" or "skipped" with nothing to print, a failure carries its code, and the
 * answer is about the pod CNI_ARGS names.
 */
export function checkCheckAnswer(a: unknown, cniArgs: string | undefined): CheckAnswer | string {
  if (!isObj(a) || a.v !== 1) return "the agent's answer is not a CheckAnswer (v: 1)";
  if (typeof a.stdout !== "string" || (a.exitCode !== 0 && a.exitCode !== 1))
    return "the agent's answer lacks stdout or exitCode";
  if (!Array.isArray(a.lines) || a.lines.length > L.lines) return "the agent's answer has no lines or too many";
  for (const l of a.lines)
    if (typeof l !== "string" || l.length > L.line) return "the agent's answer has lines that are not text or too long";
  if (
    typeof a.level !== "string" ||
    !(LOG_LEVELS as readonly string[]).includes(a.level) ||
    typeof a.context !== "string" ||
    !isContext(a.context, "CHECK")
  ) {
    return "the agent's answer has no log level or context";
  }
  if (a.reported !== undefined && a.reported !== true) return "the agent's answer has a reported that is not true";
  if (a.backend !== undefined && (!str(a.backend, L.backend) || a.backend === ""))
    return "the agent's answer names no backend it could have used";
  const summary = parseSummary(a.summary);
  if (!summary) return "the agent's answer has no summary a report can carry";
  if (a.exitCode === 0 && ((summary.outcome !== "meshed" && summary.outcome !== "skipped") || a.stdout !== ""))
    return "the agent's answer is a success that is neither meshed nor skipped, or prints something";
  if (a.exitCode === 1 && (summary.outcome !== "failed" || summary.code === undefined || summary.code === 0))
    return "the agent's answer is a failure without a failed outcome and its error code";
  const pod = summary.pod;
  if (pod) {
    const wrong = otherPod(pod, cniArgs);
    if (wrong !== undefined) return wrong;
  }
  return { ...(a as unknown as CheckAnswer), summary };
}

/** The outcomes an ADD can have. */
const ADD_OUTCOMES: readonly string[] = ["meshed", "skipped", "failed", "ok"] satisfies Outcome[];
const str = (x: unknown, max: number): x is string => typeof x === "string" && x.length <= max;
const count = (x: unknown, max: number): x is number =>
  typeof x === "number" && Number.isInteger(x) && x >= 0 && x <= max;

/** The summary rebuilt from what a report may carry (agent/observe/report.ts checks reports again). */
function parseSummary(s: unknown): AddAnswer["summary"] | undefined {
  if (!isObj(s) || typeof s.outcome !== "string" || !ADD_OUTCOMES.includes(s.outcome) || !str(s.reason, L.reason))
    return undefined;
  const out: AddAnswer["summary"] = { outcome: s.outcome as AddAnswer["summary"]["outcome"], reason: s.reason };
  if (s.code !== undefined) {
    if (!count(s.code, L.code)) return undefined;
    out.code = s.code;
  }
  if (s.rules !== undefined) {
    if (!count(s.rules, L.rules)) return undefined;
    out.rules = s.rules;
  }
  if (s.lookup !== undefined) {
    if (typeof s.lookup !== "string" || !(LOOKUP_SOURCES as readonly string[]).includes(s.lookup)) return undefined;
    out.lookup = s.lookup as NonNullable<AddAnswer["summary"]["lookup"]>;
  }
  if (s.pod !== undefined) {
    const p = s.pod;
    if (!isObj(p) || !str(p.namespace, L.name) || !str(p.name, L.name) || (p.uid !== undefined && !str(p.uid, L.uid)))
      return undefined;
    out.pod = { namespace: p.namespace, name: p.name, ...(p.uid !== undefined ? { uid: p.uid as string } : {}) };
  }
  return out;
}

/** Why an answer naming `pod` is not about the pod CNI_ARGS names; undefined when it is. */
function otherPod(
  pod: { namespace: string; name: string; uid?: string },
  cniArgs: string | undefined,
): string | undefined {
  let k8s;
  try {
    k8s = parseK8sArgs(cniArgs);
  } catch {
    return "the agent's answer names a pod, but CNI_ARGS is not valid";
  }
  const other = pod.namespace !== k8s.podNamespace || pod.name !== k8s.podName;
  if (other || (k8s.podUid !== undefined && pod.uid !== k8s.podUid))
    return "the agent's answer is about another pod than the one CNI_ARGS names";
  return undefined;
}
