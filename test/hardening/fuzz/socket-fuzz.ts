// The node agent's socket under hostile requests (socket-gen.ts): each sent as raw bytes over a
// real Unix socket to the compiled agent (dist/meshcni-installer, against the stand-in API server
// with a pod of this node and one of another), and, where fetch's Request can express it, to the
// socket handler directly (with the agent's real watch cache and planner). Invariants: an answer
// within a bound, with a status its endpoint documents (200 and 204 only for valid requests, 404
// only for a pod lookup and with code 106, 405 for a method, 409 for an ADD, 413 past the bound),
// never a 5xx or a crash, no pod of another node answered or planned, no record for a request
// that is not a valid ADD of a network namespace that is there, the agent's memory bounded.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSocketHandler } from "../../../internal/agent/socket/handler.ts";
import { createAddPlanner } from "../../../internal/agent/socket/plan-add.ts";
import { RECORDS_SUBDIR } from "../../../internal/wire/state.ts";
import { writeRecordFor } from "../../../internal/agent/state/files.ts";
import { serviceAccountClient } from "../../../internal/kube/client.ts";
import { WatchCache } from "../../../internal/agent/cache/watch-cache.ts";
import {
  type Cluster,
  ensureBuilt,
  type HostDirs,
  type InstallerProcess,
  startCluster,
  startInstaller,
  until,
} from "../../agent/harness.ts";
import { repoPath } from "../../support/golden.ts";
import { Netns, uniq } from "../../support/netns.ts";
import {
  buildSocketCase,
  ELSEWHERE,
  ELSEWHERE_UID,
  HERE,
  HERE_UID,
  NODE,
  NS,
  OTHER_NODE,
  type SocketCase,
} from "./socket-gen.ts";

/** The longest an answer may take (a planned ADD is bounded at 1.5 s by the agent). */
export const ANSWER_BOUND_MS = 5000;
/**
 * How much the agent's resident memory may grow over a run: at its end (what stays: a leak), and
 * at its peak (bodies up to the 1 MB bound parsed at once: 500,000 nested arrays, 200,000 numbers).
 */
export const RSS_GROWTH_BOUND = 64 << 20;
export const RSS_PEAK_BOUND = 160 << 20;

export interface Answer {
  status?: number;
  head: string;
  body: string;
  /** The agent closed the connection without a status line. */
  closed: boolean;
  timedOut: boolean;
  ms: number;
}

export interface SocketFailure {
  seed: number;
  index: number;
  where: "socket" | "handler";
  tags: string[];
  problems: string[];
}

export interface SocketReport {
  seed: number;
  requests: number;
  handlerRequests: number;
  /** Outcome ("socket 400", "handler 409", "socket closed") -> count. */
  outcomes: Map<string, number>;
  failures: SocketFailure[];
  rss: { start: number; end: number; max: number };
  ms: number;
}

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");

function pod(name: string, uid: string, node: string): Record<string, unknown> {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, uid, annotations: { "linkerd.io/inject": "enabled" } },
    spec: {
      nodeName: node,
      containers: [
        { name: "app", image: "app:1" },
        { name: "linkerd-proxy", image: "proxy:1" },
      ],
    },
    status: { phase: "Pending" },
  };
}

/** Sends `bytes` on a new connection and reads the answer; `halfClose` shuts the writing side after. */
export function sendRaw(
  socket: string,
  bytes: Uint8Array,
  halfClose: boolean,
  boundMs = ANSWER_BOUND_MS,
): Promise<Answer> {
  const t0 = performance.now();
  const { promise, resolve } = Promise.withResolvers<Answer>();
  let buf = new Uint8Array(0);
  let done = false;
  let sock: { end(): void; shutdown?(half?: boolean): void; write(b: Uint8Array): number } | undefined;
  let pending = bytes;
  const finish = (closed: boolean, timedOut = false) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    try {
      sock?.end();
    } catch {
      // gone
    }
    const text = new TextDecoder().decode(buf);
    const at = text.indexOf("\r\n\r\n");
    const head = at < 0 ? text : text.slice(0, at);
    const m = /^HTTP\/1\.[01] (\d{3})/.exec(head);
    resolve({
      ...(m ? { status: Number(m[1]) } : {}),
      head,
      body: at < 0 ? "" : text.slice(at + 4),
      closed: closed && !m,
      timedOut,
      ms: performance.now() - t0,
    });
  };
  const complete = () => {
    const text = new TextDecoder().decode(buf);
    const at = text.indexOf("\r\n\r\n");
    if (at < 0) return false;
    const len = /\r\ncontent-length: *(\d+)/i.exec(text.slice(0, at));
    if (len) return buf.length - (Buffer.byteLength(text.slice(0, at)) + 4) >= Number(len[1]);
    return /\r\ntransfer-encoding: *chunked/i.test(text.slice(0, at)) ? text.endsWith("0\r\n\r\n") : false;
  };
  const timer = setTimeout(() => finish(false, true), boundMs);
  const flush = (s: NonNullable<typeof sock>) => {
    while (pending.length > 0) {
      const n = s.write(pending);
      if (n <= 0) return;
      pending = pending.subarray(n);
    }
    if (halfClose) s.shutdown?.(true);
  };
  Bun.connect({
    unix: socket,
    socket: {
      open(s) {
        sock = s as unknown as typeof sock;
        flush(sock!);
      },
      drain(s) {
        flush(s as unknown as NonNullable<typeof sock>);
      },
      data(_s, chunk) {
        const next = new Uint8Array(buf.length + chunk.length);
        next.set(buf);
        next.set(chunk, buf.length);
        buf = next;
        if (complete()) finish(false);
      },
      close() {
        finish(true);
      },
      error() {
        finish(true);
      },
      connectError() {
        finish(true);
      },
    },
  }).catch(() => finish(true));
  return promise;
}

