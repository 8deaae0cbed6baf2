// Repair's planner (internal/agent/repair/plan.ts), table-driven over pods shaped as the API server
// sends them: it acts only on positive evidence (the mesh validator's latest run failed with its
// "no redirect" code); a meshed pod with no record of the ADD of its sandbox is unverified,
// reported and never acted on; every "never" case keeps the pod, whatever else is true of it (a
// false repair removes a healthy pod); the agent waits for its cache, the chain and the grace
// period; the rate limit holds; a refused eviction backs off; off only reports.
import { describe, expect, test } from "bun:test";
import {
  type ActResult,
  afterActs,
  confirmMs,
  newRepairMemory,
  noteActs,
  planRepair,
  type RepairConfig,
  type RepairInput,
  type RepairMemory,
  judgePod,
  repairStatus,
} from "../../internal/agent/repair/plan.ts";
import type { PodRecord } from "../../internal/wire/state.ts";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import { istioProfile } from "../../internal/mesh/istio/profile.ts";
import { linkerdProfile } from "../../internal/mesh/linkerd/profile.ts";

const T0 = Date.parse("2026-11-24T10:00:00Z");
const iso = (ms: number) => new Date(ms).toISOString();
const CHAIN = T0 + 60_000; // the chain is in place from here
const NOW = CHAIN + 45_000; // past the 30 s grace period

const conf = (mesh: "linkerd" | "istio" = "linkerd") =>
  parsePluginConf(
    JSON.stringify({
      cniVersion: "1.0.0",
      name: "k8s-pod-network",
      type: "meshcni",
      mesh,
      kubernetes: {
        kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig",
        exclude_namespaces: ["kube-system", "linkerd"],
        pod_namespace: "meshcni",
      },
    }),
  );

const CFG: RepairConfig = {
  mode: "evict",
  node: "node-a",
  conf: conf(),
  profile: linkerdProfile,
  daemonSetName: "meshcni-node",
  graceMs: 30_000,
  ratePerMinute: 10,
  retryMs: 60_000,
};

let uidN = 0;
let first0: Record<string, unknown> | undefined;
/** One fixed pod (same UID on every call). */
const _pod0 = () => (first0 ??= meshedPod("web-0"));
/**
 * A Linkerd-injected pod in CNI mode (linkerd-network-validator, then linkerd-proxy as a native
 * sidecar), running on node-a.
 */
function meshedPod(
  name: string,
  over: {
    ns?: string;
    meta?: Record<string, unknown>;
    spec?: Record<string, unknown>;
    status?: Record<string, unknown>;
    startedAt?: number;
    init?: unknown[];
  } = {},
): Record<string, unknown> {
  const uid = `7d0c${String(++uidN).padStart(4, "0")}-1111-4222-8333-${name
    .padEnd(12, "0")
    .slice(0, 12)
    .replace(/[^0-9a-f]/g, "a")}`;
  const started = over.startedAt ?? T0;
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: over.ns ?? "emojivoto",
      uid,
      resourceVersion: "4711",
      annotations: { "linkerd.io/inject": "enabled", "linkerd.io/proxy-version": "edge-25.1.1" },
      labels: { app: name.replace(/-[a-z0-9]+$/, ""), "linkerd.io/control-plane-ns": "linkerd" },
      ownerReferences: [
        { apiVersion: "apps/v1", kind: "ReplicaSet", name: `${name}-rs`, uid: "aaaa", controller: true },
      ],
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
        {
          name: "linkerd-network-validator",
          ready: true,
          restartCount: 0,
          state: { terminated: { exitCode: 0, reason: "Completed" } },
          containerID: "containerd://1",
        },
        {
          name: "linkerd-proxy",
          ready: true,
          restartCount: 0,
          started: true,
          state: { running: { startedAt: iso(started + 2000) } },
          containerID: "containerd://2",
        },
      ],
      containerStatuses: [
        {
          name: "web",
          ready: true,
          restartCount: 0,
          started: true,
          state: { running: { startedAt: iso(started + 3000) } },
          containerID: "containerd://3",
        },
      ],
      ...over.status,
    },
  };
}

