// The pure parts of `meshcnictl check` beyond the anchors: reading agents' /status documents
// (testdata/cli/check/status/, shaped as internal/agent/observe/status.ts builds them, one from an
// agent older than the watch cache and repair), judging each node, judging every pod the
// profile redirects against its node's records (testdata/cli/check/cluster-pods.json), the
// mesh's CNI mode in linkerd-config and istio-sidecar-injector, and the JSON rendering.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import {
  type AgentAnswer,
  agentPods,
  fetchAgentStatuses,
  parseAgentStatus,
  PROXY_CONCURRENCY,
} from "../../internal/cli/check/agents.ts";
import { judgeAgent } from "../../internal/cli/check/agents.ts";
import { judgeInitContainers, judgeMeshConfig } from "../../internal/cli/check/mesh.ts";
import { judgeMeshedPods, podStarted } from "../../internal/cli/check/pods.ts";
import { confFromConfigMap, passed, renderCheckJson, renderCheckReport } from "../../internal/cli/check/check.ts";
import type { CheckResult } from "../../internal/cli/check/result.ts";
import { repoPath } from "../support/golden.ts";

type Obj = Record<string, any>;
const read = (name: string): Obj => JSON.parse(readFileSync(repoPath("testdata/cli/check", name), "utf8"));
const statusA = () => read("status/node-a.json");
const statusB = () => read("status/node-b-bypassing.json");
const statusC = () => read("status/node-c-old-agent.json");
const podList = () => read("cluster-pods.json");

const agent = (node: string, pod = `meshcni-node-${node}`) => ({ pod, node, port: 9813 });
function answer(node: string, doc: Obj): AgentAnswer {
  const view = parseAgentStatus(doc);
  if (!view) throw new Error("not a status document");
  return { agent: agent(node), view };
}
const linkerdConf = (extra: Obj = {}) =>
  parsePluginConf(
    JSON.stringify({
      cniVersion: "1.1.0",
      name: "meshcni",
      type: "meshcni",
      mesh: "linkerd",
      kubernetes: { pod_namespace: "meshcni", ...extra },
    }),
  );
const byName = (rs: CheckResult[], name: string) => rs.find((r) => r.name === name);

