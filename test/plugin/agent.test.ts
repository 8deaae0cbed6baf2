// The compiled plugin with the node agent (a stand-in on the agent's real socket server and
// handler, test/support/agent.ts) and the stand-in API server, in real network namespaces with
// real iptables: a warm ADD asks the agent and makes no API request; without the agent it falls
// back to its kubeconfig and still fails closed; every command is reported, or written to the
// fallback log; records are written, removed and pruned, and DEL runs no process.
import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FALLBACK_LOG, FALLBACK_LOG_MAX_BYTES, type PodRecord, recordPath } from "../../internal/wire/state.ts";
import { appendFallbackLog } from "../../internal/plugin/io/state.ts";
import { type StandInAgent, startStandInAgent } from "../support/agent.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { repoPath } from "../support/golden.ts";
import { Netns, uniq } from "../support/netns.ts";
import { cniEnv, PLUGIN, runPlugin } from "../support/plugin-run.ts";

const fixture = (p: string) => JSON.parse(readFileSync(repoPath(p), "utf8"));
const POD = fixture("testdata/pods/linkerd-meshed.json");
const NS = fixture("testdata/pods/namespace-emojivoto.json");
const UNMESHED = fixture("testdata/pods/not-injected.json");
const UID: string = POD.metadata.uid;
const args = (name = POD.metadata.name as string, ns = "emojivoto", uid: string | undefined = UID) =>
  `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${name}${uid ? `;K8S_POD_UID=${uid}` : ""}`;

let api: ApiServer;
let agent: StandInAgent;
let dir: string;
let kubeconfig: string;
const spaces: Netns[] = [];

function entry(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    cniVersion: "1.0.0",
    name: "k8s-pod-network",
    type: "meshcni",
    log_level: "info",
    kubernetes: { kubeconfig, exclude_namespaces: ["kube-system"], pod_namespace: "meshcni" },
    linkerd: { "iptables-mode": "nft" },
    agent_socket: agent.socket,
    state_dir: agent.dir,
    ...extra,
  };
}

function netns(): Netns {
  const n = Netns.create(`mcag-${uniq()}`);
  spaces.push(n);
  return n;
}

const cid = () => `c${uniq()}${uniq()}`;
const ruled = (n: Netns) => n.save("nft").includes("PROXY_INIT_REDIRECT");
const apiPodGets = () => api.requests.filter((r) => r.path.includes("/pods/")).length;
const readRecord = (id: string): PodRecord | undefined => {
  try {
    return JSON.parse(readFileSync(recordPath(agent.dir, id), "utf8"));
  } catch {
    return undefined;
  }
};
const fallbackLog = () => {
  try {
    return readFileSync(join(agent.dir, FALLBACK_LOG), "utf8");
  } catch {
    return "";
  }
};

async function add(n: Netns, id: string, cniArgs = args(), extra: Record<string, unknown> = {}) {
  return runPlugin(
    cniEnv("ADD", { CNI_ARGS: cniArgs, CNI_NETNS: n.path, CNI_CONTAINERID: id }),
    JSON.stringify(entry(extra)),
  );
}

/** Runs the plugin under strace; returns its result and every program it executed (itself first). */
function traced(env: Record<string, string>, stdin: string): { code: number; stdout: string; execs: string[] } {
  const out = join(dir, `strace-${uniq()}`);
  const r = Bun.spawnSync(["strace", "-f", "-qq", "-e", "trace=execve", "-o", out, PLUGIN], {
    env: { PATH: Bun.env.PATH!, ...env },
    stdin: new TextEncoder().encode(stdin),
    stdout: "pipe",
    stderr: "pipe",
  });
  const execs = readFileSync(out, "utf8")
    .split("\n")
    .filter((l) => /execve\(/.test(l) && !/= -1 /.test(l))
    .map((l) => /execve\("([^"]+)"/.exec(l)?.[1] ?? l);
  return { code: r.exitCode, stdout: r.stdout.toString(), execs };
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "meshcni-agent-test-"));
  api = await startApiServer({ token: "t0ken" });
  api.addPod(POD);
  api.addPod(UNMESHED);
  api.addNamespace(NS);
  kubeconfig = join(dir, "kubeconfig");
  writeFileSync(kubeconfig, api.kubeconfig(), { mode: 0o600 });
  agent = startStandInAgent(api);
});
afterAll(async () => {
  for (const n of spaces) n.delete();
  agent?.close();
  await api?.close();
  rmSync(dir, { recursive: true, force: true });
});
beforeEach(() => {
  agent.start();
  agent.delayMs = 0;
  delete agent.fail;
  delete agent.ignoreUid;
  delete agent.tamper;
  agent.noPlanning = false;
  api.setGlobalFault(undefined);
  agent.reports.length = 0;
  rmSync(join(agent.dir, FALLBACK_LOG), { force: true });
  rmSync(join(agent.dir, `${FALLBACK_LOG}.1`), { force: true });
});