const uidOf = (p: Record<string, unknown>) => (p.metadata as { uid: string }).uid;
const record = (p: Record<string, unknown>, over: Partial<PodRecord> = {}): PodRecord => {
  const m = p.metadata as { name: string; namespace: string; uid: string };
  return {
    v: 1,
    containerId: `c-${m.name}`,
    namespace: m.namespace,
    name: m.name,
    uid: m.uid,
    decision: "meshed",
    reason: "runs linkerd-proxy",
    time: iso(T0),
    ...over,
  };
};

const input = (pods: unknown[], over: Partial<RepairInput> = {}): RepairInput => ({
  pods,
  records: [],
  synced: true,
  chainSince: CHAIN,
  now: NOW,
  ...over,
});
/** The memory of a round confirmMs earlier that saw the same pods bypassing (a deletion needs that). */
const confirmed = (cfg: RepairConfig, inp: RepairInput): RepairMemory =>
  planRepair(cfg, newRepairMemory(), { ...inp, now: inp.now - confirmMs(cfg) }).memory;
const SEEN = iso(NOW - 10_000);
const judge = (pod: unknown, records: PodRecord[] = [], cfg = CFG) => judgePod(cfg, pod, records);

/** The validator's status: its latest run as kubelet reports it. */
const validator = (name: string, st: Record<string, unknown>) => ({ name, ready: false, restartCount: 2, ...st });
const LINKERD_FAILED = {
  terminated: {
    exitCode: 95,
    reason: "Error",
    message: "failed to verify the redirect\n",
    finishedAt: iso(T0 + 12_000),
  },
};
/** A pod whose linkerd-network-validator reports `st` (its proxy waits: init has not finished). */
const withValidator = (name: string, st: Record<string, unknown>, over: Record<string, unknown> = {}) =>
  meshedPod(name, {
    status: {
      phase: "Pending",
      initContainerStatuses: [
        validator("linkerd-network-validator", st),
        { name: "linkerd-proxy", state: { waiting: { reason: "PodInitializing" } } },
      ],
      containerStatuses: [{ name: "web", state: { waiting: { reason: "PodInitializing" } } }],
      ...over,
    },
  });
const istioPod = (name: string, st: Record<string, unknown>) =>
  meshedPod(name, {
    meta: { annotations: { "sidecar.istio.io/status": '{"containers":["istio-proxy"]}' } },
    init: [{ name: "istio-validation", image: "istio/proxyv2:1.24.0" }],
    spec: {
      containers: [
        { name: "reviews", image: "reviews:1" },
        { name: "istio-proxy", image: "istio/proxyv2:1.24.0", args: ["proxy", "sidecar"] },
      ],
    },
    status: { phase: "Pending", initContainerStatuses: [validator("istio-validation", st)] },
  });
const ISTIO = { ...CFG, conf: conf("istio"), profile: istioProfile };

