// The agent plans the plugin's ADD (internal/agent/socket/plan-add.ts) with the plugin's own run.ts: for
// every Linkerd and Istio rules case, what the agent answers (stdout, log lines, the plan, the
// record) is what the plugin would have done itself, up to the rules; where the agent cannot
// plan alone (a Service, the pod's own addresses, a pod it cannot look up) it declines, and a
// plan that reaches the plugin always passes the model's check (plan/check.ts) unchanged.
import { describe, expect, setSystemTime, test } from "bun:test";
import {
  buildAnsweredReport,
  createAddPlanner,
  epochNow,
  parseAddRequest,
  reportsItself,
} from "../../internal/agent/socket/plan-add.ts";
import type { AddRequest } from "../../internal/wire/protocol.ts";
import type { PodRecord } from "../../internal/wire/state.ts";
import type { Backend } from "../../internal/firewall/backend.ts";
import { Code } from "../../internal/cni/spec.ts";
import { checkAddAnswer } from "../../internal/wire/answer.ts";
import { checkPlan } from "../../internal/plan/check.ts";
import type { Plan } from "../../internal/plan/model.ts";
import type { Firewall, KubeClient, PluginDeps } from "../../internal/plugin/deps.ts";
import { runPlugin } from "../../internal/plugin/run.ts";
import { parseNamespace, parsePod } from "../../internal/kube/objects.ts";
import * as istio from "../istio/cases.ts";
import * as linkerd from "../linkerd/cases.ts";
import { MemoryPodLookup } from "../support/pod-lookup.ts";
import { readFileSync } from "node:fs";
import { repoPath } from "../support/golden.ts";

const STATE = "/var/run/meshcni";
const NETNS = "/var/run/netns/plan-add-test";

interface Case {
  name: string;
  pod: any;
  namespace?: unknown;
  entry: Record<string, unknown>;
  /** The `kubernetes` Service the profile reads (undefined: it must not ask). */
  service?: unknown;
}

function withResult(entry: Record<string, unknown>, addresses: readonly string[]): Record<string, unknown> {
  return {
    ...entry,
    state_dir: STATE,
    prevResult: {
      cniVersion: "1.0.0",
      interfaces: [{ name: "eth0", sandbox: NETNS }],
      ips: addresses.map((a) => ({ address: `${a}/${a.includes(":") ? 64 : 24}`, interface: 0 })),
    },
  };
}

function cases(): Case[] {
  const out: Case[] = [];
  for (const name of linkerd.listCases()) {
    const input = JSON.parse(
      readFileSync(repoPath(linkerd.RULES_DIR, `${name}.input.json`), "utf8"),
    ) as linkerd.CaseInput;
    const c: Case = {
      name: `linkerd/${name}`,
      pod: linkerd.buildCasePod(input),
      entry: withResult(linkerd.linkerdEntry(input.linkerd), input.podAddresses ?? ["10.244.1.12"]),
    };
    if (input.namespace) c.namespace = JSON.parse(readFileSync(repoPath("testdata/pods", input.namespace), "utf8"));
    if (input.kubernetesService !== undefined) c.service = input.kubernetesService;
    out.push(c);
  }
  for (const name of istio.listCases()) {
    const input = JSON.parse(readFileSync(repoPath(istio.RULES_DIR, `${name}.input.json`), "utf8")) as istio.CaseInput;
    out.push({
      name: `istio/${name}`,
      pod: istio.buildCasePod(input),
      entry: withResult(istio.istioEntry({ istio: input.istio ?? {} }), input.podAddresses),
    });
  }
  return out;
}