describe("a warm agent", () => {
  test("ADD applies the rules with no API request, writes the record and reports it", async () => {
    const n = netns();
    const id = cid();
    const before = api.requests.length;
    const r = await add(n, id);
    expect({ code: r.code, err: r.stderr }).toEqual({ code: 0, err: expect.any(String) });
    expect(ruled(n)).toBe(true);
    expect(api.requests.length).toBe(before);
    expect(agent.lookups.at(-1)).toEqual({ namespace: "emojivoto", name: POD.metadata.name, uid: UID });
    const rec = readRecord(id)!;
    expect(rec).toMatchObject({
      v: 1,
      containerId: id,
      namespace: "emojivoto",
      name: POD.metadata.name,
      uid: UID,
      decision: "meshed",
      families: [4],
    });
    const [rep] = await agent.waitReports(1);
    expect(rep).toMatchObject({
      command: "ADD",
      containerId: id,
      outcome: "meshed",
      lookup: "agent-cache",
      backend: "nft",
      pod: { namespace: "emojivoto", name: POD.metadata.name, uid: UID },
    });
    expect(rep!.rules).toBeGreaterThan(0);
    expect(rep!.reason).toContain(`pod emojivoto/${POD.metadata.name}`);
    expect(rep!.lines.some((l) => l.startsWith("meshcni: info ADD") && l.includes("applied"))).toBe(true);
    expect(fallbackLog()).toBe("");
  });

  test("the agent plans the ADD and the plugin applies it; planned or not, the same rules, record and report", async () => {
    const [planned, own] = [netns(), netns()];
    const before = { planned: agent.planned, api: api.requests.length };
    const [a, b] = [cid(), cid()];
    expect((await add(planned, a)).code).toBe(0);
    expect(agent.planned).toBe(before.planned + 1);
    agent.noPlanning = true;
    expect((await add(own, b)).code).toBe(0);
    expect(agent.planned).toBe(before.planned + 1);
    expect(agent.declined.at(-1)).toContain("told not to plan");
    // Either way: no API request, the same rules, a meshed record, the same report.
    expect(api.requests.length).toBe(before.api);
    expect(planned.save("nft")).toBe(own.save("nft"));
    expect([readRecord(a)?.decision, readRecord(b)?.decision]).toEqual(["meshed", "meshed"]);
    const reps = await agent.waitReports(2);
    const view = (r: (typeof reps)[0]) => ({
      outcome: r.outcome,
      rules: r.rules,
      backend: r.backend,
      lookup: r.lookup,
      reason: r.reason,
      lines: r.lines.map((l) => l.replace(/ADD \S+:/, "ADD x:")),
    });
    expect(view(reps[0]!)).toEqual(view(reps[1]!));
  });

  test("an ADD without rules is reported by the agent as it answers, as the plugin reports it when it runs the ADD itself", async () => {
    const [planned, own] = [netns(), netns()];
    const [a, b] = [cid(), cid()];
    const pod = args(UNMESHED.metadata.name, UNMESHED.metadata.namespace, undefined);
    const before = { planned: agent.planned, sent: agent.reportsSent };
    expect((await add(planned, a, pod)).code).toBe(0);
    expect(agent.planned).toBe(before.planned + 1);
    await agent.waitReports(1);
    // Written by the agent: the plugin sent none.
    expect(agent.reportsSent).toBe(before.sent);
    agent.noPlanning = true;
    expect((await add(own, b, pod)).code).toBe(0);
    const reps = await agent.waitReports(2);
    expect(agent.reportsSent).toBe(before.sent + 1);
    const view = (r: (typeof reps)[0]) => ({
      command: r.command,
      outcome: r.outcome,
      reason: r.reason,
      pod: r.pod,
      version: r.version,
      lines: r.lines.map((l) => l.replace(/ADD \S+:/, "ADD x:")),
    });
    expect(reps.map((r) => r.containerId)).toEqual([a, b]);
    expect(view(reps[0]!)).toEqual(view(reps[1]!));
    expect(reps[0]!.outcome).toBe("skipped");
    // The plugin's own time up to its request, and the agent's to its answer: a real duration.
    expect(reps[0]!.durationMs).toBeGreaterThan(0);
    expect(Math.abs(Date.parse(reps[0]!.time) - Date.now())).toBeLessThan(60_000);
  });

  test("a plan from the agent that the model does not allow is never applied: the plugin plans the ADD itself", async () => {
    const n = netns();
    const id = cid();
    // A comment that would end the iptables-restore line and add a rule of its own.
    agent.tamper = (answer) => {
      const plan = answer.apply!.plan as { families: { rules: { match: unknown[] }[] }[] };
      plan.families[0]!.rules[0]!.match.push({ m: "comment", text: 'x"\n-A OUTPUT -j ACCEPT\n#' });
    };
    const before = api.requests.length;
    const r = await add(n, id);
    expect(r.code).toBe(0);
    expect(r.stderr).toContain("the agent's plan does not check");
    const rules = n.save("nft");
    expect(rules).toContain("PROXY_INIT_REDIRECT");
    expect(rules).not.toContain("-A OUTPUT -j ACCEPT");
    // The plugin asked the agent for the pod instead (no API request) and wrote its own record.
    expect(api.requests.length).toBe(before);
    expect(readRecord(id)).toMatchObject({ decision: "meshed", backend: "nft" });
  });

  test("the agent cannot change the result: a rewritten IP, meshed pod or skipped, never reaches stdout", async () => {
    const prev = {
      cniVersion: "1.0.0",
      ips: [{ address: "10.244.1.12/24", gateway: "10.244.1.1", interface: 0 }],
      interfaces: [{ name: "eth0", sandbox: "/x" }],
      dns: {},
    };
    agent.tamper = (answer) => {
      answer.stdout =
        JSON.stringify({ ...prev, ips: [{ address: "10.66.6.6/24", gateway: "10.66.6.1", interface: 0 }] }, null, 2) +
        "\n";
    };
    const [meshed, skipped] = [netns(), netns()];
    const planned = agent.planned;
    const a = await add(meshed, cid(), args(), { cniVersion: "1.1.0", prevResult: prev });
    const b = await add(skipped, cid(), args(UNMESHED.metadata.name, UNMESHED.metadata.namespace), {
      cniVersion: "1.1.0",
      prevResult: prev,
    });
    expect(agent.planned).toBe(planned + 2);
    // prevResult in the request's version, whatever the agent answered.
    for (const r of [a, b])
      expect({ code: r.code, result: JSON.parse(r.stdout) }).toEqual({
        code: 0,
        result: { ...prev, cniVersion: "1.1.0" },
      });
    expect([ruled(meshed), ruled(skipped)]).toEqual([true, false]);
  });

  test("a skip is said on the plugin's own line with the pod's UID and the reason, even one the agent hides", async () => {
    const plain = await add(netns(), cid(), args(UNMESHED.metadata.name, UNMESHED.metadata.namespace, undefined));
    expect(plain.code).toBe(0);
    expect(plain.stderr).toMatch(
      new RegExp(
        `meshcni: info ADD \\S+: the agent decided: no rules for pod ` +
          `default/${UNMESHED.metadata.name} uid=${UNMESHED.metadata.uid}: \\S`,
      ),
    );
    // An agent that skips a meshed pod and sends no line of its own: the plugin takes the
    // decision (the agent could as well write the plugin's binary), and says it.
    agent.tamper = (answer) => {
      delete answer.apply;
      answer.summary = { outcome: "skipped", reason: "told to skip", pod: answer.summary.pod! };
      answer.lines = [];
    };
    const n = netns();
    const r = await add(n, cid());
    expect(r.code).toBe(0);
    expect(ruled(n)).toBe(false);
    expect(r.stderr).toContain(
      `the agent decided: no rules for pod emojivoto/${POD.metadata.name} uid=${UID}: told to skip`,
    );
    // Without the UID, the decision is not taken: the plugin runs the ADD itself.
    agent.tamper = (answer) => {
      delete answer.apply;
      answer.summary = {
        outcome: "skipped",
        reason: "told to skip",
        pod: { namespace: "emojivoto", name: POD.metadata.name },
      };
    };
    const m = netns();
    const hidden = await add(m, cid());
    expect(hidden.code).toBe(0);
    expect(hidden.stderr).toContain("skips a pod without naming it and its UID");
    expect(ruled(m)).toBe(true);
  });

  test("a planned ADD whose rules cannot be applied fails, and leaves no record", async () => {
    const n = netns();
    const id = cid();
    // A network namespace that is gone by the time the plugin applies.
    const r = await runPlugin(
      cniEnv("ADD", { CNI_ARGS: args(), CNI_NETNS: join(dir, "no-such-netns"), CNI_CONTAINERID: id }),
      JSON.stringify(entry()),
    );
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout)).toMatchObject({ code: 4, msg: "CNI_NETNS does not exist" });
    expect(readRecord(id)).toBeUndefined();
    expect(ruled(n)).toBe(false);
    const [rep] = await agent.waitReports(1);
    expect(rep).toMatchObject({ outcome: "failed", code: 4 });
  });

  test("DEL removes the record and runs no process: the rules go with the namespace; DEL again answers the same", async () => {
    const n = netns();
    const id = cid();
    expect((await add(n, id)).code).toBe(0);
    const env = cniEnv("DEL", { CNI_ARGS: args(), CNI_NETNS: n.path, CNI_CONTAINERID: id });
    const first = traced(env, JSON.stringify(entry()));
    expect({ code: first.code, stdout: first.stdout, execs: first.execs }).toEqual({
      code: 0,
      stdout: "",
      execs: [PLUGIN],
    });
    // Left to the runtime, which destroys the namespace right after DEL.
    expect(ruled(n)).toBe(true);
    expect(existsSync(recordPath(agent.dir, id))).toBe(false);
    const again = traced(env, JSON.stringify(entry()));
    expect({ code: again.code, stdout: again.stdout, execs: again.execs }).toEqual({
      code: 0,
      stdout: "",
      execs: [PLUGIN],
    });
    const reps = await agent.waitReports(3);
    expect(reps.slice(1).map((x) => [x.command, x.outcome, x.reason])).toEqual([
      ["DEL", "ok", "the record goes; the rules go with the pod's network namespace"],
      ["DEL", "untouched", "no record of this container: meshcni applied no rules to it"],
    ]);
    expect(reps[1]).toMatchObject({ pod: { namespace: "emojivoto", uid: UID } });
  });

  test("DEL of a container meshcni never saw runs no process, in a namespace holding rules of another container", async () => {
    const n = netns();
    expect((await add(n, cid())).code).toBe(0);
    const r = traced(
      cniEnv("DEL", { CNI_ARGS: args(), CNI_NETNS: n.path, CNI_CONTAINERID: cid() }),
      JSON.stringify(entry()),
    );
    expect({ code: r.code, execs: r.execs }).toEqual({ code: 0, execs: [PLUGIN] });
    expect(ruled(n)).toBe(true);
    const reps = await agent.waitReports(2);
    expect(reps[1]).toMatchObject({ command: "DEL", outcome: "untouched", pod: { namespace: "emojivoto" } });
  });

  test("a pod that is not meshed gets a skipped record, and its DEL runs no process", async () => {
    const n = netns();
    const id = cid();
    const r = await add(n, id, args(UNMESHED.metadata.name, UNMESHED.metadata.namespace, undefined));
    expect(r.code).toBe(0);
    expect(ruled(n)).toBe(false);
    expect(readRecord(id)).toMatchObject({ decision: "skipped", name: UNMESHED.metadata.name });
    const del = traced(cniEnv("DEL", { CNI_NETNS: n.path, CNI_CONTAINERID: id }), JSON.stringify(entry()));
    expect({ code: del.code, execs: del.execs }).toEqual({ code: 0, execs: [PLUGIN] });
    expect(readRecord(id)).toBeUndefined();
    const reps = await agent.waitReports(2);
    expect(reps.map((x) => x.outcome)).toEqual(["skipped", "untouched"]);
    expect(reps[1]!.reason).toContain("no rules at ADD");
  });

  test("an excluded namespace passes before the agent is asked, with a record and a report", async () => {
    const n = netns();
    const id = cid();
    const asked = agent.lookups.length;
    expect((await add(n, id, args("coredns-1", "kube-system", undefined))).code).toBe(0);
    expect(agent.lookups.length).toBe(asked);
    expect(readRecord(id)?.decision).toBe("skipped");
    const [rep] = await agent.waitReports(1);
    expect(rep).toMatchObject({ outcome: "skipped", lookup: "none" });
  });

  test("404 from the agent, or a pod with another UID, fails ADD with 106 and no rules; the failure is reported", async () => {
    const n = netns();
    const before = api.requests.length;
    const gone = await add(n, cid(), args("no-such-pod"));
    expect(gone.code).toBe(1);
    expect(JSON.parse(gone.stdout).code).toBe(106);
    const other = await add(n, cid(), args(POD.metadata.name, "emojivoto", "11111111-2222-3333-4444-555555555555"));
    expect(JSON.parse(other.stdout).code).toBe(106);
    // A lookup that answers whatever the UID: the UID is checked again on the pod object, by the
    // agent's planner and, when the agent does not plan, by the plugin.
    agent.ignoreUid = true;
    const unchecked = await add(n, cid(), args(POD.metadata.name, "emojivoto", "11111111-2222-3333-4444-555555555555"));
    expect(JSON.parse(unchecked.stdout)).toMatchObject({ code: 106, details: expect.stringContaining("K8S_POD_UID") });
    agent.noPlanning = true;
    const unplanned = await add(n, cid(), args(POD.metadata.name, "emojivoto", "11111111-2222-3333-4444-555555555555"));
    expect(JSON.parse(unplanned.stdout)).toMatchObject({ code: 106, details: expect.stringContaining("K8S_POD_UID") });
    expect(ruled(n)).toBe(false);
    expect(api.requests.length).toBe(before);
    const reps = await agent.waitReports(4);
    expect(reps.map((x) => [x.outcome, x.code])).toEqual([
      ["failed", 106],
      ["failed", 106],
      ["failed", 106],
      ["failed", 106],
    ]);
    expect(reps[0]!.reason).toContain("no-such-pod");
    expect(reps[0]!.lines.some((l) => l.startsWith("meshcni: error"))).toBe(true);
  });

  test("a container ID of 256 characters has a record (a hashed name), which DEL finds and removes and GC keeps or prunes", async () => {
    const long = (prefix: string) => prefix + "x".repeat(256 - prefix.length);
    const [a, b] = [long(cid()), long(cid())];
    const [na, nb] = [netns(), netns()];
    // a's record written by the agent (a planned ADD), b's by the plugin (the agent declines).
    expect((await add(na, a)).code).toBe(0);
    agent.noPlanning = true;
    expect((await add(nb, b)).code).toBe(0);
    for (const id of [a, b]) {
      expect(recordPath(agent.dir, id)).toMatch(/\/containers\/_[0-9a-f]{64}\.json$/);
      expect(readRecord(id)).toMatchObject({ containerId: id, decision: "meshed" });
    }
    const gc = await runPlugin(
      cniEnv("GC", { CNI_CONTAINERID: "", CNI_NETNS: "" }),
      JSON.stringify({
        ...entry(),
        cniVersion: "1.1.0",
        "cni.dev/valid-attachments": [{ containerID: a, ifname: "eth0" }],
      }),
    );
    expect(gc.code).toBe(0);
    // The line names the long ID, read from inside its record (the other tests' records go too).
    const line = gc.stderr.split("\n").find((l) => l.includes("the runtime no longer has: "))!;
    expect(line.split("the runtime no longer has: ")[1]!.split(", ")).toContain(b);
    expect(line).not.toContain(a);
    expect(readRecord(a)?.containerId).toBe(a);
    expect(readRecord(b)).toBeUndefined();
    const del = await runPlugin(
      cniEnv("DEL", { CNI_ARGS: args(), CNI_NETNS: na.path, CNI_CONTAINERID: a }),
      JSON.stringify(entry()),
    );
    expect(del.code).toBe(0);
    expect(readRecord(a)).toBeUndefined();
  });

  test("GC prunes the records of containers not in cni.dev/valid-attachments", async () => {
    const n = netns();
    const [keep, drop] = [cid(), cid()];
    for (const id of [keep, drop])
      expect((await add(n, id, args(UNMESHED.metadata.name, UNMESHED.metadata.namespace, undefined))).code).toBe(0);
    const gc = await runPlugin(
      cniEnv("GC", { CNI_CONTAINERID: "", CNI_NETNS: "" }),
      JSON.stringify({
        ...entry(),
        cniVersion: "1.1.0",
        "cni.dev/valid-attachments": [{ containerID: keep, ifname: "eth0" }],
      }),
    );
    expect(gc.code).toBe(0);
    expect(readRecord(keep)?.containerId).toBe(keep);
    expect(readRecord(drop)).toBeUndefined();
  });
});

