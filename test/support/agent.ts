// A stand-in node agent for the plugin's tests: the agent's real socket server and handler
// (internal/agent/socket/serve.ts, internal/agent/socket/handler.ts) on a socket in a temp folder, with a
// "watch cache" that reads the stand-in API server's objects directly (so it makes no API
// request), and knobs for what the plugin must survive: a slow agent, a 503, a stopped agent.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSocketHandler } from "../../internal/agent/socket/handler.ts";
import { createAddPlanner } from "../../internal/agent/socket/plan-add.ts";
import { type AddAnswer, REPORTS_PATH, type Report } from "../../internal/wire/protocol.ts";
import { DEFAULT_NETNS_DIR } from "../../internal/wire/state.ts";
import type { LookupResult, PodLookup } from "../../internal/agent/types.ts";
import { type AgentSocket, serveAgentSocket } from "../../internal/agent/socket/serve.ts";
import { writeRecordFor } from "../../internal/agent/state/files.ts";
import { readNetnsProblem } from "../../internal/agent/socket/netns.ts";
import type { ApiServer } from "./apiserver.ts";

export interface StandInAgent {
  /** The state folder (0700), which also holds the socket. */
  dir: string;
  socket: string;
  reports: Report[];
  lookups: { namespace: string; name: string; uid?: string }[];
  /** Each lookup first waits this long (a slow agent). */
  delayMs: number;
  /** Answer every lookup with this status (503: cannot answer). */
  fail?: 503;
  /** Answer a cached pod whatever UID the plugin asked for (an agent that does not check). */
  ignoreUid?: boolean;
  /** Decline every POST /v1/add (an agent that does not plan ADDs): the plugin runs them itself. */
  noPlanning?: boolean;
  /** Changes each planned answer before it is sent (a buggy or hostile agent). */
  tamper?: (answer: AddAnswer) => void;
  /** ADDs planned (200) and declined (409, with why). */
  planned: number;
  /** Reports the plugin sent (POST /v1/reports); `reports` also holds those the agent wrote itself. */
  reportsSent: number;
  declined: string[];
  /** Reports answered so far, awaited until `n` arrived (or the timeout). */
  waitReports(n: number, timeoutMs?: number): Promise<Report[]>;
  /** Stops serving (the socket goes), as an agent's SIGTERM does. */
  stop(): void;
  /** Serves again on the same socket (a new agent after a rollout). */
  start(): void;
  close(): void;
}

export function startStandInAgent(api: ApiServer, opts: { dir?: string } = {}): StandInAgent {
  const dir = opts.dir ?? mkdtempSync(join(tmpdir(), "meshcni-agent-"));
  const socket = join(dir, "agent.sock");
  const reports: Report[] = [];
  const lookups: StandInAgent["lookups"] = [];
  const cache: PodLookup = {
    async lookup(namespace, name, uid, signal): Promise<LookupResult> {
      lookups.push(uid === undefined ? { namespace, name } : { namespace, name, uid });
      if (agent.delayMs > 0) await Bun.sleep(agent.delayMs);
      signal.throwIfAborted();
      if (agent.fail)
        return {
          ok: false,
          status: 503,
          error: { code: 11, msg: "the agent cannot answer", details: "stand-in told to fail" },
        };
      const pod = api.objects.get(`/api/v1/namespaces/${namespace}/pods/${name}`) as
        | { metadata?: { uid?: string } }
        | undefined;
      if (
        !pod ||
        (!agent.ignoreUid && uid !== undefined && pod.metadata?.uid !== undefined && pod.metadata.uid !== uid)
      ) {
        return {
          ok: false,
          status: 404,
          error: {
            code: 106,
            msg: "pod not found",
            details: `no pod ${namespace}/${name}${uid ? ` with UID ${uid}` : ""} on this node`,
          },
        };
      }
      return { ok: true, pod, namespace: api.objects.get(`/api/v1/namespaces/${namespace}`) ?? null, source: "cache" };
    },
  };
  const planner = createAddPlanner({
    lookup: cache,
    stateDir: dir,
    onLookup: () => {},
    writeRecord: async (d, record) => writeRecordFor(d, record),
    // The tests' namespaces are made with `ip netns add`, in the host's folder.
    netnsProblem: (path) => readNetnsProblem(DEFAULT_NETNS_DIR, path),
  });
  const handler = createSocketHandler({
    lookup: cache,
    onReport: (r) => reports.push(r),
    onLookup: () => {},
    onBadRequest: () => {},
    async planAdd(req, signal) {
      if (agent.noPlanning) return { ok: false, why: "stand-in told not to plan" };
      const r = await planner(req, signal);
      if (r.ok) agent.planned++;
      if (r.ok && agent.tamper) agent.tamper(r.answer);
      return r;
    },
    onDeclined: (why) => agent.declined.push(why),
  });
  let served: AgentSocket | undefined;
  const agent: StandInAgent = {
    dir,
    socket,
    reports,
    lookups,
    delayMs: 0,
    planned: 0,
    reportsSent: 0,
    declined: [],
    async waitReports(n, timeoutMs = 3000) {
      const until = Date.now() + timeoutMs;
      while (reports.length < n && Date.now() < until) await Bun.sleep(10);
      return reports;
    },
    start() {
      served ??= serveAgentSocket(
        socket,
        (req) => {
          if (new URL(req.url).pathname === REPORTS_PATH) agent.reportsSent++;
          return handler(req);
        },
        () => {},
      );
    },
    stop() {
      served?.stop();
      served = undefined;
    },
    close() {
      agent.stop();
      if (!opts.dir) rmSync(dir, { recursive: true, force: true });
    },
  };
  agent.start();
  return agent;
}