describe("reading /status", () => {
  test("many agents are asked a few at a time, answers in their order", async () => {
    let inFlight = 0;
    let most = 0;
    const api = {
      server: "https://API",
      post: async () => ({ status: 405, body: "" }),
      get: async (path: string) => {
        most = Math.max(most, ++inFlight);
        await Bun.sleep(1);
        inFlight--;
        return { status: 200, body: JSON.stringify({ node: path.split("/")[6]!.split(":")[0] }) };
      },
    };
    const agents = Array.from({ length: 50 }, (_, i) => ({ pod: `p${i}`, node: `n${i}`, port: 9813 }));
    const answers = await fetchAgentStatuses(api, "meshcni", agents);
    expect(answers.map((a) => ("view" in a ? a.view.node : a.unreachable))).toEqual(agents.map((a) => a.pod));
    expect(most).toBe(PROXY_CONCURRENCY);
  });

  test("a current agent: chain, binary, cache in sync, records, repair", () => {
    const v = parseAgentStatus(statusA())!;
    expect(v.version).toBe("0.1.0");
    expect(v.chain).toEqual({
      current: true,
      path: "/host/etc/cni/net.d/10-calico.conflist",
      file: "10-calico.conflist",
    });
    expect(v.cache).toEqual({ kind: "synced", objects: 23 });
    expect(v.pods?.containers.map((c) => `${c.namespace}/${c.name}:${c.decision}`)).toEqual([
      "emojivoto/web-5b8b6f7c9d-x2x7q:meshed",
      "emojivoto/emoji-6d8f9c7b5-4kq2p:meshed",
      "default/busybox:skipped",
    ]);
    expect(v.repair).toEqual({ mode: "evict", active: true, bypassing: [], unverified: [], repaired: 2, refusals: 0 });
    expect(v.pods?.containers[0]).toMatchObject({
      containerId: expect.stringMatching(/^9f1c3e2a/),
      time: "2026-11-24T09:12:03.118Z",
    });
  });

  test("an old agent: no repair member, no watch cache", () => {
    const v = parseAgentStatus(statusC())!;
    expect(v.repair).toBeUndefined();
    expect(v.cache).toEqual({ kind: "none", note: "no watch cache: the agent answers each lookup with its own GET" });
    expect(v.binary).toEqual({
      current: false,
      path: "/host/opt/cni/bin/meshcni",
      problem: "/host/opt/cni/bin/meshcni differs from the image's plugin",
    });
  });

  test("odd documents: not an object, members of the wrong type, a cache still listing", () => {
    expect(parseAgentStatus([1, 2])).toBeUndefined();
    expect(parseAgentStatus("ok")).toBeUndefined();
    const v = parseAgentStatus({
      chain: "yes",
      pods: { containers: [{ name: 1 }, { namespace: "a", name: "b", decision: "meshed" }] },
      repair: { bypassing: "none" },
    })!;
    expect(v.chain).toBeUndefined();
    expect(v.pods?.containers).toEqual([{ namespace: "a", name: "b", decision: "meshed", reason: "" }]);
    expect(v.repair).toEqual({ mode: "unknown", active: false, bypassing: [], repaired: 0 });
    const syncing = statusA();
    syncing.cache.pods.synced = false;
    syncing.cache.pods.lastError = "watch: 403 Forbidden";
    expect(parseAgentStatus(syncing)!.cache).toEqual({
      kind: "syncing",
      detail: "pods not in sync (last error: watch: 403 Forbidden)",
    });
  });

  test("the meshcni-node pods: node, health port, whether they can answer", () => {
    const mk = (name: string, node: string | undefined, phase: string, port = true) => ({
      metadata: { name },
      spec: {
        ...(node ? { nodeName: node } : {}),
        containers: [{ name: "install-cni", ...(port ? { ports: [{ name: "health", containerPort: 9813 }] } : {}) }],
      },
      status: { phase },
    });
    expect(
      agentPods({
        items: [
          mk("p2", "node-b", "Pending"),
          mk("p1", "node-a", "Running"),
          mk("p3", undefined, "Pending"),
          mk("p4", "node-c", "Running", false),
        ],
      }),
    ).toEqual([
      { pod: "p3", node: "", port: 9813, notRunning: "not scheduled to a node yet" },
      { pod: "p1", node: "node-a", port: 9813 },
      { pod: "p2", node: "node-b", port: 9813, notRunning: "the pod is Pending" },
      { pod: "p4", node: "node-c" },
    ]);
  });
});