describe("without a usable agent", () => {
  test("no socket: ADD falls back to the kubeconfig GET, and the report goes to the fallback log", async () => {
    agent.stop();
    const n = netns();
    const id = cid();
    const before = apiPodGets();
    const r = await add(n, id);
    expect(r.code).toBe(0);
    expect(ruled(n)).toBe(true);
    expect(apiPodGets()).toBe(before + 1);
    expect(readRecord(id)?.decision).toBe("meshed");
    const log = fallbackLog();
    expect(log).toContain("read the pod through the kubeconfig");
    expect(log).toMatch(
      new RegExp(`summary pod=emojivoto/${POD.metadata.name} outcome=meshed rules=\\d+ backend=nft lookup=kubeconfig`),
    );
    for (const line of log.trimEnd().split("\n")) expect(line).toStartWith("meshcni: ");
  });

  test("no socket and the API server down: fail closed (retryable), no rules, the failure in the fallback log", async () => {
    agent.stop();
    api.setGlobalFault({ kind: "status", code: 503 });
    const n = netns();
    const id = cid();
    const r = await add(n, id);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stdout).code).toBe(11);
    expect(ruled(n)).toBe(false);
    expect(readRecord(id)).toBeUndefined();
    expect(fallbackLog()).toMatch(/summary pod=emojivoto\/\S+ outcome=failed code=11 .*reason=/);
  });

  test("an agent slower than its bound: the kubeconfig GET answers within the plugin's own time bound", async () => {
    // The agent takes 3 s; the plugin's whole ADD is bounded at 2.5 s. It can only succeed by
    // giving up on the agent (AGENT_TIMEOUT_MS) and reading the pod itself.
    agent.delayMs = 3000;
    const n = netns();
    const before = apiPodGets();
    const r = await add(n, cid(), args(), { timeout_seconds: 2.5 });
    expect(r.code).toBe(0);
    expect(ruled(n)).toBe(true);
    expect(apiPodGets()).toBe(before + 1);
    const [rep] = await agent.waitReports(1);
    expect(rep).toMatchObject({ outcome: "meshed", lookup: "kubeconfig" });
    expect(rep!.lines.join("\n")).toContain("did not answer within");
  });

  test("an agent that cannot look the pod up (503) also means the kubeconfig GET, and the agent is asked once", async () => {
    agent.fail = 503;
    const n = netns();
    const asked = agent.lookups.length;
    const r = await add(n, cid());
    expect(r.code).toBe(0);
    const [rep] = await agent.waitReports(1);
    expect(rep).toMatchObject({ outcome: "meshed", lookup: "kubeconfig" });
    expect(rep!.lines.join("\n")).toContain("stand-in told to fail");
    expect(agent.lookups.length).toBe(asked + 1);
    // Without planning, the plugin's own lookup meets the same 503 and falls back the same way.
    agent.noPlanning = true;
    expect((await add(netns(), cid())).code).toBe(0);
    const reps = await agent.waitReports(2);
    expect(reps[1]!.lines.join("\n")).toContain("the agent answered 503");
  });

  test("the fallback log is bounded: past FALLBACK_LOG_MAX_BYTES it moves to .1", async () => {
    agent.stop();
    const log = join(agent.dir, FALLBACK_LOG);
    const filler = `meshcni: info filler ${"x".repeat(100)}\n`;
    writeFileSync(log, filler.repeat(Math.floor(FALLBACK_LOG_MAX_BYTES / filler.length)));
    const r = await add(netns(), cid(), args(UNMESHED.metadata.name, UNMESHED.metadata.namespace, undefined));
    expect(r.code).toBe(0);
    expect(readFileSync(`${log}.1`, "utf8")).toStartWith(filler);
    const now = readFileSync(log, "utf8");
    expect(now).not.toContain("filler");
    expect(now).toContain("outcome=skipped");
    // And again at a small bound, through the same function: each rotation replaces the older file.
    const small = mkdtempSync(join(dir, "small-"));
    for (let i = 0; i < 10; i++) await appendFallbackLog(small, `meshcni: info line ${i}\n`, 60);
    const cur = readFileSync(join(small, FALLBACK_LOG), "utf8");
    const old = readFileSync(join(small, `${FALLBACK_LOG}.1`), "utf8");
    expect(cur.length).toBeLessThanOrEqual(60);
    expect(cur).toContain("line 9");
    expect(old).not.toContain("line 0");
  });
});

