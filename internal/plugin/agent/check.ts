// CHECK through an agent that applies rules (POST /v1/check, internal/agent/socket/check.ts): the
// agent decides as for ADD and looks at the pod's rules in its namespace with its own userland;
// the plugin prints nothing on success or the agent's error in the request's version, writes the
// agent's lines, and starts no process. Declined (409), not there or not answering in time, or an
// answer the plugin's check refuses: the plugin runs CHECK itself, as without an agent.
import { checkCheckAnswer } from "../../wire/answer.ts";
import { CHECK_PATH } from "../../wire/protocol.ts";
import { createLogger, logContext } from "../log.ts";
import { peekConf } from "../peek.ts";
import type { Summary } from "../../wire/summary.ts";
import { renderAddRequest, renderAgentError } from "./add.ts";
import { agentRequest } from "./client.ts";
import { agentLines, declinedOf, type PlannedAdd } from "./planned.ts";

export async function checkThroughAgent(o: {
  socket: string;
  stdin: string;
  env: Record<string, string | undefined>;
  version: string;
  timeoutMs: number;
  sink(line: string): void;
  t0: number;
}): Promise<PlannedAdd> {
  let res;
  try {
    const body = renderAddRequest(o.stdin, o.env, o.version, o.t0);
    res = await agentRequest(o.socket, "POST", CHECK_PATH, body, o.timeoutMs, { keepOpen: true });
  } catch (e) {
    return { kind: "unavailable", why: `the agent at ${o.socket} did not answer: ${(e as Error).message}` };
  }
  if (res.status === 409) {
    res.close?.();
    return declinedOf(res.body);
  }
  const unusable = (why: string): PlannedAdd => {
    res.close?.();
    createLogger("info", o.sink, logContext("CHECK", o.env.CNI_CONTAINERID)).warn(
      `${why}; the plugin runs this CHECK itself`,
    );
    return { kind: "declined", why };
  };
  if (res.status !== 200) return unusable(`the agent answered ${res.status} to ${CHECK_PATH}`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(res.body);
  } catch {
    return unusable("the agent's answer is not JSON");
  }
  const a = checkCheckAnswer(parsed, o.env.CNI_ARGS);
  if (typeof a === "string") return unusable(a);
  for (const l of agentLines(a.lines)) o.sink(l);
  const stdout = a.exitCode === 0 ? "" : renderAgentError(a, peekConf(o.stdin)?.cniVersion);
  const summary = { ...a.summary } as Summary;
  if (a.backend) summary.backend = a.backend;
  if (a.reported) {
    res.close?.();
    return { kind: "done", stdout, exitCode: a.exitCode, summary, reported: true };
  }
  return { kind: "done", stdout, exitCode: a.exitCode, summary, ...(res.followUp ? { followUp: res.followUp } : {}) };
}