describe("judging a node", () => {
  test("verification: rules written back pass; rules found missing and not written back fail, naming each pod; no line for an agent that does not verify", () => {
    const name = "meshed pods' rules are in their namespaces";
    expect(byName(judgeAgent(answer("node-a", statusA()), "0.1.0", "meshcni"), name)).toBeUndefined();
    const verify = (findings: Obj[]) => ({
      periodSeconds: 60,
      mode: "in-place",
      runs: 220,
      missing: 1,
      rewritten: 1,
      failures: 0,
      unreachable: [],
      findings,
    });
    const written = { namespace: "emojivoto", name: "web-1", uid: "u", via: "record", verdict: "missing" };
    const ok = byName(
      judgeAgent(
        answer("node-a", { ...statusA(), verify: verify([{ ...written, why: "x", action: "rewritten" }]) }),
        "0.1.0",
        "meshcni",
      ),
      name,
    )!;
    expect([ok.ok, ok.detail]).toEqual([true, "checked every 60 s, 220 checks, 1 written back in place"]);
    const bad = byName(
      judgeAgent(
        answer("node-a", {
          ...statusA(),
          verify: verify([{ ...written, why: "nft table ip meshcni is missing", action: "reported" }]),
        }),
        "0.1.0",
        "meshcni",
      ),
      name,
    )!;
    expect(bad.ok).toBe(false);
    expect(bad.detail).toContain("emojivoto/web-1: nft table ip meshcni is missing (reported)");
    expect(bad.hint).toContain("--repair in-place");
  });

  test("a healthy node passes every check", () => {
    const rs = judgeAgent(answer("node-a", statusA()), "0.1.0", "meshcni");
    expect(rs.every((r) => r.ok)).toBe(true);
    expect(rs.map((r) => r.category)).toEqual(Array(rs.length).fill("node node-a"));
    expect(byName(rs, "no meshed pod bypasses the mesh")?.detail).toBe("repair evict, 2 repaired");
    expect(byName(rs, "every meshed pod has a record of meshcni's ADD")?.detail).toBe("3 records on this node");
    expect(byName(rs, "pods the plugin handled on this node")?.detail).toBe("3 pods: 2 meshed, 1 skipped");
  });

  test("bypassing pods with repair off fail the node and name each pod", () => {
    const r = byName(judgeAgent(answer("node-b", statusB()), "0.1.0", "meshcni"), "no meshed pod bypasses the mesh")!;
    expect(r.ok).toBe(false);
    expect(r.warning).toBeUndefined();
    expect(r.detail).toBe(
      "1 pod runs without meshcni's rules (repair off, 0 repaired):\nemojivoto/voting-7c9f8b6d4-mz5rw: " +
        "its linkerd-network-validator init container's latest run failed (exit code 95, Error: Failed to verify " +
        "the redirect: timed out after 10s): the redirect was not in place (reported since 2026-11-24T10:01:58.000Z)",
    );
    expect(r.hint).toContain("--repair in-place or evict");
    expect(
      byName(
        judgeAgent(answer("node-b", statusB()), "0.1.0", "meshcni"),
        "every meshed pod has a record of meshcni's ADD",
      ),
    ).toMatchObject({ ok: true, detail: "1 record on this node" });
  });

  test("unverified pods (no record of the ADD of their sandbox) are a warning naming each", () => {
    const doc = statusA();
    doc.repair.unverified = [
      {
        namespace: "emojivoto",
        name: "web-5b8b6f7c9d-n4v2k",
        uid: "d9e8f7a6-b5c4-4d3e-9f2a-1b0c9d8e7f6a",
        why: "no record of an ADD for its sandbox on this node (PodReadyToStartContainers is True)",
      },
    ];
    const rs = judgeAgent(answer("node-a", doc), "0.1.0", "meshcni");
    expect(rs.filter((r) => !r.ok).map((r) => [r.name, r.warning])).toEqual([
      ["every meshed pod has a record of meshcni's ADD", true],
    ]);
    expect(byName(rs, "every meshed pod has a record of meshcni's ADD")?.detail).toBe(
      "1 pod unverified (reported, never removed for that):\nemojivoto/web-5b8b6f7c9d-n4v2k: " +
        "no record of an ADD for its sandbox on this node (PodReadyToStartContainers is True)",
    );
  });

  test("an eviction a PodDisruptionBudget refused: a failure naming the server's message and the next try", () => {
    const doc = statusB();
    doc.repair.mode = "evict";
    doc.repair.refusals = 2;
    doc.repair.bypassing[0].action = "refused";
    doc.repair.bypassing[0].refusal = {
      message: "Cannot evict pod as it would violate the pod's disruption budget.",
      retryAt: "2026-11-24T10:04:00.000Z",
    };
    const r = byName(judgeAgent(answer("node-b", doc), "0.1.0", "meshcni"), "no meshed pod bypasses the mesh")!;
    expect([r.ok, r.warning]).toEqual([false, undefined]);
    expect(r.detail).toStartWith("1 pod runs without meshcni's rules (repair evict, 0 repaired, 2 evictions refused):");
    expect(r.detail).toEndWith(
      "(refused since 2026-11-24T10:01:58.000Z; refused: Cannot evict pod as it would " +
        "violate the pod's disruption budget. (next try 2026-11-24T10:04:00.000Z))",
    );
    expect(r.hint).toContain("kubectl get pdb -A");
  });

  test("pods the agent just evicted or deleted are a warning, not a failure", () => {
    for (const [mode, action] of [
      ["evict", "evicted"],
      ["delete", "deleted"],
    ]) {
      const doc = statusB();
      doc.repair.mode = mode;
      doc.repair.bypassing[0].action = action;
      const r = byName(judgeAgent(answer("node-b", doc), "0.1.0", "meshcni"), "no meshed pod bypasses the mesh")!;
      expect([r.ok, r.warning]).toEqual([false, true]);
      expect(r.detail).toStartWith(`repair ${mode}, 0 repaired; just ${action}, their controllers recreate them:`);
    }
  });

  test("an old agent: warnings for what it cannot say, a failure for its stale binary", () => {
    const rs = judgeAgent(answer("node-c", statusC()), "0.1.0", "meshcni");
    expect(rs.filter((r) => !r.ok).map((r) => [r.name, r.warning ?? false])).toEqual([
      ["the plugin binary on the node is current", false],
      ["the plugin's kubeconfig holds a current token of its own account", true],
      ["the node runs the same meshcni version as meshcnictl", true],
      ["the agent's watch cache is in sync", true],
      ["no meshed pod bypasses the mesh", true],
    ]);
    expect(byName(rs, "the node runs the same meshcni version as meshcnictl")?.detail).toBe(
      "node: meshcni 0.0.9, meshcnictl: 0.1.0",
    );
  });

  test("the plugin's token: its account and expiry when current; an expired one fails the node, saying why", () => {
    expect(
      byName(
        judgeAgent(answer("node-a", statusA()), "0.1.0", "meshcni"),
        "the plugin's kubeconfig holds a current token of its own account",
      )?.detail,
    ).toBe("meshcni/meshcni-plugin, valid until 2026-11-25T09:12:40Z");
    const doc = statusA();
    const problem =
      "the plugin's token in /host/etc/cni/net.d/ZZZ-meshcni-kubeconfig (meshcni/meshcni-plugin) " +
      "expired at 2026-11-25T09:12:40Z: cannot get a token of meshcni/meshcni-plugin from " +
      "https://10.96.0.1:443: the agent may not create tokens for meshcni/meshcni-plugin (403); " +
      "the plugin's fallback fails closed until the agent gets a new one";
    doc.kubeconfig = { ...doc.kubeconfig, current: false, problem, token: { ...doc.kubeconfig.token, expired: true } };
    const r = byName(
      judgeAgent(answer("node-a", doc), "0.1.0", "meshcni"),
      "the plugin's kubeconfig holds a current token of its own account",
    )!;
    expect([r.ok, r.warning, r.detail]).toEqual([false, undefined, problem]);
    expect(r.hint).toContain("kubectl -n meshcni logs meshcni-node-node-a");
    expect(parseAgentStatus(doc)!.kubeconfig?.token).toEqual({
      account: "meshcni/meshcni-plugin",
      expiresAt: "2026-11-25T09:12:40Z",
      expired: true,
    });
  });

  test("an unreachable agent is one failure saying why", () => {
    const rs = judgeAgent(
      {
        agent: agent("node-d"),
        unreachable:
          "the pod proxy answered 503: error trying to reach service: " +
          "dial tcp 10.244.3.4:9813: connect: connection refused",
      },
      "0.1.0",
      "meshcni",
    );
    expect(rs).toHaveLength(1);
    expect(rs[0]).toMatchObject({ ok: false, node: "node-d", name: "the agent answers /status" });
    expect(rs[0]!.detail).toContain("connection refused");
    expect(rs[0]!.hint).toBe(
      "kubectl -n meshcni describe pod meshcni-node-node-d; kubectl -n meshcni logs meshcni-node-node-d",
    );
    const denied = judgeAgent(
      {
        agent: agent("node-d"),
        unreachable:
          'the pod proxy answered 403: pods "meshcni-node-node-d" ' +
          'is forbidden: User "dev" cannot get resource "pods/proxy"',
      },
      "0.1.0",
      "meshcni",
    );
    expect(denied[0]!.hint).toBe(
      "your kubeconfig's user needs get on pods/proxy in namespace meshcni to read the agents' /status",
    );
  });
});

