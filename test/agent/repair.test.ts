// Repair's planner (internal/agent/repair.ts), table-driven over pods shaped as the API server
// sends them: every "never" case keeps the pod, whatever else is true of it (a false repair
// deletes a healthy pod); the bypassing cases are found with their reason; the agent waits for
// its cache, the chain and the grace period; the rate limit holds; off only reports.
import { describe, expect, test } from "bun:test";
import { confirmMs, newRepairMemory, noteDeletions, planRepair, type RepairConfig, type RepairInput, type RepairMemory, judgePod, repairStatus } from "../../internal/agent/repair.ts";
import type { PodRecord } from "../../internal/agent/protocol.ts";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import { istioProfile } from "../../internal/mesh/istio.ts";
import { linkerdProfile } from "../../internal/mesh/linkerd.ts";

const T0 = Date.parse("2026-11-24T10:00:00Z");
const iso = (ms: number) => new Date(ms).toISOString();
const CHAIN = T0 + 60_000; // the chain is in place from here
const NOW = CHAIN + 45_000; // past the 30 s grace period

const conf = (mesh: "linkerd" | "istio" = "linkerd") => parsePluginConf(JSON.stringify({
  cniVersion: "1.0.0", name: "k8s-pod-network", type: "meshcni", mesh,
  kubernetes: { kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig", exclude_namespaces: ["kube-system", "linkerd"], pod_namespace: "meshcni" },
}));

const CFG: RepairConfig = { mode: "delete", node: "node-a", conf: conf(), profile: linkerdProfile, daemonSetName: "meshcni-node", graceMs: 30_000, ratePerMinute: 10 };

let uidN = 0;
let first0: Record<string, unknown> | undefined;
/** One fixed pod (same UID on every call). */
const pod0 = () => (first0 ??= meshedPod("web-0"));
/** A Linkerd-injected pod in CNI mode (linkerd-network-validator, then linkerd-proxy as a native sidecar), running on node-a. */
function meshedPod(name: string, over: { ns?: string; meta?: Record<string, unknown>; spec?: Record<string, unknown>; status?: Record<string, unknown>; startedAt?: number; init?: unknown[] } = {}): Record<string, unknown> {
  const uid = `7d0c${String(++uidN).padStart(4, "0")}-1111-4222-8333-${name.padEnd(12, "0").slice(0, 12).replace(/[^0-9a-f]/g, "a")}`;
  const started = over.startedAt ?? T0;
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name, namespace: over.ns ?? "emojivoto", uid, resourceVersion: "4711",
      annotations: { "linkerd.io/inject": "enabled", "linkerd.io/proxy-version": "edge-25.1.1" },
      labels: { app: name.replace(/-[a-z0-9]+$/, ""), "linkerd.io/control-plane-ns": "linkerd" },
      ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: `${name}-rs`, uid: "aaaa", controller: true }],
      ...over.meta,
    },
    spec: {
      nodeName: "node-a",
      initContainers: over.init ?? [
        { name: "linkerd-network-validator", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1" },
        { name: "linkerd-proxy", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1", restartPolicy: "Always" },
      ],
      containers: [{ name: "web", image: "buoyantio/emojivoto-web:v11" }],
      ...over.spec,
    },
    status: {
      phase: "Running",
      startTime: iso(started),
      conditions: [
        { type: "PodReadyToStartContainers", status: "True", lastTransitionTime: iso(started + 1000) },
        { type: "Ready", status: "True", lastTransitionTime: iso(started + 5000) },
      ],
      initContainerStatuses: [
        { name: "linkerd-network-validator", ready: true, restartCount: 0, state: { terminated: { exitCode: 0, reason: "Completed" } }, containerID: "containerd://1" },
        { name: "linkerd-proxy", ready: true, restartCount: 0, started: true, state: { running: { startedAt: iso(started + 2000) } }, containerID: "containerd://2" },
      ],
      containerStatuses: [{ name: "web", ready: true, restartCount: 0, started: true, state: { running: { startedAt: iso(started + 3000) } }, containerID: "containerd://3" }],
      ...over.status,
    },
  };
}

