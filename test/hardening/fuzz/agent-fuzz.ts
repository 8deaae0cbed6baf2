// The agent-planned ADD, fuzzed: a fuzz case (generate.ts) sent as the plugin sends a warm ADD,
// over a real Unix socket (internal/agent/socket/serve.ts) to the node agent's socket handler
// (internal/agent/socket/handler.ts) and planner (internal/agent/socket/plan-add.ts), with a lookup that holds
// the case's pod and namespace as the watch cache would, a real state folder, and the plugin's
// own side of the wire (internal/plugin/agent/add.ts) taking the answer. Judged by the same oracle
// as the plugin alone, and compared with the plugin alone's run of the same case.
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSocketHandler } from "../../../internal/agent/socket/handler.ts";
import { createAddPlanner, type PlannerDeps } from "../../../internal/agent/socket/plan-add.ts";
import type { AddAnswer, Report } from "../../../internal/wire/protocol.ts";
import { RECORDS_SUBDIR } from "../../../internal/wire/state.ts";
import { MAX_REPORT_BYTES } from "../../../internal/agent/observe/report.ts";
import { keyOf, trimNamespace, trimPod, uidOf } from "../../../internal/agent/cache/store.ts";
import type { LookupResult, PodLookup } from "../../../internal/agent/types.ts";
import { backendOfMode } from "../../../internal/firewall/registry.ts";
import { addThroughAgent } from "../../../internal/plugin/agent/add.ts";
import type { PlannedAdd } from "../../../internal/plugin/agent/planned.ts";
import { type AgentSocket, serveAgentSocket } from "../../../internal/agent/socket/serve.ts";
import { lookupTarget } from "../../../internal/plugin/io/early-lookup.ts";
import { writeRecordFor } from "../../../internal/agent/state/files.ts";
import { checkPlan } from "../../../internal/plan/check.ts";
import { VERSION } from "../../../internal/version.ts";
import { withFirstKeys } from "../../support/dry-run.ts";
import { type FuzzCase, KUBECONFIG } from "./generate.ts";
import { CASE_BOUND_MS, type Outcome } from "./oracle.ts";

/**
 * The watch cache as the planner reads it, holding one case's objects: a pod whose metadata names
 * it is served from the cache, trimmed as the cache trims it (agent/cache/store.ts); anything else at the
 * pod's path is what the agent's own request would have answered (source "api"); no object, or
 * another UID than the runtime's, is a 404 (code 106).
 */
export class CaseLookup implements PodLookup {
  objects: Record<string, unknown> = {};
  lookups = 0;

  async lookup(namespace: string, name: string, uid: string | undefined): Promise<LookupResult> {
    this.lookups++;
    const key = `${namespace}/${name}`;
    const body = this.objects[`/api/v1/namespaces/${namespace}/pods/${name}`];
    const gone = (details: string): LookupResult => ({
      ok: false,
      status: 404,
      error: { code: 106, msg: "not found in the API (404)", details },
    });
    if (body === undefined) return gone(`pod ${key} does not exist`);
    const cached = keyOf(body) === key;
    const pod = cached ? trimPod(body) : body;
    if (uid !== undefined && uidOf(pod) !== uid)
      return gone(`pod ${key} has UID ${uidOf(pod) ?? "(none)"}, not ${uid}`);
    const ns = this.objects[`/api/v1/namespaces/${namespace}`];
    const namespaceObject = ns !== undefined && keyOf(ns) === namespace ? trimNamespace(ns) : ns;
    return { ok: true, pod, namespace: namespaceObject, source: cached ? "cache" : "api" };
  }
}

/** Why the agent may decline an ADD (409): what only the plugin can do, and the agent's bounds. */
export const DECLINES: readonly RegExp[] = [
  /is not a Pod/, // the plugin reads it itself, and answers its error
  /does not hold namespace/,
  /needs service/,
  /network namespace|CNI_NETNS|netns/, // the pod's addresses; a namespace the agent does not see
  /the pod's addresses/,
  /state_dir/,
  /records/, // the agent holds its bound of records
];

/** Answers the plugin refuses, as the README documents: lines or a summary past a report's bounds. */
export const REFUSALS: readonly RegExp[] = [
  /lines that are not text or too long/,
  /too many lines/,
  /no summary a report can carry/,
];

export interface AgentRun {
  /** The status of the agent's answer to POST /v1/add, and its body. */
  status: number;
  body: string;
  /** What the plugin's side made of it. */
  planned?: PlannedAdd;
  /** The outcome as the oracle judges it; undefined when the agent declined. */
  outcome?: Outcome;
  /** `simulate` with a log level that does not show what it would apply. */
  payloadUnseen?: boolean;
  /** Problems found on the way (the wire, the records, the plugin's side). */
  problems: string[];
  log: string;
  ms: number;
}

