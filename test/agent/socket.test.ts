// The agent's socket (internal/agent/socket/handler.ts behind internal/agent/socket/serve.ts), served for
// real on a Unix socket in a temp folder and asked the way the plugin asks (fetch with `unix`),
// in front of the in-memory PodLookup of test/support: the folder's and the socket's modes, a
// stale socket replaced, every answer of internal/wire/protocol.ts, and bad requests answered 400,
// never 404.
import { afterEach, describe, expect, test } from "bun:test";
import {
  chmodSync,
  existsSync,
  lstatSync,
  lutimesSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createSocketHandler, type SocketDeps } from "../../internal/agent/socket/handler.ts";
import { ADD_PATH, type AddAnswer, podLookupPath, REPORTS_PATH, type Report } from "../../internal/wire/protocol.ts";
import type { LookupResult } from "../../internal/agent/types.ts";
import { type AgentSocket, serveAgentSocket } from "../../internal/agent/socket/serve.ts";
import { MemoryPodLookup } from "../support/pod-lookup.ts";

let root: string;
let served: AgentSocket | undefined;
afterEach(() => {
  served?.stop();
  served = undefined;
  if (root) rmSync(root, { recursive: true, force: true });
});

function serve(opts: { timeoutMs?: number; planAdd?: SocketDeps["planAdd"] } = {}) {
  root = mkdtempSync(join(tmpdir(), "meshcni-sock-"));
  const lookup = new MemoryPodLookup();
  lookup.addPod({ metadata: { namespace: "emojivoto", name: "web-1", uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f" } });
  const reports: Report[] = [];
  const lookups: LookupResult[] = [];
  const bad: string[] = [];
  const path = join(root, "run", "meshcni", "agent.sock");
  served = serveAgentSocket(
    path,
    createSocketHandler({
      lookup,
      onReport: (r) => reports.push(r),
      onLookup: (r) => lookups.push(r),
      onBadRequest: (why) => bad.push(why),
      ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
      ...(opts.planAdd ? { planAdd: opts.planAdd } : {}),
    }),
    (e) => {
      throw e;
    },
  );
  const ask = (p: string, init: RequestInit = {}) =>
    fetch(`http://localhost${p}`, { ...init, unix: path } as RequestInit);
  return { lookup, reports, lookups, bad, path, ask };
}

const REPORT: Report = {
  v: 1,
  command: "ADD",
  containerId: "3f0c9b6a1e2d",
  pod: { namespace: "emojivoto", name: "web-1", uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f" },
  outcome: "meshed",
  reason: "has a linkerd-proxy container",
  rules: 12,
  backend: "iptables-nft",
  lookup: "agent-cache",
  durationMs: 21,
  lines: ["meshcni: info applied 12 rules"],
  time: "2026-01-01T10:00:00.000Z",
  version: "0.1.0",
};

describe("the agent's socket", () => {
  test("a 0700 folder, a socket of mode 0000 owned by root", () => {
    const { path } = serve();
    expect(lstatSync(path).isSocket()).toBe(true);
    expect(statSync(path).mode & 0o7777).toBe(0);
    expect([statSync(path).uid, statSync(path).gid]).toEqual([0, 0]);
    expect(statSync(join(root, "run", "meshcni")).mode & 0o777).toBe(0o700);
  });

  test("uid 0 without capabilities cannot connect (EACCES); root with them, as the runtime runs the plugin, can", async () => {
    const { path, ask } = serve();
    // A pod with a hostPath of the folder and its capabilities dropped: uid 0, no CAP_DAC_OVERRIDE.
    const connect = `require("node:net").connect(${JSON.stringify(path)})
      .on("connect", () => { console.log("connected"); process.exit(0); })
      .on("error", (e) => { console.log(e.code); process.exit(0); });`;
    const run = (prefix: string[]) => {
      const r = Bun.spawnSync([...prefix, process.execPath, "-e", connect], { stdout: "pipe", stderr: "pipe" });
      return `${r.stdout.toString().trim()}${r.stderr.toString().trim() ? ` (${r.stderr.toString().trim()})` : ""}`;
    };
    const capless = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--"];
    expect(run(capless)).toBe("EACCES");
    // The same with CAP_DAC_OVERRIDE alone kept: the capability is what tells them apart.
    expect(run(["setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all,+dac_override", "--"])).toBe(
      "connected",
    );
    expect(run([])).toBe("connected");
    expect((await ask("/v1/pods/emojivoto/web-1")).status).toBe(200);
  });

  test("an existing folder is made 0700; a stale socket is replaced; stop removes only its own socket", async () => {
    root = mkdtempSync(join(tmpdir(), "meshcni-sock-"));
    const dir = join(root, "state");
    mkdirSync(dir, { mode: 0o755 });
    chmodSync(dir, 0o755);
    const path = join(dir, "agent.sock");
    // A socket left by an agent that was killed: bound by a process that is gone.
    const child = Bun.spawn(
      [
        process.execPath,
        "-e",
        `require("node:net").createServer().listen(${JSON.stringify(path)}, () => console.log("up"))`,
      ],
      { stdout: "pipe" },
    );
    await child.stdout.getReader().read();
    child.kill("SIGKILL");
    await child.exited;
    expect(lstatSync(path).isSocket()).toBe(true);
    const stale = lstatSync(path, { bigint: true }).ctimeNs;
    served = serveAgentSocket(
      path,
      createSocketHandler({ lookup: new MemoryPodLookup(), onReport() {}, onLookup() {}, onBadRequest() {} }),
      () => {},
    );
    expect(lstatSync(path).isSocket()).toBe(true);
    expect(lstatSync(path, { bigint: true }).ctimeNs).not.toBe(stale);
    expect(statSync(dir).mode & 0o777).toBe(0o700);
    const r = await fetch("http://localhost/v1/pods/a/b", { unix: path } as RequestInit);
    expect(r.status).toBe(404); // answered by the new agent (the in-memory lookup has no such pod)
    // A newer agent's socket at the same path is not ours to remove.
    const mine = served;
    const newer = serveAgentSocket(
      path,
      createSocketHandler({ lookup: new MemoryPodLookup(), onReport() {}, onLookup() {}, onBadRequest() {} }),
      () => {},
    );
    mine.stop();
    expect(lstatSync(path).isSocket()).toBe(true);
    expect((await fetch("http://localhost/v1/pods/a/b", { unix: path } as RequestInit)).status).toBe(404);
    newer.stop();
    served = undefined;
    expect(existsSync(path)).toBe(false);
  });

  test("a socket an agent bound aside and never renamed (it died in between) is removed once a minute old", async () => {
    root = mkdtempSync(join(tmpdir(), "meshcni-sock-"));
    const path = join(root, "agent.sock");
    const bindAndDie = async (name: string) => {
      const child = Bun.spawn(
        [
          process.execPath,
          "-e",
          `require("node:net").createServer().listen(${JSON.stringify(join(root, name))}, () => console.log("up"))`,
        ],
        { stdout: "pipe" },
      );
      await child.stdout.getReader().read();
      child.kill("SIGKILL");
      await child.exited;
    };
    await bindAndDie(".agent.sock.0a1b2c3d4e5f");
    await bindAndDie(".agent.sock.fresh0000000");
    const old = new Date(Date.now() - 120_000);
    lutimesSync(join(root, ".agent.sock.0a1b2c3d4e5f"), old, old);
    served = serveAgentSocket(
      path,
      createSocketHandler({ lookup: new MemoryPodLookup(), onReport() {}, onLookup() {}, onBadRequest() {} }),
      () => {},
    );
    // The old one goes; a fresh one may be another agent's, between its bind and its rename.
    expect(readdirSync(root).sort()).toEqual([".agent.sock.fresh0000000", "agent.sock"]);
  });

  test("what is not a socket is never replaced, and a shared folder is refused", () => {
    root = mkdtempSync(join(tmpdir(), "meshcni-sock-"));
    const file = join(root, "agent.sock");
    writeFileSync(file, "not a socket");
    const handler = createSocketHandler({
      lookup: new MemoryPodLookup(),
      onReport() {},
      onLookup() {},
      onBadRequest() {},
    });
    expect(() => serveAgentSocket(file, handler, () => {})).toThrow(/exists and is not a socket; not replacing it/);
    const sticky = join(root, "shared");
    mkdirSync(sticky);
    chmodSync(sticky, 0o1777);
    expect(() => serveAgentSocket(join(sticky, "agent.sock"), handler, () => {})).toThrow(/is a shared folder/);
    expect(statSync(sticky).mode & 0o7777).toBe(0o1777);
  });

  test("lookups: the pod and its namespace; 404 (code 106) for a missing pod or another UID; 503 when the lookup cannot answer", async () => {
    const { ask, lookup, lookups } = serve();
    const ok = await ask(podLookupPath("emojivoto", "web-1", "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f"));
    expect(ok.status).toBe(200);
    expect((await ok.json()) as any).toEqual({
      pod: lookup.pods.get("emojivoto/web-1"),
      namespace: { metadata: { name: "emojivoto" } },
      source: "cache",
    });
    expect(lookup.questions.at(-1)).toEqual({
      namespace: "emojivoto",
      name: "web-1",
      uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f",
    });
    const noUid = await ask(podLookupPath("emojivoto", "web-1"));
    expect(noUid.status).toBe(200);
    expect(lookup.questions.at(-1)).toEqual({ namespace: "emojivoto", name: "web-1" });
    const missing = await ask(podLookupPath("emojivoto", "web-2"));
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as any).code).toBe(106);
    const otherUid = await ask(podLookupPath("emojivoto", "web-1", "11111111-2222-4333-8444-555555555555"));
    expect(otherUid.status).toBe(404);
    expect(((await otherUid.json()) as any).details).toContain("not 11111111-2222-4333-8444-555555555555");
    lookup.unavailable = "the cache is not in sync and the GET failed";
    const down = await ask(podLookupPath("emojivoto", "web-1"));
    expect(down.status).toBe(503);
    expect((await down.json()) as any).toEqual({
      code: 11,
      msg: "the agent cannot answer",
      details: "the cache is not in sync and the GET failed",
    });
    expect(lookups.map((l) => (l.ok ? l.source : l.status))).toEqual(["cache", "cache", 404, 404, 503]);
  });

  test("a lookup that takes too long is given up with 503 (the plugin falls back)", async () => {
    const { ask, lookup } = serve({ timeoutMs: 100 });
    lookup.delayMs = 5000;
    const r = await ask(podLookupPath("emojivoto", "web-1"));
    expect(r.status).toBe(503);
    expect(((await r.json()) as any).details).toContain("looking up pod emojivoto/web-1 failed");
  });

  test("a report is answered 204 at once and then handed on, whole", async () => {
    const { ask, reports } = serve();
    const r = await ask(REPORTS_PATH, { method: "POST", body: JSON.stringify(REPORT) });
    expect(r.status).toBe(204);
    for (let i = 0; i < 100 && reports.length === 0; i++) await Bun.sleep(5);
    expect(reports).toEqual([REPORT]);
  });

  test("bad requests: 400 (405, 413) with a reason, never 404, never a lookup", async () => {
    const { ask, bad, lookup, reports } = serve();
    const cases: [string, RequestInit, number, RegExp][] = [
      ["/v1/pods/Emojivoto/web-1", {}, 400, /not a namespace name/],
      ["/v1/pods/emojivoto/web_1", {}, 400, /not a pod name/],
      ["/v1/pods/emojivoto/web-1/extra", {}, 400, /expected \/v1\/pods\/NAMESPACE\/NAME/],
      ["/v1/pods/emojivoto", {}, 400, /expected/],
      ["/v1/pods/emojivoto/web-1?uid=a%0Ab", {}, 400, /not a Kubernetes UID/],
      ["/v1/pods/emojivoto/web-1?uid=a&uid=b", {}, 400, /more than one uid/],
      ["/v1/pods/emo%2Fjivoto/web-1", {}, 400, /not a namespace name/],
      ["/v1/pods/%2e%2e/web-1", {}, 400, /no such endpoint/],
      ["/v1/pods/emojivoto/web-1", { method: "DELETE" }, 405, /only GET/],
      [REPORTS_PATH, {}, 405, /only POST/],
      [REPORTS_PATH, { method: "POST", body: "{" }, 400, /not JSON/],
      [REPORTS_PATH, { method: "POST", body: JSON.stringify({ ...REPORT, outcome: "great" }) }, 400, /outcome/],
      [
        REPORTS_PATH,
        { method: "POST", body: JSON.stringify({ ...REPORT, lines: ["x".repeat(600_000), "y".repeat(600_000)] }) },
        413,
        /.*/,
      ],
      ["/v2/pods/emojivoto/web-1", {}, 400, /no such endpoint/],
      ["/", {}, 400, /no such endpoint/],
    ];
    for (const [path, init, code, why] of cases) {
      const r = await ask(path, init);
      expect({ path, status: r.status }).toEqual({ path, status: code });
      const text = await r.text();
      if (text) expect(JSON.parse(text).details ?? "").toMatch(why);
    }
    expect(lookup.questions).toEqual([]);
    expect(reports).toEqual([]);
    expect(bad.length).toBeGreaterThanOrEqual(cases.length - 1);
  });

  test("an ADD answered without rules is reported by the agent only when the plugin will take the answer and said when it started", async () => {
    const answer = (over: Partial<AddAnswer> = {}): AddAnswer => ({
      v: 1,
      stdout: "{}\n",
      exitCode: 0,
      lines: ["meshcni: info ADD abc: no rules\n"],
      level: "info",
      context: "ADD abc",
      summary: { outcome: "skipped", reason: "no proxy", pod: { namespace: "default", name: "x", uid: "u-1" } },
      record: true,
      ...over,
    });
    let next = answer();
    const { ask, reports } = serve({ planAdd: async () => ({ ok: true, answer: next }) });
    const env = { CNI_COMMAND: "ADD", CNI_CONTAINERID: "abc", CNI_ARGS: "K8S_POD_NAMESPACE=default;K8S_POD_NAME=x" };
    const add = async (startedMs?: number) => {
      const r = await ask(ADD_PATH, {
        method: "POST",
        body: JSON.stringify({
          v: 1,
          version: "t",
          env,
          stdin: "{}",
          ...(startedMs !== undefined ? { startedMs } : {}),
        }),
      });
      return (await r.json()) as AddAnswer;
    };
    const settle = () => new Promise((done) => setTimeout(done, 20));
    const startedMs = performance.timeOrigin + performance.now() - 5;
    expect((await add(startedMs)).reported).toBe(true);
    await settle();
    expect(reports.map((r) => [r.command, r.containerId, r.outcome, r.pod?.name])).toEqual([
      ["ADD", "abc", "skipped", "x"],
    ]);
    expect(reports[0]!.durationMs).toBeGreaterThanOrEqual(5);
    expect(Date.parse(reports[0]!.time)).toBe(Math.floor(startedMs));
    // An older plugin (no startedMs), an answer with rules, an answer the plugin refuses (a
    // context it would not take, too many lines): the plugin reports, the agent does not.
    expect((await add()).reported).toBeUndefined();
    next = answer({
      summary: { outcome: "meshed", reason: "proxy" },
      apply: { plan: {}, settings: { mode: "nft", wait: true, simulate: false } },
    });
    expect((await add(startedMs)).reported).toBeUndefined();
    next = answer({ context: "ADD bad/id" });
    expect((await add(startedMs)).reported).toBeUndefined();
    next = answer({ lines: Array.from({ length: 2001 }, () => "meshcni: info ADD abc: x\n") });
    expect((await add(startedMs)).reported).toBeUndefined();
    // A skip without the pod's UID, or of another pod than CNI_ARGS names.
    next = answer({ summary: { outcome: "skipped", reason: "no proxy", pod: { namespace: "default", name: "x" } } });
    expect((await add(startedMs)).reported).toBeUndefined();
    next = answer({
      summary: { outcome: "skipped", reason: "no proxy", pod: { namespace: "default", name: "y", uid: "u-1" } },
    });
    expect((await add(startedMs)).reported).toBeUndefined();
    await settle();
    expect(reports.length).toBe(1);
    // A start the agent cannot believe is a bad request.
    const r = await ask(ADD_PATH, {
      method: "POST",
      body: JSON.stringify({ v: 1, version: "t", env, stdin: "{}", startedMs: Date.now() + 120_000 }),
    });
    expect(r.status).toBe(400);
  });
});