/** The agent's resident memory, in bytes. */
function rssOf(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : 0;
}

/** What may answer `c` with `a`, as the protocol documents it; the problems found. */
export function judgeAnswer(c: SocketCase, a: Answer, where: "socket" | "handler"): string[] {
  const p: string[] = [];
  const valid = c.valid || (where === "handler" && c.validForFetch === true);
  if (a.timedOut) return [`no answer within ${ANSWER_BOUND_MS} ms`];
  if (a.status === undefined) {
    // Bun's HTTP parser closes on what is not HTTP (or a body it cannot frame): a valid request is always answered.
    if (valid) p.push("a valid request got no answer (the connection closed)");
    return p;
  }
  const s = a.status;
  let body: any;
  try {
    body = JSON.parse(a.body);
  } catch {
    body = undefined;
  }
  const path = c.request?.path ?? "";
  // 505: Bun's parser on a request line it cannot read (a method that is no token); never for a valid one.
  if (s >= 500 && !(s === 505 && !valid && where === "socket")) p.push(`answered ${s}: ${a.body.slice(0, 300)}`);
  if ((s === 200 || s === 204) && !valid) p.push(`answered ${s} to a request that is not valid [${c.tags.join(" ")}]`);
  if (valid && s === 400) p.push(`refused a valid request: ${a.body.slice(0, 300)}`);
  if (s === 204 && c.kind !== "report") p.push("204 for something other than a report");
  if (s === 200 && c.kind === "lookup") {
    const node = body?.pod?.spec?.nodeName;
    const name = body?.pod?.metadata?.name;
    if (node !== NODE || name === ELSEWHERE)
      p.push(`answered pod ${NS}/${name} of node ${node}: the agent serves only its node's pods`);
  }
  if (s === 200 && c.kind === "add") {
    if (c.pod === "elsewhere" && body?.exitCode === 0)
      p.push(`planned an ADD for ${NS}/${ELSEWHERE}, a pod of node ${OTHER_NODE}`);
    if (!c.realNetns) p.push("planned an ADD for a network namespace that is not there (a forged request)");
  }
  if (s === 404) {
    if (c.kind !== "lookup" || !path.startsWith("/v1/pods/"))
      p.push(`404 for a request that is not a pod lookup: ${a.body.slice(0, 200)}`);
    else if (body?.code !== 106) p.push(`404 without code 106: ${a.body.slice(0, 200)}`);
  }
  if (s === 409 && c.kind !== "add") p.push("409 for something other than an ADD");
  // The handler declines what the planner threw on: a crash in the planner, not a decision.
  if (s === 409 && typeof body?.details === "string" && body.details.startsWith("planning failed"))
    p.push(`the planner failed: ${body.details.slice(0, 500)}`);
  if (s === 413 && !c.tags.some((t) => /huge|junk|bad-report|bad-add|length/.test(t)))
    p.push(`413 for a small request [${c.tags.join(" ")}]`);
  if (![200, 204, 400, 404, 405, 409, 413, 414, 431].includes(s) && s < 500) p.push(`an undocumented status ${s}`);
  if (where === "handler" && s === 400 && body?.code !== 4) p.push(`400 without code 4: ${a.body.slice(0, 200)}`);
  return p;
}

export interface SocketFuzz {
  readonly agent: InstallerProcess;
  readonly dirs: HostDirs;
  /** The agent's version (a planned ADD names it). */
  readonly version: string;
  /** The real network namespace valid ADDs name, and the agent's state folder. */
  readonly netns: string;
  run(opts: {
    seed: number;
    requests: number;
    handlerEvery?: number;
    maxFailures?: number;
    onProgress?(done: number): void;
    /** The first request's index (a replay runs one). */
    first?: number;
    /** Called with each request and what the agent answered (a replay prints them). */
    onAnswer?(c: SocketCase, socket: Answer): void;
  }): Promise<SocketReport>;
  close(): Promise<void>;
}