const uidOf = (p: Record<string, unknown>) => (p.metadata as { uid: string }).uid;
const record = (p: Record<string, unknown>, over: Partial<PodRecord> = {}): PodRecord => {
  const m = p.metadata as { name: string; namespace: string; uid: string };
  return { v: 1, containerId: `c-${m.name}`, namespace: m.namespace, name: m.name, uid: m.uid, decision: "meshed", reason: "runs linkerd-proxy", time: iso(T0), ...over };
};

const input = (pods: unknown[], over: Partial<RepairInput> = {}): RepairInput => ({ pods, records: [], synced: true, chainSince: CHAIN, recordsSince: 0, now: NOW, ...over });
/** The memory of a round confirmMs earlier that saw the same pods bypassing (a deletion needs that). */
const confirmed = (cfg: RepairConfig, inp: RepairInput): RepairMemory => planRepair(cfg, newRepairMemory(), { ...inp, now: inp.now - confirmMs(cfg) }).memory;
const SEEN = iso(NOW - 10_000);
const judge = (pod: unknown, over: Partial<RepairInput> = {}, cfg = CFG) => judgePod(cfg, pod, input([pod], over));

describe("a pod that started before meshcni was chained", () => {
  test("no record, sandbox made, redirected by the profile: bypassing, deleted", () => {
    const pod = meshedPod("web-1");
    expect(judge(pod)).toEqual({ kind: "bypassing", reason: "started before meshcni was chained (no record of an ADD; PodReadyToStartContainers is True)" });
    const plan = planRepair(CFG, confirmed(CFG, input([pod])), input([pod]));
    expect(plan.active).toBe(true);
    expect(plan.delete).toEqual([{ namespace: "emojivoto", name: "web-1", uid: uidOf(pod), reason: expect.stringContaining("started before meshcni was chained") }]);
    expect(plan.bypassing).toEqual([{ namespace: "emojivoto", name: "web-1", uid: uidOf(pod), reason: expect.any(String), action: "deleted", since: SEEN }]);
  });

  test("seen bypassing for less than the confirmation time (10 s, at most the grace period): waiting", () => {
    const first = planRepair(CFG, newRepairMemory(), input([pod0()]));
    expect(first.delete).toEqual([]);
    expect(first.bypassing.map((b) => [b.action, b.since])).toEqual([["waiting", iso(NOW)]]);
    const later = planRepair(CFG, first.memory, input([pod0()], { now: NOW + 9_999 }));
    expect(later.delete).toEqual([]);
    expect(planRepair(CFG, first.memory, input([pod0()], { now: NOW + 10_000 })).delete.length).toBe(1);
  });

  const sandboxes: [string, Record<string, unknown>][] = [
    ["only PodReadyToStartContainers True", { phase: "Pending", initContainerStatuses: [], containerStatuses: [], conditions: [{ type: "PodReadyToStartContainers", status: "True" }] }],
    ["only phase Running", { phase: "Running", initContainerStatuses: [], containerStatuses: [], conditions: [] }],
    ["a container that terminated", { phase: "Pending", conditions: [], containerStatuses: [], initContainerStatuses: [{ name: "linkerd-network-validator", state: { terminated: { exitCode: 0 } } }] }],
  ];
  for (const [what, status] of sandboxes) {
    test(`sandbox evidence: ${what}`, () => {
      expect(judge(meshedPod("web-2", { status })).kind).toBe("bypassing");
    });
  }

  test("a sandbox being made again (PodReadyToStartContainers False, though phase Running and containers ran): kept", () => {
    const pod = meshedPod("web-4", { status: { conditions: [{ type: "PodReadyToStartContainers", status: "False" }] } });
    expect(judge(pod)).toEqual({ kind: "ignore", why: "no sandbox yet (the plugin runs when it is made)" });
  });

  test("no sandbox yet (Pending, nothing ran, PodReadyToStartContainers False): kept, the plugin runs when it is made", () => {
    const pod = meshedPod("web-3", { status: { phase: "Pending", initContainerStatuses: [{ name: "linkerd-network-validator", state: { waiting: { reason: "PodInitializing" } } }], containerStatuses: [], conditions: [{ type: "PodReadyToStartContainers", status: "False" }] } });
    expect(judge(pod)).toEqual({ kind: "ignore", why: "no sandbox yet (the plugin runs when it is made)" });
  });

  test("Istio: a sidecar-injected pod with istio-validation, no record: bypassing", () => {
    const pod = meshedPod("reviews-v1", {
      meta: { annotations: { "sidecar.istio.io/status": '{"containers":["istio-proxy"]}' } },
      init: [{ name: "istio-validation", image: "istio/proxyv2:1.24.0" }],
      spec: { containers: [{ name: "reviews", image: "reviews:1" }, { name: "istio-proxy", image: "istio/proxyv2:1.24.0", args: ["proxy", "sidecar"] }] },
      status: { initContainerStatuses: [{ name: "istio-validation", state: { terminated: { exitCode: 0 } } }] },
    });
    const cfg = { ...CFG, conf: conf("istio"), profile: istioProfile };
    expect(judge(pod, {}, cfg).kind).toBe("bypassing");
  });
});