describe("judging the pods the profile redirects", () => {
  const answers = () => [answer("node-a", statusA()), answer("node-b", statusB()), answer("node-c", statusC())];

  test("before repair: no record (unverified, a warning), listed as bypassing, linkerd-init in CNI mode, a node without agent", () => {
    const j = judgeMeshedPods(linkerdConf(), podList().items, answers(), true);
    expect(j.findings.map((f) => [f.kind, `${f.namespace}/${f.name}`, f.node])).toEqual([
      ["unverified", "emojivoto/web-5b8b6f7c9d-n4v2k", "node-a"],
      ["init", "emojivoto/legacy-api-5d4c3b2a1-7tq9x", "node-a"],
      ["bypassing", "emojivoto/voting-7c9f8b6d4-mz5rw", "node-b"],
    ]);
    expect(j.findings[0]!.reason).toBe(
      "unverified: no record of an ADD for its sandbox on its node (it " +
        "started before meshcni was chained, or the records were lost)",
    );
    expect(j.results.find((r) => r.pod?.name === "web-5b8b6f7c9d-n4v2k")).toMatchObject({
      ok: false,
      warning: true,
      name: "pod emojivoto/web-5b8b6f7c9d-n4v2k on node-a has a record of meshcni's ADD",
    });
    expect(j.findings[2]!.reason).toBe(
      "the agent on its node lists it as bypassing: its linkerd-network-validator " +
        "init container's latest run failed (exit code 95, Error: Failed to verify " +
        "the redirect: timed out after 10s): the redirect was not in place (reported)",
    );
    // web x2x7q, emoji (native sidecar), 8jh4t, n4v2k, voting, vote-bot and the node-d pod; not
    // legacy-api (linkerd-init), busybox (no proxy), the pending pod, the hostNetwork pod, meshcni's own.
    expect(j.considered).toBe(7);
    const unchecked = j.results.find((r) => r.name === "pods on node node-d checked")!;
    expect([unchecked.ok, unchecked.warning]).toEqual([false, true]);
    expect(unchecked.detail).toBe(
      "no meshcni-node pod runs on node node-d; not checked: emojivoto/web-5b8b6f7c9d-zz91c",
    );
    expect(passed(j.results)).toBe(false);
  });

  test("linkerd-init pods are not listed while the mesh's CNI mode is off (the mesh check says so)", () => {
    const j = judgeMeshedPods(linkerdConf(), podList().items, answers(), false);
    expect(j.findings.map((f) => f.kind)).toEqual(["unverified", "bypassing"]);
  });

  test("after repair: the recreated pods have records, none is listed", () => {
    const pods = podList().items.filter(
      (p: Obj) => !["web-5b8b6f7c9d-n4v2k", "voting-7c9f8b6d4-mz5rw"].includes(p.metadata.name),
    );
    const recreated = structuredClone(pods.find((p: Obj) => p.metadata.name === "web-5b8b6f7c9d-x2x7q"));
    recreated.metadata = {
      ...recreated.metadata,
      name: "web-5b8b6f7c9d-q8r7s",
      uid: "99999999-8888-4777-8666-555555555555",
    };
    recreated.spec.nodeName = "node-b";
    const b = statusB();
    b.repair = { mode: "off", active: true, bypassing: [], unverified: [], repaired: 0, refusals: 0 };
    b.pods.containers.push({
      namespace: "emojivoto",
      name: "web-5b8b6f7c9d-q8r7s",
      uid: "99999999-8888-4777-8666-555555555555",
      containerId: "c0ffee",
      decision: "meshed",
      reason: "the pod runs linkerd-proxy",
      time: "2026-11-24T10:05:00.000Z",
    });
    const j = judgeMeshedPods(
      linkerdConf(),
      [...pods, recreated],
      [answer("node-a", statusA()), answer("node-b", b), answer("node-c", statusC())],
      true,
    );
    expect(j.findings.filter((f) => f.kind !== "init")).toEqual([]);
    expect(j.results[0]).toMatchObject({
      ok: true,
      name: "every pod the profile redirects runs with meshcni's rules",
      detail: "5 pods on 3 nodes; 1 not checked, see below",
    });
    expect(passed(j.results)).toBe(true);
  });

  test("a record for another pod of the same name (another UID) does not count", () => {
    const a = statusA();
    a.pods.containers[0].uid = "00000000-0000-4000-8000-000000000000";
    const j = judgeMeshedPods(linkerdConf(), podList().items, [answer("node-a", a)], true);
    expect(j.findings.find((f) => f.name === "web-5b8b6f7c9d-x2x7q")?.kind).toBe("unverified");
  });

  test("a record of an earlier sandbox does not cover the current one (PodReadyToStartContainers' transition)", () => {
    const pods = podList().items;
    const web = pods.find((p: Obj) => p.metadata.name === "web-5b8b6f7c9d-x2x7q");
    web.status.conditions[0].lastTransitionTime = "2026-11-24T11:00:00Z"; // its record's ADD: 09:12:03
    const j = judgeMeshedPods(linkerdConf(), pods, [answer("node-a", statusA())], true);
    expect(j.findings.find((f) => f.name === "web-5b8b6f7c9d-x2x7q")).toMatchObject({
      kind: "unverified",
      reason:
        "unverified: the plugin's newest record of it on its node " +
        "(ADD at 2026-11-24T09:12:03.118Z) is of an earlier sandbox",
    });
    web.status.conditions[0].lastTransitionTime = "2026-11-24T09:12:04Z";
    expect(
      judgeMeshedPods(linkerdConf(), pods, [answer("node-a", statusA())], true).findings.map((f) => f.name),
    ).not.toContain("web-5b8b6f7c9d-x2x7q");
  });

  test("a record saying the plugin skipped the pod is named", () => {
    const a = statusA();
    a.pods.containers[0].decision = "skipped";
    a.pods.containers[0].reason = "namespace emojivoto is excluded";
    const j = judgeMeshedPods(linkerdConf(), podList().items, [answer("node-a", a)], true);
    expect(j.findings.find((f) => f.name === "web-5b8b6f7c9d-x2x7q")?.reason).toBe(
      "the plugin skipped it: namespace emojivoto is excluded",
    );
  });

  test("a pod with a record whose mesh validator's latest run failed (95) is named; an old failure before a success is not", () => {
    const pods = podList().items;
    const web = pods.find((p: Obj) => p.metadata.name === "web-5b8b6f7c9d-x2x7q");
    web.spec.initContainers = [{ name: "linkerd-network-validator" }];
    const failed = {
      terminated: { exitCode: 95, reason: "Error", message: "failed to connect to 1.1.1.1:20001: timed out\nmore" },
    };
    web.status.initContainerStatuses = [
      {
        name: "linkerd-network-validator",
        ready: false,
        state: { waiting: { reason: "CrashLoopBackOff" } },
        lastState: failed,
      },
    ];
    const j = judgeMeshedPods(linkerdConf(), pods, [answer("node-a", statusA())], true);
    expect(j.findings.find((f) => f.name === "web-5b8b6f7c9d-x2x7q")).toMatchObject({
      kind: "bypassing",
      reason:
        "its linkerd-network-validator init container's latest run failed (exit code 95, " +
        "Error: failed to connect to 1.1.1.1:20001: timed out): the redirect was not in place",
    });
    web.status.initContainerStatuses[0] = {
      name: "linkerd-network-validator",
      state: { terminated: { exitCode: 0, reason: "Completed" } },
      lastState: failed,
    };
    expect(
      judgeMeshedPods(linkerdConf(), pods, [answer("node-a", statusA())], true).findings.map((f) => f.name),
    ).not.toContain("web-5b8b6f7c9d-x2x7q");
  });

  test("excluded namespaces and an unreachable agent", () => {
    const j = judgeMeshedPods(linkerdConf({ exclude_namespaces: ["emojivoto"] }), podList().items, answers(), true);
    expect([j.findings, j.considered]).toEqual([[], 0]);
    const k = judgeMeshedPods(
      linkerdConf(),
      podList().items,
      [answer("node-a", statusA()), { agent: agent("node-b"), unreachable: "timed out" }],
      true,
    );
    expect(k.results.find((r) => r.name === "pods on node node-b checked")?.detail).toBe(
      "the agent on node node-b does not answer (timed out); not checked: " +
        "emojivoto/web-5b8b6f7c9d-8jh4t, emojivoto/voting-7c9f8b6d4-mz5rw",
    );
  });

  test("started means a sandbox: a started container, PodReadyToStartContainers, or Running", () => {
    expect(podStarted({ status: { phase: "Pending" } })).toBe(false);
    expect(
      podStarted({ status: { phase: "Pending", conditions: [{ type: "PodReadyToStartContainers", status: "True" }] } }),
    ).toBe(true);
    expect(podStarted({ status: { phase: "Pending", initContainerStatuses: [{ state: { running: {} } }] } })).toBe(
      true,
    );
    expect(
      podStarted({
        status: { phase: "Pending", containerStatuses: [{ state: { waiting: { reason: "ContainerCreating" } } }] },
      }),
    ).toBe(false);
  });

  test("the ConfigMap's entry carries meshcni's namespace, so its own pods pass", () => {
    const r = confFromConfigMap(
      { data: { "plugin-config.json": JSON.stringify({ name: "meshcni", type: "meshcni", mesh: "istio" }) } },
      "mesh-system",
    );
    expect("conf" in r && [r.conf.mesh, r.conf.kubernetes.pod_namespace]).toEqual(["istio", "mesh-system"]);
  });
});