export async function startSocketFuzz(): Promise<SocketFuzz> {
  ensureBuilt();
  const cluster: Cluster = await startCluster();
  cluster.api.addNamespace({ metadata: { name: NS } });
  cluster.api.addPod(pod(HERE, HERE_UID, NODE) as never);
  cluster.api.addPod(pod(ELSEWHERE, ELSEWHERE_UID, OTHER_NODE) as never);
  const dirs = cluster.dirs();
  const fakePlugin = join(dirs.root, "meshcni-build");
  writeFileSync(fakePlugin, `#!/bin/sh\n# stand-in plugin ${Math.random()}\n`, { mode: 0o755 });
  writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
  const agent = startInstaller(dirs, ["--plugin-binary", fakePlugin], cluster.env);
  await until(() => existsSync(dirs.socket), 15_000, "the agent's socket").catch((e) => {
    throw new Error(`${e.message}\n${agent.log()}`);
  });
  const netns = Netns.create(`mfz-${uniq()}`);
  // The agent's version, which a planned ADD's request must name (the plugin run by hand says it).
  const said = Bun.spawnSync([repoPath("dist/meshcni")], { env: {}, stderr: "pipe", stdout: "pipe" }).stderr.toString();
  const version = /^meshcni (\S+):/.exec(said)?.[1] ?? "unknown";

  // The handler itself, with the agent's own watch cache and planner, on a state folder of its own.
  const direct = mkdtempSync(join(tmpdir(), "meshcni-handler-fuzz-"));
  const u = new URL(cluster.api.url);
  const cache = new WatchCache(serviceAccountClient({ host: u.hostname, port: u.port, serviceAccountDir: dirs.sa }), {
    nodeName: NODE,
  });
  const stopCache = new AbortController();
  void cache.run(stopCache.signal);
  await cache.podInformer.whenSynced();
  await cache.namespaceInformer.whenSynced();
  // A plain object: members a newer planner asks for type-check either way. Its namespace check
  // (newer planners ask it) takes the harness's namespace alone; the compiled agent runs its own.
  const plannerDeps = {
    lookup: cache.lookup,
    stateDir: direct,
    onLookup: () => {},
    writeRecord: async (d: string, r: never) => writeRecordFor(d, r),
    netnsProblem: (path: string | undefined) =>
      path === netns.path ? undefined : `${path} is not a network namespace of this node`,
  };
  const handler = createSocketHandler({
    lookup: cache.lookup,
    planAdd: createAddPlanner(plannerDeps as never),
    onLookup: () => {},
    onBadRequest: () => {},
    onReport: () => {},
  });
  const records = (state: string) => {
    try {
      return readdirSync(join(state, RECORDS_SUBDIR)).filter((n) => n.endsWith(".json"));
    } catch {
      return [];
    }
  };

  return {
    agent,
    dirs,
    version,
    netns: netns.path,
    async run(opts) {
      const t0 = performance.now();
      const report: SocketReport = {
        seed: opts.seed,
        requests: 0,
        handlerRequests: 0,
        outcomes: new Map(),
        failures: [],
        rss: { start: 0, end: 0, max: 0 },
        ms: 0,
      };
      const count = (k: string) => report.outcomes.set(k, (report.outcomes.get(k) ?? 0) + 1);
      const fail = (c: SocketCase, where: SocketFailure["where"], problems: string[]) =>
        report.failures.push({ seed: opts.seed, index: c.index, where, tags: c.tags, problems });
      const pid = agent.proc.pid;
      const first = opts.first ?? 0;
      report.rss.start = rssOf(pid);
      for (let i = first; i < first + opts.requests; i++) {
        if (opts.maxFailures !== undefined && report.failures.length >= opts.maxFailures) break;
        // Memory is counted from the 50th request: the first ones load the agent's code paths.
        if (i === first + 50) report.rss.start = rssOf(pid);
        const c = buildSocketCase(opts.seed, i, netns.path, dirs.state, version);
        const before = new Set(records(dirs.state));
        const a = await sendRaw(dirs.socket, c.bytes, c.incomplete === true);
        report.requests++;
        opts.onAnswer?.(c, a);
        count(`socket ${a.status ?? (a.timedOut ? "no answer" : "closed")}`);
        const problems = judgeAnswer(c, a, "socket");
        if (agent.proc.exitCode !== null) {
          problems.push(`the agent exited (${agent.proc.exitCode}):\n${agent.log().slice(-3000)}`);
          fail(c, "socket", problems);
          break;
        }
        const added = records(dirs.state).filter((n) => !before.has(n));
        if (added.length > 0 && !(c.kind === "add" && c.valid))
          problems.push(`records written for a request that is not a valid ADD: ${added.join(", ")}`);
        if (added.length > 0 && c.kind === "add" && c.valid && !c.realNetns)
          problems.push(`records written for an ADD of a network namespace that is not there: ${added.join(", ")}`);
        if (problems.length > 0) fail(c, "socket", problems);
        report.rss.max = Math.max(report.rss.max, rssOf(pid));
        opts.onProgress?.(i + 1);

        if (c.request && opts.handlerEvery && i % opts.handlerEvery === 0) {
          let req: Request | undefined;
          try {
            const r = c.request;
            req = new Request(r.path.startsWith("http://") ? r.path : `http://meshcni-agent${r.path}`, {
              method: r.method,
              headers: r.headers,
              ...(r.body !== undefined ? { body: r.body } : {}),
            });
          } catch {
            req = undefined; // not a request fetch can express
          }
          // Bun's Request turns a method it does not know, or one in mixed case, into GET: not this request.
          if (req && req.method !== c.request.method.toUpperCase()) req = undefined;
          if (req) {
            const hb = new Set(records(direct));
            const h0 = performance.now();
            let ha: Answer;
            try {
              const res = await Promise.race([handler(req), Bun.sleep(ANSWER_BOUND_MS).then(() => undefined)]);
              ha = res
                ? {
                    status: res.status,
                    head: "",
                    body: await res.text(),
                    closed: false,
                    timedOut: false,
                    ms: performance.now() - h0,
                  }
                : { head: "", body: "", closed: false, timedOut: true, ms: ANSWER_BOUND_MS };
            } catch (e) {
              ha = {
                status: 599,
                head: "",
                body: `the handler threw: ${(e as Error).stack}`,
                closed: false,
                timedOut: false,
                ms: 0,
              };
            }
            report.handlerRequests++;
            count(`handler ${ha.status ?? "no answer"}`);
            const hp = judgeAnswer(c, ha, "handler");
            const hadded = records(direct).filter((n) => !hb.has(n));
            if (hadded.length > 0 && !(c.kind === "add" && (c.valid || c.validForFetch)))
              hp.push(`records written for a request that is not a valid ADD: ${hadded.join(", ")}`);
            if (hadded.length > 0 && c.kind === "add" && !c.realNetns)
              hp.push(`records written for an ADD of a network namespace that is not there: ${hadded.join(", ")}`);
            if (hp.length > 0) fail(c, "handler", hp);
          }
        }
      }
      report.rss.end = rssOf(pid);
      const mb = (n: number) => `${n >> 20} MB`;
      if (report.rss.start > 0 && report.rss.end - report.rss.start > RSS_GROWTH_BOUND) {
        report.failures.push({
          seed: opts.seed,
          index: -1,
          where: "socket",
          tags: ["memory"],
          problems: [`the agent's memory grew from ${mb(report.rss.start)} to ${mb(report.rss.end)} over the run`],
        });
      }
      if (report.rss.start > 0 && report.rss.max - report.rss.start > RSS_PEAK_BOUND) {
        report.failures.push({
          seed: opts.seed,
          index: -1,
          where: "socket",
          tags: ["memory"],
          problems: [`the agent's memory went from ${mb(report.rss.start)} to ${mb(report.rss.max)} at its peak`],
        });
      }
      report.ms = performance.now() - t0;
      return report;
    },
    async close() {
      stopCache.abort();
      await agent.stop("SIGKILL");
      netns.delete();
      rmSync(direct, { recursive: true, force: true });
      dirs.cleanup();
      await cluster.close();
    },
  };
}

export function renderSocketFailure(f: SocketFailure): string {
  return [
    `request ${f.index} (seed ${f.seed}) failed through the ${f.where}: [${f.tags.join(" ")}]`,
    ...f.problems.map((p) => `  - ${p.slice(0, 1500)}`),
    ...(f.index >= 0 ? [`  replay: bun run fuzz --only socket --seed ${f.seed} --case ${f.index}`] : []),
  ].join("\n");
}

export function renderSocketSummary(r: SocketReport): string {
  const outcomes = [...r.outcomes]
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k}: ${n}`)
    .join(", ");
  return [
    `socket seed ${r.seed}: ${r.requests} requests to the compiled agent, ${r.handlerRequests} to the handler, ` +
      `in ${(r.ms / 1000).toFixed(1)} s; agent RSS ${r.rss.start >> 20} -> ${r.rss.max >> 20} MB (max), ` +
      `${r.rss.end >> 20} MB at the end`,
    `outcomes: ${outcomes}`,
    `failures: ${r.failures.length}`,
  ].join("\n");
}