describe("a failed validator", () => {
  const failed = (where: "state" | "lastState") => meshedPod("web-v", {
    startedAt: NOW - 1000, // after the chain: only the validator can say it bypasses
    status: {
      phase: "Pending",
      initContainerStatuses: [{
        name: "linkerd-network-validator", ready: false, restartCount: 2,
        ...(where === "state" ? { state: { terminated: { exitCode: 1, reason: "Error" } } } : { state: { waiting: { reason: "CrashLoopBackOff" } }, lastState: { terminated: { exitCode: 1, reason: "Error" } } }),
      }],
    },
  });
  test("exited non-zero: bypassing even with a record and after the chain", () => {
    const pod = failed("state");
    expect(judge(pod, { records: [record(pod)] })).toEqual({ kind: "bypassing", reason: "its linkerd-network-validator init container failed (exit code 1): the redirect was not in place" });
  });
  test("in CrashLoopBackOff after a non-zero exit: bypassing", () => {
    expect(judge(failed("lastState")).kind).toBe("bypassing");
  });
});

describe("never repaired (no false repair)", () => {
  // Each pod would bypass but for the one thing named.
  const cases: [string, Record<string, unknown>, string | RegExp][] = [
    ["another node's pod", meshedPod("web-n", { spec: { nodeName: "node-b" } }), "runs on node node-b, not node-a"],
    ["a pod not yet scheduled", meshedPod("web-u", { spec: { nodeName: undefined } }), "runs on node (none), not node-a"],
    ["a pod being deleted", meshedPod("web-d", { meta: { deletionTimestamp: iso(NOW - 5000), deletionGracePeriodSeconds: 30 } }), "already being deleted"],
    ["a mirror (static) pod", meshedPod("web-m", { meta: { annotations: { "kubernetes.io/config.mirror": "3f1c", "kubernetes.io/config.source": "file" } } }), /a mirror \(static\) pod/],
    ["a hostNetwork pod", meshedPod("web-h", { spec: { hostNetwork: true } }), "uses the host's network (no CNI ADD)"],
    ["an excluded namespace", meshedPod("coredns-1", { ns: "kube-system" }), "namespace kube-system is excluded"],
    ["the mesh's own control plane namespace, when excluded", meshedPod("destination-1", { ns: "linkerd" }), "namespace linkerd is excluded"],
    ["meshcni's own DaemonSet pod (by name)", meshedPod("meshcni-node-x7k2p", { ns: "meshcni" }), "one of meshcni's own DaemonSet pods"],
    ["meshcni's own DaemonSet pod (by owner)", meshedPod("renamed-7", { ns: "meshcni", meta: { ownerReferences: [{ apiVersion: "apps/v1", kind: "DaemonSet", name: "meshcni-node", uid: "d", controller: true }] } }), "one of meshcni's own DaemonSet pods"],
    ["a pod carrying linkerd-init", meshedPod("web-li", { init: [{ name: "linkerd-init", image: "cr.l5d.io/linkerd/proxy-init:v2" }, { name: "linkerd-proxy", image: "p", restartPolicy: "Always" }] }), "carries linkerd-init, which sets up its own rules"],
    ["a pod carrying istio-init", meshedPod("web-ii", { init: [{ name: "istio-init", image: "istio/proxyv2" }, { name: "linkerd-proxy", image: "p", restartPolicy: "Always" }] }), "carries istio-init, which sets up its own rules"],
    ["a pod the profile does not redirect (no proxy)", meshedPod("plain-1", { init: [] }), "the pod has no linkerd-proxy container"],
    ["a completed pod", meshedPod("job-1", { status: { phase: "Succeeded" } }), "phase Succeeded: nothing runs"],
    ["a failed pod", meshedPod("job-2", { status: { phase: "Failed" } }), "phase Failed: nothing runs"],
    ["a pod with a record of its ADD (same UID)", meshedPod("web-r"), "the plugin's record of its ADD"],
    ["a pod with a record without UID (same name)", meshedPod("web-ru"), "the plugin's record of its ADD"],
    ["a pod that started after the chain was in place", meshedPod("web-late", { startedAt: CHAIN + 5000 }), /started after meshcni was chained/],
    ["a pod that started before the plugin kept records", meshedPod("web-old", { startedAt: T0 - 1000 }), "started before the plugin kept records on this node"],
    ["a pod without a start time", meshedPod("web-nt", { status: { startTime: undefined } }), /no start time/],
    ["an object that is not a pod", { metadata: { name: "x" } }, "not a pod object (no namespace or name)"],
  ];
  const records = (pods: Record<string, unknown>[]): PodRecord[] => [
    record(pods.find((p) => (p.metadata as { name: string }).name === "web-r")!),
    { ...record(pods.find((p) => (p.metadata as { name: string }).name === "web-ru")!), uid: undefined } as PodRecord,
  ];
  const all = cases.map(([, pod]) => pod);
  for (const [what, pod, why] of cases) {
    test(what, () => {
      const j = judge(pod, { records: records(all), recordsSince: (pod.metadata as { name: string }).name === "web-old" ? T0 : 0 });
      expect(j.kind).not.toBe("bypassing");
      expect(j.kind === "bypassing" ? "" : j.why).toMatch(why);
    });
  }

  test("all of them together (and one real bypasser): only the bypasser is deleted", () => {
    const bad = meshedPod("web-bad");
    const inp = input([...all.filter((p) => (p.metadata as { name?: string }).name !== "web-old"), bad], { records: records(all) });
    const plan = planRepair(CFG, confirmed(CFG, inp), inp);
    expect(plan.delete.map((d) => d.name)).toEqual(["web-bad"]);
    expect(plan.bypassing.map((d) => d.name)).toEqual(["web-bad"]);
  });

  test("a record of an earlier pod with the same name but another UID does not cover the new one", () => {
    const pod = meshedPod("db-0");
    expect(judge(pod, { records: [record(pod, { uid: "00000000-0000-4000-8000-000000000000" })] }).kind).toBe("bypassing");
  });

  test("a pod of the same name in another namespace with a record does not cover this one", () => {
    const pod = meshedPod("web-1");
    expect(judge(pod, { records: [record(pod, { namespace: "other", uid: undefined })] }).kind).toBe("bypassing");
  });
});