describe("the mesh's side", () => {
  const cm = (values: string) => ({ status: 200, body: JSON.stringify({ kind: "ConfigMap", data: { values } }) });

  test("linkerd-config: cniEnabled true, false, absent, and no Linkerd", () => {
    expect(judgeMeshConfig("linkerd", cm("cniEnabled: true\nclusterDomain: cluster.local\n"))).toMatchObject({
      cniMode: true,
      result: { ok: true },
    });
    const off = judgeMeshConfig("linkerd", cm("cniEnabled: false\n"));
    expect(off.cniMode).toBe(false);
    expect(off.result).toMatchObject({ ok: false, name: "Linkerd injects pods for CNI mode" });
    expect(off.result.warning).toBeUndefined();
    expect(off.result.detail).toContain("Linkerd still injects linkerd-init into every meshed pod");
    expect(off.result.hint).toContain("--linkerd-cni-enabled");
    expect(judgeMeshConfig("linkerd", cm("clusterDomain: cluster.local\n")).result.detail).toStartWith(
      "cniEnabled is not set in ConfigMap linkerd/linkerd-config:",
    );
    const none = judgeMeshConfig("linkerd", { status: 404, body: "{}" });
    expect([none.cniMode, none.result.ok, none.result.warning]).toEqual([undefined, false, true]);
  });

  test("istio-sidecar-injector: istio_cni.enabled in its values JSON", () => {
    expect(
      judgeMeshConfig("istio", cm(JSON.stringify({ istio_cni: { enabled: true, chained: true }, global: {} }))).cniMode,
    ).toBe(true);
    const off = judgeMeshConfig("istio", cm(JSON.stringify({ istio_cni: { enabled: false } })));
    expect(off.result).toMatchObject({ ok: false, name: "Istio injects pods for CNI mode" });
    expect(off.result.detail).toContain("Istio still injects istio-init");
    expect(judgeMeshConfig("istio", cm("{not json")).result).toMatchObject({ ok: false, warning: true });
  });

  test("a warning for each pod still carrying the mesh's init container", () => {
    const rs = judgeInitContainers("linkerd", podList());
    expect(rs.map((r) => [r.name, r.warning])).toEqual([
      ["pod emojivoto/legacy-api-5d4c3b2a1-7tq9x still carries linkerd-init", true],
    ]);
    expect(judgeInitContainers("istio", podList())).toEqual([
      { category: "mesh", name: "no pod carries istio-init", ok: true, detail: "12 pods" },
    ]);
  });
});