describe("positive evidence: the validator's latest run failed with its code", () => {
  test("linkerd-network-validator terminated with 95: bypassing, evicted once confirmed, even with a record of its ADD", () => {
    const pod = withValidator("web-v", { state: LINKERD_FAILED });
    expect(judge(pod, [record(pod)])).toEqual({
      kind: "bypassing",
      reason:
        "its linkerd-network-validator init container's latest run failed (exit code 95, " +
        "Error: failed to verify the redirect): the redirect was not in place",
    });
    const inp = input([pod], { records: [record(pod)] });
    const plan = planRepair(CFG, confirmed(CFG, inp), inp);
    expect(plan.act).toEqual([
      { namespace: "emojivoto", name: "web-v", uid: uidOf(pod), reason: expect.stringContaining("exit code 95") },
    ]);
    expect(plan.bypassing).toEqual([
      {
        namespace: "emojivoto",
        name: "web-v",
        uid: uidOf(pod),
        reason: expect.any(String),
        action: "evicted",
        since: SEEN,
      },
    ]);
    expect(plan.unverified).toEqual([]);
  });

  test("in CrashLoopBackOff after a 95: the last termination is the latest run", () => {
    const pod = withValidator("web-cl", {
      state: { waiting: { reason: "CrashLoopBackOff" } },
      lastState: LINKERD_FAILED,
    });
    expect(judge(pod).kind).toBe("bypassing");
  });

  test("Istio: istio-validation waiting after a 126 (Istio's own fixture): bypassing", () => {
    const pod = istioPod("reviews-v1", {
      state: { waiting: { reason: "CrashLoopBackOff" } },
      lastState: { terminated: { exitCode: 126, message: "Died for some reason" } },
    });
    expect(judge(pod, [], ISTIO)).toEqual({
      kind: "bypassing",
      reason:
        "its istio-validation init container's latest run failed (exit code 126, " +
        "Died for some reason): the redirect was not in place",
    });
  });

  // Each is not evidence: the pod is judged by its records (none here: unverified, never acted on).
  const notEvidence: [string, Record<string, unknown>][] = [
    [
      "an earlier run failed (95), the latest succeeded (terminated 0)",
      { state: { terminated: { exitCode: 0, reason: "Completed" } }, lastState: LINKERD_FAILED },
    ],
    [
      "running again after a failed run: the run in progress decides",
      { state: { running: { startedAt: iso(T0 + 20_000) } }, lastState: LINKERD_FAILED },
    ],
    [
      "another exit code (1): not the validator's answer about the redirect",
      { state: { terminated: { exitCode: 1, reason: "Error" } } },
    ],
    [
      "killed (137, OOMKilled) and waiting",
      {
        state: { waiting: { reason: "CrashLoopBackOff" } },
        lastState: { terminated: { exitCode: 137, reason: "OOMKilled" } },
      },
    ],
    ["waiting to start for the first time", { state: { waiting: { reason: "PodInitializing" } } }],
    ["no state at all", {}],
  ];
  for (const [what, st] of notEvidence) {
    test(`not evidence: ${what}`, () => {
      const pod = withValidator("web-ne", st);
      expect(judge(pod)).toEqual({ kind: "unverified", why: expect.stringContaining("no record of an ADD") });
      expect(judge(pod, [record(pod)]).kind).toBe("handled");
      const inp = input([pod]);
      expect(planRepair(CFG, confirmed(CFG, inp), inp).act).toEqual([]);
    });
  }

  test("Istio: 95 is not istio-validation's code, 126 is not linkerd-network-validator's", () => {
    expect(judge(istioPod("reviews-95", { state: { terminated: { exitCode: 95 } } }), [], ISTIO).kind).toBe(
      "unverified",
    );
    expect(judge(withValidator("web-126", { state: { terminated: { exitCode: 126 } } })).kind).toBe("unverified");
  });

  test("a failure that ended before the current sandbox was ready is of an earlier sandbox: not evidence", () => {
    const ready = T0 + 60_000;
    const conditions = [{ type: "PodReadyToStartContainers", status: "True", lastTransitionTime: iso(ready) }];
    const old = withValidator(
      "web-sb",
      { state: { waiting: { reason: "PodInitializing" } }, lastState: LINKERD_FAILED },
      { conditions },
    );
    expect(judge(old).kind).toBe("unverified");
    // The same failure in the current sandbox (finished after it was ready, or in the same second): evidence.
    const now = withValidator(
      "web-sb2",
      { state: { terminated: { ...LINKERD_FAILED.terminated, finishedAt: iso(ready) } } },
      { conditions },
    );
    expect(judge(now).kind).toBe("bypassing");
  });
});