describe("no symbolic link in the state folder is followed", () => {
  /** A folder outside the state folder, with files a link planted inside it points to. */
  const outside = () => {
    const o = mkdtempSync(join(dir, "outside-"));
    for (const f of ["victim.log", "victim.json"]) writeFileSync(join(o, f), "untouched\n");
    return o;
  };
  const untouched = (o: string) => {
    for (const f of readdirSync(o))
      expect({ f, text: readFileSync(join(o, f), "utf8") }).toEqual({ f, text: "untouched\n" });
  };

  test("links at plugin.log and at a record's name: nothing outside is written, the record replaces its link, ADD answers as always", async () => {
    agent.stop();
    const o = outside();
    const log = join(agent.dir, FALLBACK_LOG);
    rmSync(log, { force: true });
    symlinkSync(join(o, "victim.log"), log);
    const id = cid();
    mkdirSync(join(agent.dir, "containers"), { recursive: true });
    symlinkSync(join(o, "victim.json"), recordPath(agent.dir, id));
    const n = netns();
    const prev = {
      cniVersion: "1.0.0",
      ips: [{ address: "10.244.1.12/24", interface: 0 }],
      interfaces: [{ name: "eth0", sandbox: n.path }],
    };
    const r = await add(n, id, args(), { prevResult: prev });
    expect({ code: r.code, result: JSON.parse(r.stdout) }).toEqual({ code: 0, result: prev });
    expect(ruled(n)).toBe(true);
    untouched(o);
    expect(readdirSync(o).sort()).toEqual(["victim.json", "victim.log"]);
    // The record is a file of its own now; the log's link was left, and not written through.
    expect(lstatSync(recordPath(agent.dir, id)).isFile()).toBe(true);
    expect(readRecord(id)).toMatchObject({ containerId: id, decision: "meshed" });
    expect(lstatSync(log).isSymbolicLink()).toBe(true);
    expect(r.stderr).toContain("could not append to the fallback log");
    // No temp file left behind.
    expect(readdirSync(join(agent.dir, "containers")).filter((f) => f.endsWith(".tmp"))).toEqual([]);
    // DEL removes the record, and nothing outside.
    const del = await runPlugin(
      cniEnv("DEL", { CNI_ARGS: args(), CNI_NETNS: n.path, CNI_CONTAINERID: id }),
      JSON.stringify(entry()),
    );
    expect(del.code).toBe(0);
    expect(existsSync(recordPath(agent.dir, id))).toBe(false);
    untouched(o);
    rmSync(log);
  });

  test("the records folder a link: no record written, removed or pruned through it; ADD, DEL and GC still answer", async () => {
    agent.stop();
    const o = outside();
    const records = join(agent.dir, "containers");
    const aside = `${records}.aside`;
    mkdirSync(records, { recursive: true });
    renameSync(records, aside);
    symlinkSync(o, records);
    try {
      const [a, b] = [cid(), cid()];
      // A file named as a's record, there: DEL of an "unreadable" record would remove it.
      writeFileSync(join(o, `${a}.json`), "untouched\n");
      const n = netns();
      const r = await add(n, b);
      expect(r.code).toBe(0);
      expect(ruled(n)).toBe(true);
      expect(r.stderr).toContain("could not write the record");
      const del = await runPlugin(
        cniEnv("DEL", { CNI_ARGS: args(), CNI_NETNS: n.path, CNI_CONTAINERID: a }),
        JSON.stringify(entry()),
      );
      expect(del.code).toBe(0);
      const gc = await runPlugin(
        cniEnv("GC", { CNI_CONTAINERID: "", CNI_NETNS: "" }),
        JSON.stringify({ ...entry(), cniVersion: "1.1.0", "cni.dev/valid-attachments": [] }),
      );
      expect(gc.code).toBe(0);
      untouched(o);
      expect(readdirSync(o).sort()).toEqual([`${a}.json`, "victim.json", "victim.log"].sort());
    } finally {
      rmSync(records);
      renameSync(aside, records);
    }
  });
});