describe("when the agent acts", () => {
  const pod = meshedPod("web-w");
  const cases: [string, Partial<RepairInput>, string][] = [
    ["cache not in sync", { synced: false }, "the watch cache is not in sync"],
    ["chain not in place", { chainSince: undefined }, "meshcni is not chained"],
    ["chain in place for less than the grace period", { chainSince: NOW - 10_000 }, "the chain has been in place for less than the grace period (20 s left)"],
  ];
  for (const [what, over, why] of cases) {
    test(`not while ${what}`, () => {
      const plan = planRepair(CFG, newRepairMemory(), input([pod], over));
      expect(plan.active).toBe(false);
      expect(plan.waitingFor).toBe(why);
      expect(plan.delete).toEqual([]);
      // Out of sync, nothing is judged at all; otherwise the pod is listed as waiting.
      expect(plan.bypassing.map((b) => b.action)).toEqual(over.synced === false ? [] : ["waiting"]);
    });
  }

  test("--repair off: reported, never deleted", () => {
    const plan = planRepair({ ...CFG, mode: "off" }, newRepairMemory(), input([pod]));
    expect(plan.delete).toEqual([]);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["reported"]);
    expect(repairStatus({ mode: "off" }, plan, plan.memory)).toEqual({ mode: "off", active: true, bypassing: plan.bypassing, repaired: 0 });
  });

  test("rate limit: at most N deletions a minute; the rest wait, then go", () => {
    const cfg = { ...CFG, ratePerMinute: 3 };
    const pods = Array.from({ length: 5 }, (_, i) => meshedPod(`burst-${i}`));
    let plan = planRepair(cfg, confirmed(cfg, input(pods)), input(pods));
    expect(plan.delete.length).toBe(3);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["deleted", "deleted", "deleted", "waiting", "waiting"]);
    let mem = noteDeletions(plan.memory, plan.delete.map((ref) => ({ ref, ok: true })), NOW);
    expect(mem.repaired).toBe(3);
    const left = pods.slice(3);
    // Ten seconds later: the minute's budget is spent.
    plan = planRepair(cfg, mem, input(left, { now: NOW + 10_000 }));
    expect(plan.delete).toEqual([]);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["waiting", "waiting"]);
    expect(plan.bypassing[0]!.since).toBe(SEEN);
    // A minute later: they go.
    plan = planRepair(cfg, plan.memory, input(left, { now: NOW + 61_000 }));
    expect(plan.delete.map((d) => d.name)).toEqual(["burst-3", "burst-4"]);
    mem = noteDeletions(plan.memory, plan.delete.map((ref) => ({ ref, ok: true })), NOW + 61_000);
    expect(mem.repaired).toBe(5);
  });

  test("a failed deletion counts against the rate but not as a repair; a pod deleted once is not deleted again while the cache lags", () => {
    let plan = planRepair(CFG, confirmed(CFG, input([pod])), input([pod]));
    let mem = noteDeletions(plan.memory, [{ ref: plan.delete[0]!, ok: false }], NOW);
    expect([mem.repaired, mem.recentDeletions.length]).toEqual([0, 1]);
    plan = planRepair(CFG, mem, input([pod], { now: NOW + 1000 }));
    expect(plan.delete.length).toBe(1);
    mem = noteDeletions(plan.memory, [{ ref: plan.delete[0]!, ok: true }], NOW + 1000);
    plan = planRepair(CFG, mem, input([pod], { now: NOW + 2000 }));
    expect(plan.delete).toEqual([]);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["deleted"]);
    expect(plan.memory.repaired).toBe(1);
  });
});