describe("no record of an ADD is no evidence: unverified, reported, never acted on", () => {
  test("a meshed pod with a sandbox and no record (a reinstall lost them, or it started before meshcni): unverified, not acted on in any mode", () => {
    const pod = meshedPod("web-1");
    expect(judge(pod)).toEqual({
      kind: "unverified",
      why: "no record of an ADD for its sandbox on this node (PodReadyToStartContainers is True)",
    });
    for (const mode of ["evict", "delete", "off"] as const) {
      const cfg = { ...CFG, mode };
      const inp = input([pod]);
      const plan = planRepair(cfg, confirmed(cfg, inp), { ...inp, now: NOW + 3_600_000 });
      expect(plan.act).toEqual([]);
      expect(plan.bypassing).toEqual([]);
      expect(plan.unverified).toEqual([
        { namespace: "emojivoto", name: "web-1", uid: uidOf(pod), why: expect.stringContaining("no record of an ADD") },
      ]);
    }
  });

  test("a pod that started long before the chain, and one started after it: the start time says nothing", () => {
    for (const startedAt of [T0 - 86_400_000, CHAIN + 5000])
      expect(judge(meshedPod("web-t", { startedAt })).kind).toBe("unverified");
  });

  test("a record of an earlier sandbox of the same pod does not cover the current one", () => {
    const pod = meshedPod("web-2"); // its sandbox became ready at T0 + 1 s
    const old = record(pod, { time: iso(T0 - 3_600_000) });
    expect(judge(pod, [old])).toEqual({
      kind: "unverified",
      why: expect.stringMatching(
        /^the plugin's newest record of it \(container c-web-2, ADD at .*\) is of an earlier sandbox/,
      ),
    });
    expect(judge(pod, [old, record(pod, { containerId: "c-new", time: iso(T0 + 500) })]).kind).toBe("handled");
  });

  test("a record of an earlier pod with the same name but another UID does not cover the new one", () => {
    const pod = meshedPod("db-0");
    expect(judge(pod, [record(pod, { uid: "00000000-0000-4000-8000-000000000000" })]).kind).toBe("unverified");
  });

  test("a pod of the same name in another namespace with a record does not cover this one", () => {
    const pod = meshedPod("web-3");
    expect(judge(pod, [record(pod, { namespace: "other", uid: undefined })]).kind).toBe("unverified");
  });

  test("the record of its current sandbox: handled, also when the plugin skipped it", () => {
    const pod = meshedPod("web-4");
    expect(judge(pod, [record(pod)])).toEqual({
      kind: "handled",
      why: "the plugin's record of the ADD of its sandbox (container c-web-4, meshed)",
      record: record(pod),
    });
    expect(judge(pod, [record(pod, { decision: "skipped" })]).kind).toBe("handled");
  });
});