export interface AgentFuzz {
  readonly stateDir: string;
  readonly socket: string;
  readonly lookup: CaseLookup;
  /** Reports the agent printed itself (an answer without rules). */
  readonly reports: Report[];
  /** The case's stdin as the plugin sends it to this agent (its state_dir and socket first). */
  stdinOf(c: FuzzCase): string;
  /**
   * Runs an ADD case through the agent; undefined for what the plugin does not send it (other
   * commands, pods it passes before any lookup).
   */
  run(c: FuzzCase): Promise<AgentRun | undefined>;
  close(): void;
}

/** What `simulate` logs after "would apply:", as the lines carry it: the payload a dry run writes. */
export function simulatedPayload(lines: readonly string[]): string | undefined {
  for (const entry of lines) {
    const at = entry.indexOf("; would apply:\n");
    if (at < 0) continue;
    return entry
      .slice(at + "; would apply:\n".length)
      .split("\n")
      .map((l) => l.replace(/^meshcni: [a-z]+ [^:]*: /, ""))
      .join("\n");
  }
  return undefined;
}

/** The folder under which a case's CNI_NETNS is placed: never there, so the plugin never applies. */
const ABSENT = "/nonexistent-meshcni-fuzz";

export function startAgentFuzz(
  kubeconfig: string,
  opts: {
    /** Changes the agent's answer on its way to the plugin (to show that the judging catches it). */
    tamper?: (body: string) => string;
  } = {},
): AgentFuzz {
  const dir = mkdtempSync(join(tmpdir(), "meshcni-agent-fuzz-"));
  const stateDir = join(dir, "state");
  const socket = join(stateDir, "agent.sock");
  const lookup = new CaseLookup();
  const reports: Report[] = [];
  const errors: string[] = [];
  const wire: { last?: { status: number; body: string } } = {};
  /** The agent's last answer (a function: TypeScript narrows the field to undefined after a reset). */
  const lastAnswer = () => wire.last;
  // Built as a plain object, so that members a newer planner asks for (and this one does not
  // know) type-check either way: the harness decides what the agent's node looks like.
  const deps = {
    lookup,
    stateDir,
    onLookup: () => {},
    writeRecord: async (d: string, r: Parameters<PlannerDeps["writeRecord"]>[1]) => writeRecordFor(d, r),
    onRecordError: (_r: unknown, e: Error) => void errors.push(`a skipped pod's record was not written: ${e.message}`),
    // Every case's namespace is one the agent sees: the plugin's own check of it is not what is fuzzed here.
    netnsProblem: () => undefined,
  };
  const planner = createAddPlanner(deps);
  const handler = createSocketHandler({
    lookup,
    planAdd: planner,
    onLookup: () => {},
    onBadRequest: () => {},
    onReport: (r) => void reports.push(r),
    timeoutMs: CASE_BOUND_MS,
  });
  const server: AgentSocket = serveAgentSocket(
    socket,
    async (req) => {
      const res = await handler(req);
      const body = await res.clone().text();
      if (opts.tamper && res.status === 200 && new URL(req.url).pathname === "/v1/add") {
        const changed = opts.tamper(body);
        wire.last = { status: 200, body: changed };
        return new Response(changed, { status: 200, headers: { "Content-Type": "application/json" } });
      }
      wire.last = { status: res.status, body };
      return res;
    },
    (e) => void errors.push(`the socket server failed: ${e.stack ?? e.message}`),
  );

  const stdinOf = (c: FuzzCase) =>
    withFirstKeys(
      c.stdin.replaceAll(KUBECONFIG, kubeconfig),
      `"state_dir":${JSON.stringify(stateDir)},"agent_socket":${JSON.stringify(socket)}`,
    );
  const recordsDir = join(stateDir, RECORDS_SUBDIR);
  const listRecords = () => {
    try {
      return readdirSync(recordsDir);
    } catch {
      return [];
    }
  };

  return {
    stateDir,
    socket,
    lookup,
    reports,
    stdinOf,
    async run(c) {
      // What cmd/plugin.ts sends the agent: an ADD of a pod the pre-API decisions do not pass.
      if (c.env.CNI_COMMAND !== "ADD" || !lookupTarget(stdinOf(c), c.env)) return undefined;
      lookup.objects = c.objects;
      delete wire.last;
      errors.length = 0;
      const env = { ...c.env };
      if (env.CNI_NETNS?.startsWith("/")) env.CNI_NETNS = `${ABSENT}${env.CNI_NETNS}`;
      if (env.CNI_NETNS !== undefined && existsSync(env.CNI_NETNS))
        throw new Error(`${env.CNI_NETNS} exists: not running the plugin's side on it`);
      const lines: string[] = [];
      const stdin = new TextDecoder().decode(new TextEncoder().encode(stdinOf(c)));
      const t0 = performance.now();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const hang = new Promise<"hang">((resolve) => (timer = setTimeout(() => resolve("hang"), CASE_BOUND_MS)));
      let planned: PlannedAdd | "hang";
      try {
        planned = await Promise.race([
          addThroughAgent({
            socket,
            stateDir,
            stdin,
            env,
            version: VERSION,
            timeoutMs: CASE_BOUND_MS - 1000,
            deadline: AbortSignal.timeout(CASE_BOUND_MS),
            sink: (l) => void lines.push(l),
            t0,
          }),
          hang,
        ]);
      } catch (e) {
        return {
          status: lastAnswer()?.status ?? 0,
          body: lastAnswer()?.body ?? "",
          problems: [`the plugin's side crashed: ${(e as Error).stack}`],
          log: lines.join(""),
          ms: performance.now() - t0,
        };
      } finally {
        clearTimeout(timer);
      }
      const ms = performance.now() - t0;
      // A skipped pod's record is written just after the answer.
      await new Promise((r) => setImmediate(r));
      const log = lines.join("");
      const problems = [...errors];
      const seen = { ...(lastAnswer() ?? { status: 0, body: "" }) };
      const out: AgentRun = { status: seen.status, body: seen.body, problems, log, ms };
      const records = listRecords();
      rmSync(recordsDir, { recursive: true, force: true });
      const stray = readdirSync(stateDir).filter((n) => n !== RECORDS_SUBDIR && n !== "agent.sock");
      if (stray.length > 0) problems.push(`files in the state folder besides the records: ${stray.join(", ")}`);
      if (planned === "hang") {
        problems.push(`no answer within ${CASE_BOUND_MS} ms (a hang)`);
        return out;
      }
      out.planned = planned;
      if (planned.kind === "unavailable") {
        problems.push(`the plugin found no agent: ${planned.why}`);
        return out;
      }
      if (seen.status === 409) {
        const why = JSON.parse(seen.body).details as string;
        if (!DECLINES.some((r) => r.test(why)))
          problems.push(`declined for a reason that is not one of the agent's: ${why}`);
        if (records.length > 0) problems.push(`a declined ADD left records: ${records.join(", ")}`);
        return out;
      }
      // Bun's server refuses a body past its bound itself, before the handler sees it.
      if (seen.status === 0 && planned.kind === "declined" && /answered 413/.test(planned.why))
        seen.status = out.status = 413;
      if (seen.status === 413) {
        // A request the agent does not read (stdin past its bound): the plugin runs it itself.
        if (Buffer.byteLength(stdin) < MAX_REPORT_BYTES - 4096)
          problems.push(`413 for a request of ${Buffer.byteLength(stdin)} bytes of stdin`);
        if (planned.kind !== "declined") problems.push(`the plugin took a 413 as an answer: ${planned.kind}`);
        if (records.length > 0) problems.push(`a refused ADD left records: ${records.join(", ")}`);
        return out;
      }
      if (seen.status !== 200) {
        problems.push(`the agent answered ${seen.status}: ${seen.body.slice(0, 500)}`);
        return out;
      }
      if (planned.kind === "declined") {
        // An answer past what a report can carry: declined like a 409, as documented.
        if (REFUSALS.some((r) => r.test(planned.why))) return out;
        problems.push(
          `the plugin does not take the agent's answer: ${planned.why}; answer: ${seen.body.slice(0, 800)}`,
        );
        return out;
      }
      const a = JSON.parse(seen.body) as AddAnswer;
      if (!a.apply) {
        // `simulate`: no rules, the payload in the log, where a dry run writes it to its file.
        // Not logged below the entry's log level: then what it would apply is not seen.
        const simulated = a.summary.reason.startsWith("simulate: ") ? simulatedPayload(a.lines) : "";
        if (simulated === undefined) out.payloadUnseen = true;
        const payload = planned.exitCode === 0 && simulated !== undefined ? { payload: simulated } : {};
        out.outcome = { exitCode: planned.exitCode, stdout: planned.stdout, ms, ...payload };
        const want = a.record ? [`${c.env.CNI_CONTAINERID}.json`] : [];
        if (records.join() !== want.join())
          problems.push(
            `records ${JSON.stringify(records)} after an answer without rules (record: ${a.record}), ` +
              `expected ${JSON.stringify(want)}`,
          );
        if (a.record && planned.exitCode !== 0) problems.push("a failed ADD was recorded");
        return out;
      }
      // Rules: what the plugin applies is the checked plan, rendered by the settings' backend,
      // which is what a dry run writes. The namespace is not there, so the plugin's apply
      // failed and took the agent's record back.
      let payload: string;
      try {
        payload = (await backendOfMode(a.apply.settings.mode)).render(checkPlan(a.apply.plan));
      } catch (e) {
        problems.push(`the plugin took a plan that does not check: ${(e as Error).message}`);
        return out;
      }
      out.outcome = { exitCode: 0, stdout: a.stdout, ms, payload };
      let code: unknown;
      try {
        code = JSON.parse(planned.stdout).code;
      } catch {
        code = undefined;
      }
      if (planned.exitCode !== 1 || code !== 4)
        problems.push(
          `applying in a namespace that is not there: exit ${planned.exitCode}, ${planned.stdout.slice(0, 300)}`,
        );
      if (records.length > 0)
        problems.push(`the agent's record stayed after the plugin's apply failed: ${records.join(", ")}`);
      return out;
    },
    close() {
      server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