describe("each cached pod is parsed once", () => {
  // The watch cache stores a new object for each change (test/agent/store.test.ts), so repair
  // parses a pod once per object (internal/agent/parsed.ts), not once per round. The profile sees
  // the parsed pod: the same Pod for an unchanged object, a new one for a changed pod.
  test("a second round hands the profile the same Pod for the pods that did not change, a new one for the one that did; the plan is the same", () => {
    const seen = new Map<string, unknown[]>();
    const cfg: RepairConfig = {
      ...CFG,
      profile: { ...linkerdProfile, decide: (p, c) => {
        seen.set(p.metadata.name, [...(seen.get(p.metadata.name) ?? []), p]);
        return linkerdProfile.decide(p, c);
      } },
    };
    const pods = ["web-p1", "web-p2", "web-p3"].map((n) => meshedPod(n));
    const first = planRepair(cfg, newRepairMemory(), input(pods));
    // web-p2 changes: the cache holds a new object (a status update), the others stay as they were.
    const changed = { ...pods[1]!, metadata: { ...(pods[1]!.metadata as object), resourceVersion: "4712" } };
    const second = planRepair(cfg, first.memory, input([pods[0]!, changed, pods[2]!], { now: NOW + 1000 }));
    for (const name of ["web-p1", "web-p3"]) {
      const [a, b] = seen.get(name)!;
      expect(b).toBe(a);
    }
    const [a, b] = seen.get("web-p2")!;
    expect(b).not.toBe(a);
    expect(b).toEqual(expect.objectContaining({ metadata: expect.objectContaining({ name: "web-p2", resourceVersion: "4712" }) }));
    expect(second.bypassing.map((p) => [p.name, p.action, p.since])).toEqual(first.bypassing.map((p) => [p.name, p.action, p.since]));
    expect(second.bypassing.length).toBe(3);
  });

  test("a pod the schema refuses is ignored at every round, its parse kept too", () => {
    const bad = meshedPod("web-bad-spec", { spec: { containers: "not a list" } });
    const first = judge(bad);
    expect(first).toEqual({ kind: "ignore", why: "a pod object the plugin could not read" });
    expect(judge(bad)).toEqual(first);
    expect(planRepair(CFG, newRepairMemory(), input([bad])).bypassing).toEqual([]);
  });
});