describe("a rollout: the agent stops, a gap, a new agent", () => {
  test("every ADD either applied its rules or failed closed (retryable); none succeeded without rules", async () => {
    // During the gap the API server rejects the kubeconfig's token (401): the worst case of a
    // rollout, an agent gone for longer than the plugin's token lives (test/agent/
    // plugin-token.test.ts has a token outliving the agent that wrote it, and one expiring).
    const results: { phase: string; code: number; err?: number; ruled: boolean }[] = [];
    const one = async (phase: string) => {
      const n = netns();
      const r = await add(n, cid());
      results.push({
        phase,
        code: r.code,
        ...(r.code !== 0 ? { err: JSON.parse(r.stdout).code } : {}),
        ruled: ruled(n),
      });
    };
    const wave = (phase: string) => Promise.all([one(phase), one(phase), one(phase)]);
    await wave("before");
    // SIGTERM while ADDs are under way.
    const during = wave("stopping");
    await Bun.sleep(5);
    agent.stop();
    api.setGlobalFault({ kind: "status", code: 401 });
    await during;
    await wave("gap");
    const starting = wave("starting");
    await Bun.sleep(5);
    agent.start();
    await starting;
    api.setGlobalFault(undefined);
    await wave("after");
    for (const r of results) {
      if (r.code === 0) expect({ ...r, ruled: true }).toEqual(r);
      else expect({ ...r, retryable: [11, 104].includes(r.err!) }).toEqual({ ...r, ruled: false, retryable: true });
    }
    expect(results.filter((r) => r.phase === "gap").every((r) => r.code === 1)).toBe(true);
    expect(results.filter((r) => r.phase === "before" || r.phase === "after").every((r) => r.code === 0)).toBe(true);
  });
});
