// After the result is on stdout: the command's report to the node agent, bounded at
// REPORT_TIMEOUT_MS, or, when the agent does not take it, its lines appended to the fallback log
// in the state folder (the agent prints and empties it when it starts). Never fails the command.
// Also the DEL that needs nothing loaded: a container without a record, or whose record says its
// pod got no rules, runs no process and loads none of the plugin's rule code.
import { type Command, DEFAULT_AGENT_SOCKET, DEFAULT_STATE_DIR, recordPath, REPORTS_PATH } from "../agent/protocol.ts";
import { parseK8sArgs } from "../cni/k8s-args.ts";
import { isSupportedVersion } from "../cni/spec.ts";
import { type FollowUp, sendReport } from "../io/agent-client.ts";
import { safeContainerId } from "../io/plugin-state.ts";
import { VERSION } from "../version.ts";
import { peekConf } from "./peek.ts";
import { buildReport, fallbackText, type Summary } from "./summary.ts";

const COMMANDS: readonly string[] = ["ADD", "DEL", "CHECK", "STATUS", "GC"] satisfies Command[];

/** Where the agent and the state folder are, read from stdin without the schema (the schema checks them when it runs). */
export function agentPaths(stdin: string): { socket: string; stateDir: string; conf?: Record<string, unknown> } {
  const conf = peekConf(stdin);
  const path = (x: unknown, d: string) => (typeof x === "string" && x.startsWith("/") && !x.includes("\0") ? x : d);
  const out: { socket: string; stateDir: string; conf?: Record<string, unknown> } = {
    socket: path(conf?.agent_socket, DEFAULT_AGENT_SOCKET), stateDir: path(conf?.state_dir, DEFAULT_STATE_DIR),
  };
  if (conf) out.conf = conf;
  return out;
}

function podOf(env: Record<string, string | undefined>): Summary["pod"] {
  try {
    const k = parseK8sArgs(env.CNI_ARGS);
    if (k.podName && k.podNamespace) return { namespace: k.podNamespace, name: k.podName, ...(k.podUid ? { uid: k.podUid } : {}) };
  } catch {
    // no pod
  }
  return undefined;
}

export async function report(o: {
  env: Record<string, string | undefined>; stdin: string; summary: Summary; lines: string[]; started: Date; t0: number;
  /** The agent's connection of this command, kept open for the report (a planned ADD). */
  via?: FollowUp | undefined;
}): Promise<void> {
  const command = o.env.CNI_COMMAND;
  if (!command || !COMMANDS.includes(command) || o.env.MESHCNI_DRY_RUN_FILE) return;
  const { socket, stateDir } = agentPaths(o.stdin);
  const summary = o.summary;
  if (!summary.reason) summary.reason = `${command} succeeded`;
  if (!summary.pod) {
    const pod = podOf(o.env);
    if (pod) summary.pod = pod;
  }
  const r = buildReport({
    command: command as Command, containerId: o.env.CNI_CONTAINERID, summary, lines: o.lines, started: o.started,
    durationMs: performance.now() - o.t0, version: VERSION,
  });
  if (o.via?.("POST", REPORTS_PATH, JSON.stringify(r))) return;
  if (await sendReport(socket, r)) return;
  try {
    const { appendFallbackLog } = await import("../io/plugin-state.ts");
    await appendFallbackLog(stateDir, fallbackText(r));
  } catch {
    // Nowhere to write: the lines went to stderr already.
  }
}

/**
 * DEL of a container with no record, or with one saying its pod got no rules, decided before
 * the rest of the plugin loads: it answers success and runs no process. Undefined when the full
 * path must decide (a meshed or unreadable record, or input that is not a plain, valid DEL: the
 * full path then answers its error).
 */
export async function untouchedDel(stdin: string, env: Record<string, string | undefined>): Promise<Summary | undefined> {
  if (env.CNI_COMMAND !== "DEL" || env.MESHCNI_DRY_RUN_FILE || !env.CNI_IFNAME) return undefined;
  const id = env.CNI_CONTAINERID;
  const { stateDir, conf } = agentPaths(stdin);
  if (!conf || !safeContainerId(id) || !isSupportedVersion(conf.cniVersion ?? "0.1.0") || typeof conf.name !== "string" || conf.name === "") return undefined;
  for (const k of ["agent_socket", "state_dir"]) {
    if (conf[k] !== undefined && (typeof conf[k] !== "string" || !(conf[k] as string).startsWith("/"))) return undefined;
  }
  // A record is never empty; a missing file's size is 0 (a synchronous stat).
  const file = Bun.file(recordPath(stateDir, id));
  if (file.size > 0) return skippedDel(file, id);
  const s: Summary = { outcome: "untouched", reason: "no record of this container: meshcni applied no rules to it" };
  const pod = podOf(env);
  if (pod) s.pod = pod;
  return s;
}

/**
 * DEL of a container whose record says its pod got no rules: the record goes and nothing else
 * runs, as records.ts's delByRecord does. Any other record (meshed, unreadable) is the full path's.
 */
async function skippedDel(file: ReturnType<typeof Bun.file>, id: string): Promise<Summary | undefined> {
  let r: Record<string, unknown>;
  try {
    r = JSON.parse(await file.text());
  } catch {
    return undefined;
  }
  const str = (x: unknown) => typeof x === "string";
  if (r?.v !== 1 || r.containerId !== id || r.decision !== "skipped" || !str(r.namespace) || !str(r.name) || !str(r.reason)) return undefined;
  try {
    await file.delete();
  } catch {
    return undefined; // the full path says why
  }
  const pod: NonNullable<Summary["pod"]> = { namespace: r.namespace as string, name: r.name as string };
  if (str(r.uid)) pod.uid = r.uid as string;
  return { outcome: "untouched", reason: `the pod got no rules at ADD (${r.reason as string})`, pod };
}