function envOf(pod: any, id: string): AddRequest["env"] {
  return {
    CNI_COMMAND: "ADD",
    CNI_CONTAINERID: id,
    CNI_NETNS: NETNS,
    CNI_IFNAME: "eth0",
    CNI_PATH: "/opt/cni/bin",
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod.metadata.namespace};K8S_POD_NAME=${pod.metadata.name}`,
  };
}

/** The plugin's own ADD, with fakes that hold the case's objects and catch the plan it applies. */
async function pluginAdd(c: Case, env: AddRequest["env"], stdin: string) {
  let applied: Plan | undefined;
  const records: PodRecord[] = [];
  const lines: string[] = [];
  const driver: Backend = {
    name: "iptables",
    tools: () => ({ label: "fake", bins: {} }),
    render: () => "",
    apply: async (_fw, plan) => {
      applied = plan;
    },
    verify: async () => [],
    remove: async () => false,
  };
  const fw: Firewall = {
    driver,
    backend: "fake",
    wait: false,
    run: async () => ({ code: 0, stdout: "", stderr: "" }),
    ip: async () => ({ code: 0, stdout: "", stderr: "" }),
  };
  const kube: KubeClient = {
    getPod: async () => parsePod(c.pod)!,
    // As the agent's lookup answers: the namespace fixture, else a namespace without annotations.
    getNamespace: async (name) => parseNamespace(c.namespace ?? { metadata: { name } })!,
    getService: async () => {
      if (c.service === undefined || c.service === null) throw new Error("no service");
      return c.service as never;
    },
    lookup: () => ({ source: "agent-cache" }),
  };
  const deps: PluginDeps = {
    openKube: async () => kube,
    openFirewall: async () => fw,
    hostProblems: async () => [],
    netnsExists: async () => true,
    podAddresses: async () => [],
    writeFile: async () => {},
    records: {
      read: async () => undefined,
      write: async (_d, r) => void records.push(r),
      remove: async () => {},
      prune: async () => [],
    },
    logSink: (l) => lines.push(l),
  };
  const out = await runPlugin({ getenv: (k) => env[k as keyof typeof env], readStdin: async () => stdin, deps });
  return { out, applied, records, lines };
}

function planner(
  c: Case | undefined,
  o: { netnsProblem?: (p: string | undefined) => string | undefined; recordsFull?: () => string | undefined } = {},
) {
  const lookup = new MemoryPodLookup();
  if (c) {
    lookup.addPod(c.pod);
    if (c.namespace) lookup.namespaces.set(c.pod.metadata.namespace, c.namespace);
  }
  const written: PodRecord[] = [];
  const plan = createAddPlanner({
    lookup,
    stateDir: STATE,
    onLookup: () => {},
    writeRecord: async (_d, r) => void written.push(r),
    netnsProblem: o.netnsProblem ?? (() => undefined),
    ...(o.recordsFull ? { recordsFull: o.recordsFull } : {}),
  });
  return { plan, written, lookup };
}

describe("the agent plans an ADD as the plugin would run it", () => {
  const all = cases();
  test("the cases are all there", () => {
    expect(all.filter((c) => c.name.startsWith("linkerd/")).length).toBeGreaterThan(10);
    expect(all.filter((c) => c.name.startsWith("istio/")).length).toBeGreaterThan(50);
  });

  for (const c of all) {
    test(c.name, async () => {
      const id = "0123456789abcdef";
      const env = envOf(c.pod, id);
      const stdin = JSON.stringify(c.entry);
      const own = await pluginAdd(c, env, stdin);
      const { plan, written } = planner(c);
      const r = await plan({ v: 1, version: "test", env, stdin });
      if (c.service !== undefined) {
        // Linkerd's control plane reads the kubernetes Service: the plugin's to fetch.
        expect(r).toEqual({ ok: false, why: expect.stringContaining("service default/kubernetes") });
        return;
      }
      if (!r.ok) throw new Error(`declined: ${r.why}`);
      const a = r.answer;
      expect({ stdout: a.stdout, exitCode: a.exitCode }).toEqual({
        stdout: own.out.stdout,
        exitCode: own.out.exitCode,
      });
      if (own.applied) {
        // The same plan, which survives the wire and the plugin's check unchanged.
        const wire = JSON.parse(JSON.stringify(a.apply!.plan));
        expect(wire).toEqual(JSON.parse(JSON.stringify(own.applied)));
        expect(checkPlan(wire)).toEqual(wire);
        expect(a.summary).toMatchObject({
          outcome: "meshed",
          reason: own.out.summary.reason,
          rules: own.out.summary.rules,
        });
        // The plugin's own lines, but for those it writes once the rules are in.
        expect(a.lines).toEqual(own.lines.filter((l) => !/; applied \d+ rules \(fake|: applied:$/m.test(l)));
        expect(written.map((w) => [w.decision, w.families])).toEqual([
          ["meshed", own.applied.families.map((f) => f.family)],
        ]);
      } else {
        expect(a.apply).toBeUndefined();
        expect(a.lines).toEqual(own.lines);
        expect(a.summary).toMatchObject({ outcome: own.out.summary.outcome, reason: own.out.summary.reason });
        // A skipped pod's record comes just after the answer.
        await new Promise((r) => setImmediate(r));
        expect(written.map((w) => w.decision)).toEqual(own.records.map((w) => w.decision));
      }
    });
  }
});

describe("what the agent leaves to the plugin, and what it answers itself", () => {
  const base = cases().find((c) => c.name === "istio/annotations-absent")!;
  const ask = (p: ReturnType<typeof planner>["plan"], entry: Record<string, unknown>, env = envOf(base.pod, "c1")) =>
    p({ v: 1, version: "test", env, stdin: JSON.stringify(entry) });

  test("a pod the agent cannot look up (503) is declined; one the API does not have (404) fails with 106, no record", async () => {
    const p = planner(base);
    p.lookup.unavailable = "not in sync";
    // Said so, so that the plugin does not ask the agent for the pod again.
    expect(await ask(p.plan, base.entry)).toEqual({
      ok: false,
      why: expect.stringContaining("not in sync"),
      lookupFailed: true,
    });
    const empty = planner(undefined);
    const r = await ask(empty.plan, base.entry);
    if (!r.ok) throw new Error(r.why);
    expect({
      exitCode: r.answer.exitCode,
      code: JSON.parse(r.answer.stdout).code,
      record: r.answer.record,
      apply: r.answer.apply,
    }).toEqual({ exitCode: 1, code: 106, record: false, apply: undefined });
    expect(r.answer.summary).toMatchObject({ outcome: "failed", code: 106 });
    expect(empty.written).toEqual([]);
  });

  test("another UID than K8S_POD_UID fails with 106, whatever the lookup answered", async () => {
    const p = planner(base);
    const lie = {
      lookup: async () => ({ ok: true as const, pod: base.pod, namespace: null, source: "cache" as const }),
    };
    const liar = createAddPlanner({
      lookup: lie,
      stateDir: STATE,
      onLookup: () => {},
      writeRecord: async () => {},
      netnsProblem: () => undefined,
    });
    const env = {
      ...envOf(base.pod, "c2"),
      CNI_ARGS: `${envOf(base.pod, "c2").CNI_ARGS};K8S_POD_UID=11111111-2222-3333-4444-555555555555`,
    };
    const honest = await ask(p.plan, base.entry, env);
    const lied = await ask(liar, base.entry, env);
    if (!honest.ok || !lied.ok) throw new Error("declined");
    expect(JSON.parse(honest.answer.stdout)).toMatchObject({ code: 106 });
    // A lookup that answers whatever the UID: the planner checks the pod object itself.
    expect(JSON.parse(lied.answer.stdout)).toMatchObject({
      code: 106,
      details: expect.stringContaining("K8S_POD_UID"),
    });
    expect([honest.answer.apply, lied.answer.apply, honest.answer.record, lied.answer.record]).toEqual([
      undefined,
      undefined,
      false,
      false,
    ]);
  });

  test("the pod's addresses from its network namespace, another state_dir, a dry run: declined", async () => {
    const p = planner(base);
    const noIps = { ...base.entry, prevResult: { cniVersion: "1.0.0", interfaces: [{ name: "eth0" }], ips: [] } };
    expect(await ask(p.plan, noIps)).toEqual({
      ok: false,
      why: expect.stringContaining("the pod's network namespace"),
    });
    expect(await ask(p.plan, { ...base.entry, state_dir: "/elsewhere" })).toEqual({
      ok: false,
      why: expect.stringContaining("/elsewhere"),
    });
    expect(await ask(p.plan, base.entry, { ...envOf(base.pod, "c3"), CNI_COMMAND: "DEL" })).toEqual({
      ok: false,
      why: expect.stringContaining("only ADD"),
    });
    expect(p.written).toEqual([]);
  });

  test("a CNI_NETNS the agent does not find: declined before any lookup, no record", async () => {
    const plain = structuredClone(base.pod);
    plain.spec.containers = plain.spec.containers.filter((c: { name: string }) => c.name !== "istio-proxy");
    const seen: (string | undefined)[] = [];
    const gone = planner(
      { ...base, pod: plain },
      {
        netnsProblem: (p) => {
          seen.push(p);
          return `CNI_NETNS ${p} does not exist`;
        },
      },
    );
    expect(await ask(gone.plan, base.entry, envOf(plain, "c7"))).toEqual({
      ok: false,
      why: `CNI_NETNS ${NETNS} does not exist`,
    });
    expect(seen).toEqual([NETNS]);
    await new Promise((done) => setImmediate(done));
    expect([gone.written, gone.lookup.questions]).toEqual([[], []]);
  });

  test("a state folder at its bound of records: declined before any lookup, no record", async () => {
    const plain = structuredClone(base.pod);
    plain.spec.containers = plain.spec.containers.filter((c: { name: string }) => c.name !== "istio-proxy");
    const full = planner({ ...base, pod: plain }, { recordsFull: () => "the state folder holds 4096 records" });
    expect(await ask(full.plan, base.entry, envOf(plain, "c8"))).toEqual({
      ok: false,
      why: "the state folder holds 4096 records",
      recordsFull: true,
    });
    await new Promise((done) => setImmediate(done));
    expect([full.written, full.lookup.questions]).toEqual([[], []]);
  });

  test("a pod that gets no rules has its record written just after the answer, off the plugin's wait; a meshed pod's before it", async () => {
    const plain = structuredClone(base.pod);
    plain.spec.containers = plain.spec.containers.filter((c: { name: string }) => c.name !== "istio-proxy");
    const p = planner({ ...base, pod: plain });
    const r = await ask(p.plan, base.entry, envOf(plain, "c5"));
    if (!r.ok) throw new Error(r.why);
    expect([r.answer.summary.outcome, r.answer.record, p.written.length]).toEqual(["skipped", true, 0]);
    await new Promise((done) => setImmediate(done));
    expect(p.written.map((w) => [w.containerId, w.decision])).toEqual([["c5", "skipped"]]);
    const m = planner(base);
    const meshed = await ask(m.plan, base.entry, envOf(base.pod, "c6"));
    if (!meshed.ok) throw new Error(meshed.why);
    expect([meshed.answer.summary.outcome, m.written.map((w) => w.decision)]).toEqual(["meshed", ["meshed"]]);
  });

  test("the agent reports an answer without rules itself, when the plugin said when it started; one with rules is the plugin's", async () => {
    const plain = structuredClone(base.pod);
    plain.spec.containers = plain.spec.containers.filter((c: { name: string }) => c.name !== "istio-proxy");
    const startedMs = performance.timeOrigin + performance.now() - 3;
    const req = (pod: typeof base.pod, id: string) => ({
      v: 1 as const,
      version: "test",
      env: envOf(pod, id),
      stdin: JSON.stringify(base.entry),
      startedMs,
    });
    const skipped = await planner({ ...base, pod: plain }).plan(req(plain, "c7"));
    const meshed = await planner(base).plan(req(base.pod, "c8"));
    if (!skipped.ok || !meshed.ok) throw new Error("declined");
    expect(reportsItself(req(plain, "c7"), skipped.answer)).toBe(true);
    expect(reportsItself(req(base.pod, "c8"), meshed.answer)).toBe(false);
    const { startedMs: _s, ...older } = req(plain, "c7");
    expect(reportsItself(older, skipped.answer)).toBe(false);
    // Its duration runs from the plugin's start to the agent's answer.
    const r = buildAnsweredReport(req(plain, "c7"), skipped.answer, startedMs + 3.5, "test");
    expect(r).toMatchObject({
      command: "ADD",
      containerId: "c7",
      outcome: "skipped",
      durationMs: 3.5,
      time: new Date(startedMs).toISOString(),
      version: "test",
      lines: skipped.answer.lines.map((l) => l.replace(/\n$/, "")),
    });
    expect(r.pod).toMatchObject({ namespace: plain.metadata.namespace, name: plain.metadata.name });
    // The request's start: a time on this node's clock, not in the future, not an hour old.
    const body = { v: 1, version: "test", env: {}, stdin: "{}" };
    expect(parseAddRequest({ ...body, startedMs })).toMatchObject({ startedMs });
    for (const bad of [Date.now() + 120_000, Date.now() - 7_200_000, "1", Number.NaN, null]) {
      expect(typeof parseAddRequest({ ...body, startedMs: bad })).toBe("string");
    }
  });

  test("the agent's clock for a plugin's start follows the wall clock once it was stepped (NTP), so a stepped node still takes requests", () => {
    const before = epochNow();
    expect(Math.abs(before - Date.now())).toBeLessThan(5);
    const body = { v: 1, version: "test", env: {}, stdin: "{}" };
    // The wall clock ten minutes ahead of what the agent's monotonic clock says since its start.
    setSystemTime(new Date(Date.now() + 600_000));
    try {
      expect(Math.abs(epochNow() - Date.now())).toBeLessThan(5);
      expect(epochNow() - before).toBeGreaterThan(590_000);
      expect(parseAddRequest({ ...body, startedMs: Date.now() - 2 })).toMatchObject({ v: 1 });
    } finally {
      setSystemTime();
    }
  });

  test("a plugin that stopped waiting gets no plan and leaves no record: before the lookup, or during it", async () => {
    const p = planner(base);
    const gone = new AbortController();
    gone.abort();
    expect(
      await p.plan(
        { v: 1, version: "test", env: envOf(base.pod, "c4"), stdin: JSON.stringify(base.entry) },
        gone.signal,
      ),
    ).toEqual({ ok: false, why: expect.stringContaining("stopped waiting") });
    p.lookup.delayMs = 200;
    const late = new AbortController();
    const asked = p.plan(
      { v: 1, version: "test", env: envOf(base.pod, "c5"), stdin: JSON.stringify(base.entry) },
      late.signal,
    );
    setTimeout(() => late.abort(), 20);
    expect(await asked).toMatchObject({ ok: false, why: expect.stringContaining("aborted") });
    expect(p.written).toEqual([]);
  });

  test("a plugin of another version than the agent decides with its own rules", async () => {
    const lookup = new MemoryPodLookup();
    lookup.addPod(base.pod);
    const p = createAddPlanner({
      lookup,
      stateDir: STATE,
      onLookup: () => {},
      writeRecord: async () => {},
      version: "1.0",
      netnsProblem: () => undefined,
    });
    const req = (version: string) => ({
      v: 1 as const,
      version,
      env: envOf(base.pod, "c6"),
      stdin: JSON.stringify(base.entry),
    });
    expect(await p(req("2.0"))).toEqual({
      ok: false,
      why: expect.stringContaining("the plugin is 2.0, the agent 1.0"),
    });
    expect((await p(req("1.0"))).ok).toBe(true);
  });

  test("an invalid container ID is answered with code 4, in an answer the plugin takes", async () => {
    // The plugin's check of the answer (a newer one also reads CNI_ARGS).
    const takes = checkAddAnswer as (a: unknown, cniArgs?: string) => ReturnType<typeof checkAddAnswer>;
    for (const id of ["a/b", "-abc", "a\nmeshcni: forged", "é"]) {
      const env = envOf(base.pod, id);
      const r = await ask(planner(base).plan, base.entry, env);
      if (!r.ok) throw new Error(r.why);
      const got = { id, code: JSON.parse(r.answer.stdout).code, context: r.answer.context };
      expect(got).toEqual({ id, code: 4, context: "ADD" });
      const taken = typeof takes(JSON.parse(JSON.stringify(r.answer)), env.CNI_ARGS);
      expect({ id, taken }).toEqual({ id, taken: "object" });
    }
  });

  test("a bad config is answered with the plugin's own error, as the plugin would", async () => {
    const p = planner(base);
    const bad = { ...base.entry, timeout_seconds: "soon" };
    const r = await ask(p.plan, bad);
    if (!r.ok) throw new Error(r.why);
    const own = await pluginAdd(base, envOf(base.pod, "c1"), JSON.stringify(bad));
    expect({ stdout: r.answer.stdout, exitCode: r.answer.exitCode, lines: r.answer.lines }).toEqual({
      stdout: own.out.stdout,
      exitCode: 1,
      lines: own.lines,
    });
    expect(JSON.parse(r.answer.stdout).code).toBe(Code.InvalidConfig);
  });
});
