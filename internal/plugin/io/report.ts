// After the result is on stdout: the command's report to the node agent, bounded at
// REPORT_TIMEOUT_MS, or, when the agent does not take it, its lines appended to the fallback log
// in the state folder (the agent prints and empties it when it starts). Never fails the command.
// Also DEL, which needs nothing else loaded: it removes the container's record, if there is one,
// runs no process and loads none of the plugin's rule code (the rules stay with the namespace).
import { COMMANDS, type Command, REPORTS_PATH } from "../../wire/protocol.ts";
import { agentPaths } from "../agent/paths.ts";

export { agentPaths };
import { recordPath } from "../../wire/state.ts";
import { isSupportedVersion } from "../../cni/spec.ts";
import { type FollowUp, sendReport } from "../agent/client.ts";
import { readRecord } from "./state.ts";
import { safeContainerId } from "../../wire/state.ts";
import { escapeText } from "../../text/escape.ts";
import { VERSION } from "../../version.ts";
import {
  buildReport,
  completeSummary,
  fallbackText,
  NO_REMOVAL,
  podOfArgs,
  type Summary,
  skippedReason,
} from "../../wire/summary.ts";

export async function report(o: {
  env: Record<string, string | undefined>;
  stdin: string;
  summary: Summary;
  lines: string[];
  started: Date;
  t0: number;
  /** The agent's connection of this command, kept open for the report (a planned ADD). */
  via?: FollowUp | undefined;
}): Promise<void> {
  const command = o.env.CNI_COMMAND;
  if (!command || !(COMMANDS as readonly string[]).includes(command) || o.env.MESHCNI_DRY_RUN_FILE) return;
  const { socket, stateDir } = agentPaths(o.stdin);
  const summary = completeSummary(o.summary, command, o.env.CNI_ARGS);
  const r = buildReport({
    command: command as Command,
    containerId: o.env.CNI_CONTAINERID,
    summary,
    lines: o.lines,
    started: o.started,
    durationMs: performance.now() - o.t0,
    version: VERSION,
  });
  if (o.via?.("POST", REPORTS_PATH, JSON.stringify(r))) return;
  if (await sendReport(socket, r)) return;
  try {
    const { appendFallbackLog } = await import("./state.ts");
    await appendFallbackLog(stateDir, fallbackText(r));
  } catch (e) {
    // Nowhere to write (a link planted at the log's name among the reasons): the lines went to
    // stderr already; this says why they are in no log the agent prints.
    const why = escapeText((e as Error).message);
    await Bun.write(
      Bun.stderr,
      `meshcni: warn ${command}: could not append to the fallback log in ${stateDir}: ${why}\n`,
    );
  }
}

/**
 * DEL, decided before the rest of the plugin loads: the container's record goes (records.ts's
 * delByRecord does the same on the full path), no rule is removed and no process runs; the
 * answer is success. Undefined when the full path must decide (input that is not a plain, valid
 * DEL, or a dry run: the full path then answers its error or does nothing).
 */
export async function answerDel(stdin: string, env: Record<string, string | undefined>): Promise<Summary | undefined> {
  if (env.CNI_COMMAND !== "DEL" || env.MESHCNI_DRY_RUN_FILE || !env.CNI_IFNAME) return undefined;
  const id = env.CNI_CONTAINERID;
  const { stateDir, conf } = agentPaths(stdin);
  if (
    !conf ||
    !safeContainerId(id) ||
    !isSupportedVersion(conf.cniVersion ?? "0.1.0") ||
    typeof conf.name !== "string" ||
    conf.name === ""
  )
    return undefined;
  for (const k of ["agent_socket", "state_dir"]) {
    if (conf[k] !== undefined && (typeof conf[k] !== "string" || !(conf[k] as string).startsWith("/")))
      return undefined;
  }
  const pod = podOfArgs(env.CNI_ARGS);
  // A record is never empty; a missing file's size is 0 (a synchronous stat).
  if (Bun.file(recordPath(stateDir, id)).size > 0) return recordedDel(stateDir, id, pod);
  const s: Summary = { outcome: "untouched", reason: "no record of this container: meshcni applied no rules to it" };
  if (pod) s.pod = pod;
  return s;
}

/**
 * A DEL answered from its record (answerDel) and reported: its exit code (success, with an empty
 * stdout), or undefined when the full path must decide. `t0`: performance.now() at its start.
 */
export async function runDel(o: { stdin: string; started: Date; t0: number }): Promise<0 | undefined> {
  const deleted = await answerDel(o.stdin, Bun.env);
  if (!deleted) return undefined;
  await report({ env: Bun.env, stdin: o.stdin, summary: deleted, lines: [], started: o.started, t0: o.t0 });
  return 0;
}

/**
 * DEL of a container with a record: the record goes, and nothing else runs. One that does not
 * read as this container's record is the full path's, which removes it without following a link.
 */
async function recordedDel(stateDir: string, id: string, pod: Summary["pod"]): Promise<Summary | undefined> {
  const r = await readRecord(stateDir, id);
  if (r === "unreadable") return undefined;
  if (r === undefined) {
    // Gone since the stat (a DEL at the same time).
    return { outcome: "untouched", reason: "no record of this container", ...(pod ? { pod } : {}) };
  }
  // unlink(2) by path, without loading the C library (state.ts's removeRecord): it removes
  // a link at the name itself, and only what just read as this container's record.
  await Bun.file(recordPath(stateDir, id))
    .delete()
    .catch(() => {});
  const named = { namespace: r.namespace, name: r.name, ...(r.uid ? { uid: r.uid } : {}) };
  if (r.decision === "skipped") return { outcome: "untouched", reason: skippedReason(r), pod: named };
  return { outcome: "ok", reason: NO_REMOVAL, pod: named, ...(r.backend ? { backend: r.backend } : {}) };
}