describe("never acted on (no false repair)", () => {
  // Each pod's validator failed, but for the one thing named it would be evicted.
  const failing = (name: string, over: Parameters<typeof meshedPod>[1] = {}) =>
    meshedPod(name, {
      ...over,
      status: {
        phase: "Pending",
        initContainerStatuses: [
          validator("linkerd-network-validator", {
            state: { waiting: { reason: "CrashLoopBackOff" } },
            lastState: LINKERD_FAILED,
          }),
        ],
        ...over.status,
      },
    });
  const cases: [string, Record<string, unknown>, string | RegExp][] = [
    ["another node's pod", failing("web-n", { spec: { nodeName: "node-b" } }), "runs on node node-b, not node-a"],
    ["a pod not yet scheduled", failing("web-u", { spec: { nodeName: undefined } }), "runs on node (none), not node-a"],
    [
      "a pod being deleted",
      failing("web-d", { meta: { deletionTimestamp: iso(NOW - 5000), deletionGracePeriodSeconds: 30 } }),
      "already being deleted",
    ],
    [
      "a mirror (static) pod",
      failing("web-m", {
        meta: { annotations: { "kubernetes.io/config.mirror": "3f1c", "kubernetes.io/config.source": "file" } },
      }),
      /a mirror \(static\) pod/,
    ],
    ["a hostNetwork pod", failing("web-h", { spec: { hostNetwork: true } }), "uses the host's network (no CNI ADD)"],
    ["an excluded namespace", failing("coredns-1", { ns: "kube-system" }), "namespace kube-system is excluded"],
    [
      "the mesh's own control plane namespace, when excluded",
      failing("destination-1", { ns: "linkerd" }),
      "namespace linkerd is excluded",
    ],
    [
      "meshcni's own DaemonSet pod (by name)",
      failing("meshcni-node-x7k2p", { ns: "meshcni" }),
      "one of meshcni's own DaemonSet pods",
    ],
    [
      "meshcni's own DaemonSet pod (by owner)",
      failing("renamed-7", {
        ns: "meshcni",
        meta: {
          ownerReferences: [
            { apiVersion: "apps/v1", kind: "DaemonSet", name: "meshcni-node", uid: "d", controller: true },
          ],
        },
      }),
      "one of meshcni's own DaemonSet pods",
    ],
    [
      "a pod carrying linkerd-init",
      failing("web-li", {
        init: [
          { name: "linkerd-init", image: "cr.l5d.io/linkerd/proxy-init:v2" },
          { name: "linkerd-network-validator", image: "p" },
          { name: "linkerd-proxy", image: "p", restartPolicy: "Always" },
        ],
      }),
      "carries linkerd-init, which sets up its own rules",
    ],
    [
      "a pod carrying istio-init",
      failing("web-ii", {
        init: [
          { name: "istio-init", image: "istio/proxyv2" },
          { name: "linkerd-network-validator", image: "p" },
          { name: "linkerd-proxy", image: "p", restartPolicy: "Always" },
        ],
      }),
      "carries istio-init, which sets up its own rules",
    ],
    [
      "a pod the profile does not redirect (no proxy)",
      failing("plain-1", { init: [{ name: "linkerd-network-validator", image: "p" }] }),
      "the pod has no linkerd-proxy container",
    ],
    ["a completed pod", failing("job-1", { status: { phase: "Succeeded" } }), "phase Succeeded: nothing runs"],
    ["a failed pod", failing("job-2", { status: { phase: "Failed" } }), "phase Failed: nothing runs"],
    [
      "a pod without a sandbox (PodReadyToStartContainers False)",
      failing("web-s", { status: { conditions: [{ type: "PodReadyToStartContainers", status: "False" }] } }),
      "no sandbox yet (the plugin runs when it is made)",
    ],
    ["a pod without a UID", failing("web-nouid", { meta: { uid: undefined } }), /^no UID/],
    ["an object that is not a pod", { metadata: { name: "x" } }, "not a pod object (no namespace or name)"],
  ];
  for (const [what, pod, why] of cases) {
    test(what, () => {
      const j = judge(pod);
      expect(j.kind).toBe("ignore");
      expect(j.kind === "ignore" ? j.why : "").toMatch(why);
    });
  }

  test("all of them together (and one real bypasser): only the bypasser is evicted", () => {
    const bad = failing("web-bad");
    const inp = input([...cases.map(([, pod]) => pod), bad]);
    const plan = planRepair(CFG, confirmed(CFG, inp), inp);
    expect(plan.act.map((d) => d.name)).toEqual(["web-bad"]);
    expect(plan.bypassing.map((d) => d.name)).toEqual(["web-bad"]);
    expect(plan.unverified).toEqual([]);
  });

  test("no sandbox yet (Pending, nothing ran): not even unverified", () => {
    const pod = meshedPod("web-3", {
      status: {
        phase: "Pending",
        initContainerStatuses: [
          { name: "linkerd-network-validator", state: { waiting: { reason: "PodInitializing" } } },
        ],
        containerStatuses: [],
        conditions: [{ type: "PodReadyToStartContainers", status: "False" }],
      },
    });
    expect(judge(pod)).toEqual({ kind: "ignore", why: "no sandbox yet (the plugin runs when it is made)" });
  });

  const sandboxes: [string, Record<string, unknown>][] = [
    [
      "only PodReadyToStartContainers True",
      {
        phase: "Pending",
        initContainerStatuses: [],
        containerStatuses: [],
        conditions: [{ type: "PodReadyToStartContainers", status: "True" }],
      },
    ],
    ["only phase Running", { phase: "Running", initContainerStatuses: [], containerStatuses: [], conditions: [] }],
    [
      "a container that terminated",
      {
        phase: "Pending",
        conditions: [],
        containerStatuses: [],
        initContainerStatuses: [{ name: "linkerd-network-validator", state: { terminated: { exitCode: 0 } } }],
      },
    ],
  ];
  for (const [what, status] of sandboxes) {
    test(`sandbox evidence: ${what}`, () => {
      expect(judge(meshedPod("web-2", { status })).kind).toBe("unverified");
    });
  }
});