describe("rendering", () => {
  const rs: CheckResult[] = [
    { category: "a", name: "fine", ok: true, detail: "3 pods" },
    { category: "a", name: "so-so", ok: false, warning: true, detail: "x", hint: "y", node: "node-a" },
    {
      category: "b",
      name: "broken",
      ok: false,
      detail: "line 1\nline 2",
      pod: { namespace: "n", name: "p", node: "node-b" },
    },
  ];

  test("text: ✓, ‼ and ×, and a status line counting warnings", () => {
    expect(renderCheckReport(rs)).toBe(
      [
        "a",
        "-",
        "✓ fine (3 pods)",
        "‼ so-so",
        "    x",
        "    hint: y",
        "",
        "b",
        "-",
        "× broken",
        "    line 1",
        "    line 2",
        "",
        "Status check results are × (1 of 3 checks failed, 1 warning)",
        "",
      ].join("\n"),
    );
    expect(passed(rs.slice(0, 2))).toBe(true);
  });

  test("json: one document with a summary and every check", () => {
    expect(JSON.parse(renderCheckJson(rs))).toEqual({
      success: false,
      summary: { checks: 3, failed: 1, warnings: 1 },
      checks: [
        { category: "a", name: "fine", result: "ok", detail: "3 pods" },
        { category: "a", name: "so-so", result: "warning", detail: "x", hint: "y", node: "node-a" },
        {
          category: "b",
          name: "broken",
          result: "error",
          detail: "line 1\nline 2",
          pod: { namespace: "n", name: "p", node: "node-b" },
        },
      ],
    });
  });
});