describe("when the agent acts", () => {
  const pod = withValidator("web-w", { state: LINKERD_FAILED });
  const cases: [string, Partial<RepairInput>, string][] = [
    ["cache not in sync", { synced: false }, "the watch cache is not in sync"],
    ["chain not in place", { chainSince: undefined }, "meshcni is not chained"],
    [
      "chain in place for less than the grace period",
      { chainSince: NOW - 10_000 },
      "the chain has been in place for less than the grace period (20 s left)",
    ],
  ];
  for (const [what, over, why] of cases) {
    test(`not while ${what}`, () => {
      const plan = planRepair(CFG, newRepairMemory(), input([pod], over));
      expect(plan.active).toBe(false);
      expect(plan.waitingFor).toBe(why);
      expect(plan.act).toEqual([]);
      // Out of sync, nothing is judged at all; otherwise the pod is listed as waiting.
      expect(plan.bypassing.map((b) => b.action)).toEqual(over.synced === false ? [] : ["waiting"]);
    });
  }

  test("seen with its evidence for less than the confirmation time (10 s, at most the grace period): waiting", () => {
    const first = planRepair(CFG, newRepairMemory(), input([pod]));
    expect(first.act).toEqual([]);
    expect(first.bypassing.map((b) => [b.action, b.since])).toEqual([["waiting", iso(NOW)]]);
    expect(planRepair(CFG, first.memory, input([pod], { now: NOW + 9_999 })).act).toEqual([]);
    expect(planRepair(CFG, first.memory, input([pod], { now: NOW + 10_000 })).act.length).toBe(1);
  });

  test("--repair delete: the same pods, the act says deleted", () => {
    const cfg = { ...CFG, mode: "delete" as const };
    const plan = planRepair(cfg, confirmed(cfg, input([pod])), input([pod]));
    expect(plan.act.map((a) => a.name)).toEqual(["web-w"]);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["deleted"]);
  });

  test("--repair off: reported, never acted on", () => {
    const plan = planRepair({ ...CFG, mode: "off" }, confirmed(CFG, input([pod])), input([pod]));
    expect(plan.act).toEqual([]);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["reported"]);
    expect(repairStatus({ mode: "off" }, plan, plan.memory)).toEqual({
      mode: "off",
      active: true,
      bypassing: plan.bypassing,
      unverified: [],
      repaired: 0,
      refusals: 0,
    });
  });

  test("rate limit: at most N acts a minute; the rest wait, then go", () => {
    const cfg = { ...CFG, ratePerMinute: 3 };
    const pods = Array.from({ length: 5 }, (_, i) => withValidator(`burst-${i}`, { state: LINKERD_FAILED }));
    let plan = planRepair(cfg, confirmed(cfg, input(pods)), input(pods));
    expect(plan.act.length).toBe(3);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["evicted", "evicted", "evicted", "waiting", "waiting"]);
    let mem = noteActs(
      cfg,
      plan.memory,
      plan.act.map((ref): ActResult => ({ ref, outcome: "done" })),
      NOW,
    );
    expect(mem.repaired).toBe(3);
    const left = pods.slice(3);
    // Ten seconds later: the minute's budget is spent.
    plan = planRepair(cfg, mem, input(left, { now: NOW + 10_000 }));
    expect(plan.act).toEqual([]);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["waiting", "waiting"]);
    expect(plan.bypassing[0]!.since).toBe(SEEN);
    // A minute later: they go.
    plan = planRepair(cfg, plan.memory, input(left, { now: NOW + 61_000 }));
    expect(plan.act.map((d) => d.name)).toEqual(["burst-3", "burst-4"]);
    mem = noteActs(
      cfg,
      plan.memory,
      plan.act.map((ref): ActResult => ({ ref, outcome: "done" })),
      NOW + 61_000,
    );
    expect(mem.repaired).toBe(5);
  });

  test("a failed act counts against the rate but not as a repair; a pod acted on once is not acted on again while the cache lags", () => {
    let plan = planRepair(CFG, confirmed(CFG, input([pod])), input([pod]));
    let mem = noteActs(CFG, plan.memory, [{ ref: plan.act[0]!, outcome: "failed" }], NOW);
    expect([mem.repaired, mem.recentActs.length]).toEqual([0, 1]);
    expect(afterActs(plan, mem, [{ ref: plan.act[0]!, outcome: "failed" }]).bypassing.map((b) => b.action)).toEqual([
      "waiting",
    ]);
    plan = planRepair(CFG, mem, input([pod], { now: NOW + 1000 }));
    expect(plan.act.length).toBe(1);
    mem = noteActs(CFG, plan.memory, [{ ref: plan.act[0]!, outcome: "done" }], NOW + 1000);
    plan = planRepair(CFG, mem, input([pod], { now: NOW + 2000 }));
    expect(plan.act).toEqual([]);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["evicted"]);
    expect(plan.memory.repaired).toBe(1);
  });

  test("an eviction a PodDisruptionBudget refused (429): reported with the server's message, tried again after the backoff, which doubles", () => {
    const msg = "Cannot evict pod as it would violate the pod's disruption budget.";
    let plan = planRepair(CFG, confirmed(CFG, input([pod])), input([pod]));
    const refused = (p: typeof plan, at: number) =>
      noteActs(CFG, p.memory, [{ ref: p.act[0]!, outcome: "refused", message: msg }], at);
    let mem = refused(plan, NOW);
    expect([mem.repaired, mem.refusals]).toEqual([0, 1]);
    const shown = afterActs(plan, mem, [{ ref: plan.act[0]!, outcome: "refused", message: msg }]);
    expect(shown.bypassing).toEqual([
      expect.objectContaining({ action: "refused", refusal: { message: msg, retryAt: iso(NOW + 60_000) } }),
    ]);
    expect(repairStatus(CFG, shown, mem)).toEqual(expect.objectContaining({ refusals: 1, repaired: 0 }));
    // Within the minute: not tried again, still reported as refused.
    plan = planRepair(CFG, mem, input([pod], { now: NOW + 59_000 }));
    expect(plan.act).toEqual([]);
    expect(plan.bypassing.map((b) => b.action)).toEqual(["refused"]);
    // After it: tried again; refused again, the next try is two minutes later.
    plan = planRepair(CFG, plan.memory, input([pod], { now: NOW + 60_000 }));
    expect(plan.act.length).toBe(1);
    mem = refused(plan, NOW + 60_000);
    expect(mem.refused[uidOf(pod)]).toEqual({ until: NOW + 180_000, message: msg, count: 2 });
    expect(planRepair(CFG, mem, input([pod], { now: NOW + 179_000 })).act).toEqual([]);
    plan = planRepair(CFG, mem, input([pod], { now: NOW + 180_000 }));
    expect(plan.act.length).toBe(1);
    // Allowed at last: evicted, the refusal forgotten.
    mem = noteActs(CFG, plan.memory, [{ ref: plan.act[0]!, outcome: "done" }], NOW + 180_000);
    expect([mem.repaired, mem.refusals, mem.refused]).toEqual([1, 2, {}]);
  });

  test("the refusals' backoff stops growing at ten minutes", () => {
    let mem = newRepairMemory();
    const ref = { namespace: "emojivoto", name: "web-w", uid: uidOf(pod) };
    for (let i = 0; i < 8; i++) mem = noteActs(CFG, mem, [{ ref, outcome: "refused", message: "m" }], NOW);
    expect(mem.refused[ref.uid]!.until).toBe(NOW + 600_000);
  });
});

describe("each cached pod is parsed once", () => {
  // The watch cache stores a new object for each change (test/agent/store.test.ts), so repair
  // parses a pod once per object (internal/agent/cache/parsed.ts), not once per round. The profile sees
  // the parsed pod: the same Pod for an unchanged object, a new one for a changed pod.
  test("a second round hands the profile the same Pod for the pods that did not change, a new one for the one that did; the plan is the same", () => {
    const seen = new Map<string, unknown[]>();
    const cfg: RepairConfig = {
      ...CFG,
      profile: {
        ...linkerdProfile,
        decide: (p, c) => {
          seen.set(p.metadata.name, [...(seen.get(p.metadata.name) ?? []), p]);
          return linkerdProfile.decide(p, c);
        },
      },
    };
    const pods = ["web-p1", "web-p2", "web-p3"].map((n) => withValidator(n, { state: LINKERD_FAILED }));
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
    expect(b).toEqual(
      expect.objectContaining({ metadata: expect.objectContaining({ name: "web-p2", resourceVersion: "4712" }) }),
    );
    expect(second.bypassing.map((p) => [p.name, p.action, p.since])).toEqual(
      first.bypassing.map((p) => [p.name, p.action, p.since]),
    );
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
