// Repair with real parts: the compiled agent (dist/meshcni-installer) against the stand-in API
// server (with the Eviction API and the other writes of test/support/apiserver-writes.ts), pods in
// real network namespaces wired by the reference bridge plugin through the host's chain, with
// meshcni (dist/meshcni, installed by the agent) chained after it when the agent has chained it.
// Repair acts only on positive evidence, the mesh validator's latest run failing with its code:
// a reinstall (the undo keeps the records), a wiped state folder and pods that started before
// meshcni was chained leave every pod in place (unverified where no record covers it); a pod whose
// validator's latest run failed is evicted (an Event first), a PodDisruptionBudget's refusal is
// retried later and reported, `--repair delete` deletes and `--repair off` only reports. The
// startup taint comes off only once the agent can see the node's pods. Needs root for the netns.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { addWriteRoutes, PDB_REFUSAL, type Writes } from "../support/apiserver-writes.ts";
import { type Attachment, CniRuntime, type Conflist } from "../support/cni-runtime.ts";
import { isRoot, Netns, sh, uniq } from "../support/netns.ts";
import { REFERENCE_PLUGINS } from "../support/pod-lab.ts";
import { checkExposition } from "../support/prometheus.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  type InstallerProcess,
  isChainedIn,
  NODE_PATH,
  PLUGIN,
  startCluster,
  startInstaller,
  until,
} from "./harness.ts";

const TAINT = "meshcni.io/agent-not-ready";
const OTHER_TAINT = { key: "example.com/dedicated", value: "mesh", effect: "NoSchedule" };
const PRIMARY = "10-bridge.conflist";

let cluster: Cluster;
let writes: Writes;
const netnses: Netns[] = [];
const bridges: string[] = [];

beforeAll(async () => {
  ensureBuilt();
  cluster = await startCluster();
  writes = addWriteRoutes(cluster.api);
  cluster.setDaemonSet("present");
  cluster.api.addNamespace({ metadata: { name: "emojivoto" } });
}, 120_000);
afterAll(async () => {
  for (const n of netnses) n.delete();
  for (const b of bridges) sh(["ip", "link", "del", b]);
  await cluster?.close();
});

let uidN = 0;
const uid = () =>
  `5e1f${String(++uidN).padStart(4, "0")}-aaaa-4bbb-8ccc-${Math.floor(Math.random() * 2 ** 48)
    .toString(16)
    .padStart(12, "0")}`;
/** kubelet's times: whole seconds. */
const kubeletTime = (ms = Date.now()) => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");

type ValidatorStatus = Record<string, unknown>;
interface PodOpts {
  ns?: string;
  meshed?: boolean;
  node?: string;
  hostNetwork?: boolean;
  annotations?: Record<string, string>;
  mesh?: "linkerd" | "istio";
  validator?: ValidatorStatus;
  startTime?: string;
}

/** A pod as the API server holds it once its sandbox is up (PodReadyToStartContainers True, as kubelet reports it). */
function pod(name: string, o: PodOpts = {}) {
  const meshed = o.meshed ?? true;
  const istio = o.mesh === "istio";
  const validatorName = istio ? "istio-validation" : "linkerd-network-validator";
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: o.ns ?? "emojivoto",
      uid: uid(),
      resourceVersion: "100",
      annotations: {
        ...(meshed
          ? istio
            ? { "sidecar.istio.io/status": '{"containers":["istio-proxy"]}' }
            : { "linkerd.io/inject": "enabled" }
          : {}),
        ...o.annotations,
      },
      ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: `${name}-rs`, uid: "rs", controller: true }],
    },
    spec: {
      nodeName: o.node ?? "node-a",
      ...(o.hostNetwork ? { hostNetwork: true } : {}),
      initContainers: meshed
        ? [
            { name: validatorName, image: "proxy:1" },
            ...(istio
              ? []
              : [{ name: "linkerd-proxy", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1", restartPolicy: "Always" }]),
          ]
        : [],
      containers: [
        { name: "web", image: "buoyantio/emojivoto-web:v11" },
        ...(meshed && istio
          ? [{ name: "istio-proxy", image: "istio/proxyv2:1.24.0", args: ["proxy", "sidecar"] }]
          : []),
      ],
    },
    status: {
      phase: "Running",
      startTime: o.startTime ?? kubeletTime(),
      conditions: [
        { type: "PodReadyToStartContainers", status: "True", lastTransitionTime: kubeletTime() },
        { type: "Ready", status: "True" },
      ],
      initContainerStatuses: meshed
        ? [
            {
              name: validatorName,
              ready: true,
              restartCount: 0,
              state: { terminated: { exitCode: 0, reason: "Completed" } },
              ...o.validator,
            },
          ]
        : [],
      containerStatuses: [
        { name: "web", ready: true, restartCount: 0, state: { running: { startedAt: kubeletTime() } } },
      ],
    },
  };
}
type PodObj = ReturnType<typeof pod>;

const podPath = (p: PodObj) => `/api/v1/namespaces/${p.metadata.namespace}/pods/${p.metadata.name}`;
const key = (p: PodObj) => `${p.metadata.namespace}/${p.metadata.name} ${p.metadata.uid}`;
/**
 * The validator's status after a run: failed with `code` (latest), or an earlier failure before a
 * success or during a run.
 */
const failedRun = (code: number) => ({
  terminated: { exitCode: code, reason: "Error", message: "the redirect is not in place", finishedAt: kubeletTime() },
});
const LATEST_FAILED = (code = 95): ValidatorStatus => ({
  ready: false,
  restartCount: 2,
  state: { waiting: { reason: "CrashLoopBackOff" } },
  lastState: failedRun(code),
});
const EARLIER_FAILED = (code = 95): ValidatorStatus => ({
  restartCount: 1,
  state: { terminated: { exitCode: 0, reason: "Completed" } },
  lastState: failedRun(code),
});
const RUNNING_AFTER_FAILURE = (code = 95): ValidatorStatus => ({
  ready: false,
  restartCount: 1,
  state: { running: { startedAt: kubeletTime() } },
  lastState: failedRun(code),
});

interface Host {
  dirs: HostDirs;
  boxes: Map<string, { netns: Netns; runtime: CniRuntime; a: Attachment }>;
  /**
   * Creates the pod in the API server and its sandbox through the host's chain as it is now;
   * kubelet then reports it ready.
   */
  start(p: PodObj): Promise<void>;
  redirected(p: PodObj): boolean;
  agent(extra?: string[]): { proc: InstallerProcess; port: number };
  status(port: number): Promise<any>;
  metrics(port: number): Promise<Map<string, number>>;
  close(): Promise<void>;
}

let subnet = 0;
function host(): Host {
  const dirs = cluster.dirs();
  const bridge = `mcr${uniq()}`.slice(0, 15);
  bridges.push(bridge);
  writeFileSync(
    join(dirs.net, PRIMARY),
    JSON.stringify(
      {
        cniVersion: "1.0.0",
        name: "node-net",
        plugins: [
          {
            type: "bridge",
            bridge,
            isGateway: true,
            ipMasq: false,
            ipam: {
              type: "host-local",
              subnet: `10.${150 + (process.pid % 90)}.${20 + subnet++}.0/24`,
              dataDir: join(dirs.root, "ipam"),
            },
          },
        ],
      },
      null,
      2,
    ),
  );
  const boxes: Host["boxes"] = new Map();
  const agents: InstallerProcess[] = [];
  return {
    dirs,
    boxes,
    async start(p) {
      // Scheduled, its sandbox being made: not ready to start containers yet.
      const making: PodObj = {
        ...p,
        status: {
          ...p.status,
          conditions: [{ type: "PodReadyToStartContainers", status: "False", lastTransitionTime: kubeletTime() }],
        },
      };
      cluster.api.addPod(making);
      const conflist = JSON.parse(readFileSync(join(dirs.net, PRIMARY), "utf8")) as Conflist;
      const runtime = new CniRuntime(conflist, [REFERENCE_PLUGINS, dirs.bin], join(dirs.root, "cni-cache"));
      const netns = Netns.create(`mcr-${uniq()}`);
      netnses.push(netns);
      const a: Attachment = {
        containerId: `c${uniq()}${uniq()}`,
        netns: netns.path,
        ifname: "eth0",
        cniArgs: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${p.metadata.namespace};K8S_POD_NAME=${p.metadata.name};K8S_POD_UID=${p.metadata.uid}`,
      };
      await runtime.add(a);
      boxes.set(p.metadata.name, { netns, runtime, a });
      // The sandbox is up: kubelet's next status says so (after the ADD, in whole seconds).
      p.status.conditions[0]!.lastTransitionTime = kubeletTime();
      cluster.api.updatePod(p);
    },
    // In iptables when the plugin applied the rules, in nftables when the agent did (auto).
    redirected: (p) => {
      const ns = boxes.get(p.metadata.name)!.netns;
      return [
        ["iptables-save", "-t", "nat"],
        ["nft", "list", "table", "ip", "meshcni"],
      ].some((argv) => ns.exec(argv).stdout.includes("PROXY_INIT_REDIRECT"));
    },
    agent(extra = []) {
      const port = freePort();
      const proc = startInstaller(
        dirs,
        [
          "--plugin-binary",
          PLUGIN,
          "--dest-net-dir",
          dirs.net,
          "--health-port",
          String(port),
          "--repair-grace-seconds",
          "1",
          "--resync-seconds",
          "3",
          // The validator's evidence evicts here (in-place, the default of an agent that applies
          // rules, has its own test: verify-netns.test.ts); a later --repair wins.
          "--repair",
          "evict",
          ...extra,
        ],
        cluster.env,
      );
      agents.push(proc);
      return { proc, port };
    },
    status: async (port) => (await fetch(`http://127.0.0.1:${port}/status`)).json(),
    metrics: async (port) => checkExposition(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()).samples,
    async close() {
      for (const a of agents) await a.stop("SIGKILL");
      for (const b of boxes.values()) await b.runtime.del(b.a).catch(() => {});
      for (const path of [...cluster.api.objects.keys()]) if (path.includes("/pods/")) cluster.api.objects.delete(path);
      dirs.cleanup();
    },
  };
}

const acts = () => ({ evicted: writes.evicted.length, deleted: writes.deleted.length, events: writes.events.length });
const noActs = { evicted: 0, deleted: 0, events: 0 };
function resetWrites(): void {
  writes.evicted.length = 0;
  writes.deleted.length = 0;
  writes.refused.length = 0;
  writes.events.length = 0;
  writes.order.length = 0;
  writes.refuse.clear();
}
const withLog = (a: InstallerProcess) => (e: Error) => {
  throw new Error(`${e.message}\n${a.log()}`);
};

describe.skipIf(!isRoot())("repair never removes a pod for what is absent (real network namespaces)", () => {
  test("reinstall: agent 1 meshes pods through the plugin, the DaemonSet is deleted and SIGTERM undoes, it comes back: agent 2 evicts and deletes nothing; the pods are handled (records kept), and with the records wiped, unverified, still nothing", async () => {
    resetWrites();
    const h = host();
    try {
      const first = h.agent();
      await until(() => isChainedIn(h.dirs, PRIMARY), 15_000, "meshcni chained").catch(withLog(first.proc));
      const meshed = [pod("web-1"), pod("voting-1"), pod("emoji-1")];
      const plain = pod("plain-1", { meshed: false });
      for (const p of [...meshed, plain]) await h.start(p);
      for (const p of meshed) expect(h.redirected(p)).toBe(true);
      expect(h.redirected(plain)).toBe(false);
      const records = readdirSync(join(h.dirs.state, "containers")).sort();
      expect(records.length).toBe(4);

      // meshcni is removed: the DaemonSet is gone, SIGTERM undoes the chain, the binary and the kubeconfig.
      cluster.setDaemonSet("absent");
      expect(await first.proc.stop("SIGTERM")).toBe(0);
      expect(first.proc.log()).toContain("meshcni is uninstalled from this node");
      expect(isChainedIn(h.dirs, PRIMARY)).toBe(false);
      // The records stay; the pods keep their rules.
      expect(readdirSync(join(h.dirs.state, "containers")).sort()).toEqual(records);
      for (const p of meshed) expect(h.redirected(p)).toBe(true);

      // meshcni is installed again.
      cluster.setDaemonSet("present");
      const second = h.agent();
      await second.proc.waitForLog(/repair is active/, 20_000);
      await Bun.sleep(4000); // past the confirmation delay, several rounds
      expect(acts()).toEqual(noActs);
      for (const p of [...meshed, plain]) expect(cluster.api.objects.has(podPath(p))).toBe(true);
      const s2 = await h.status(second.port);
      expect(s2.repair).toEqual({
        mode: "evict",
        active: true,
        bypassing: [],
        unverified: [],
        repaired: 0,
        refusals: 0,
      });
      expect(s2.pods.containers.map((c: any) => c.name).sort()).toEqual(["emoji-1", "plain-1", "voting-1", "web-1"]);
      expect((await h.metrics(second.port)).get("meshcni_agent_unverified_pods")).toBe(0);
      expect(await second.proc.stop("SIGTERM")).toBe(0); // the DaemonSet is there: nothing undone

      // The records are lost (as an older meshcni's undo removed them): unverified, still nothing.
      rmSync(join(h.dirs.state, "containers"), { recursive: true });
      const third = h.agent();
      await third.proc.waitForLog(/repair is active/, 20_000);
      await third.proc.waitForLog(/repair: 3 meshed pod\(s\) of node node-a are unverified/, 10_000);
      await Bun.sleep(3000);
      expect(acts()).toEqual(noActs);
      for (const p of [...meshed, plain]) expect(cluster.api.objects.has(podPath(p))).toBe(true);
      const s3 = await h.status(third.port);
      expect(s3.repair.bypassing).toEqual([]);
      expect(s3.repair.unverified.map((u: any) => `${u.namespace}/${u.name} ${u.uid}`).sort()).toEqual(
        meshed.map(key).sort(),
      );
      expect(s3.repair.unverified[0].why).toStartWith("no record of an ADD for its sandbox on this node");
      expect((await h.metrics(third.port)).get("meshcni_agent_unverified_pods")).toBe(3);
      for (const p of meshed) expect(h.redirected(p)).toBe(true);
    } finally {
      await h.close();
    }
  }, 120_000);

  test("a wiped state folder, with the chain and the pods' network namespaces kept: nothing is evicted or deleted, the pods are unverified", async () => {
    resetWrites();
    const h = host();
    try {
      const first = h.agent();
      await until(() => isChainedIn(h.dirs, PRIMARY), 15_000, "meshcni chained").catch(withLog(first.proc));
      const meshed = [pod("web-2"), pod("voting-2")];
      for (const p of meshed) await h.start(p);
      // The agent dies; the host's state folder is wiped; the chain and the pods stay as they were.
      first.proc.proc.kill("SIGKILL");
      await first.proc.stop();
      rmSync(h.dirs.state, { recursive: true });
      expect(isChainedIn(h.dirs, PRIMARY)).toBe(true);
      const second = h.agent();
      await second.proc.waitForLog(/repair is active/, 20_000);
      await second.proc.waitForLog(/repair: 2 meshed pod\(s\) of node node-a are unverified/, 10_000);
      await Bun.sleep(3000);
      expect(acts()).toEqual(noActs);
      const s = await h.status(second.port);
      expect(s.repair.unverified.map((u: any) => u.name).sort()).toEqual(["voting-2", "web-2"]);
      expect(s.repair.bypassing).toEqual([]);
      for (const p of meshed) {
        expect(cluster.api.objects.has(podPath(p))).toBe(true);
        expect(h.redirected(p)).toBe(true);
      }
    } finally {
      await h.close();
    }
  }, 90_000);

  test("node start: pods that started before meshcni was chained are unverified, never removed; the startup taint comes off only once the agent sees the node's pods", async () => {
    resetWrites();
    const h = host();
    cluster.api.objects.set(NODE_PATH, {
      apiVersion: "v1",
      kind: "Node",
      metadata: { name: "node-a", resourceVersion: "500", labels: { "kubernetes.io/os": "linux" } },
      spec: { taints: [{ key: TAINT, effect: "NoSchedule" }, OTHER_TAINT] },
    });
    const nodeTaints = () =>
      ((cluster.api.objects.get(NODE_PATH) as { spec: { taints?: { key: string }[] } }).spec.taints ?? []).map(
        (t) => t.key,
      );
    try {
      // Sandboxes made by the host's network plugin alone, as kubelet did at node start.
      const early = [
        pod("web-3", { startTime: "2026-11-24T08:00:00Z" }),
        pod("voting-3", { startTime: "2026-11-24T08:00:00Z" }),
      ];
      for (const p of early) await h.start(p);
      for (const p of early) expect(h.redirected(p)).toBe(false);
      cluster.api.faults.set("/api/v1/pods", { kind: "status", code: 503 });
      const agent = h.agent(["--startup-taint", TAINT]);
      await until(() => isChainedIn(h.dirs, PRIMARY), 15_000, "meshcni chained").catch(withLog(agent.proc));
      await Bun.sleep(3000);
      expect(nodeTaints()).toEqual([TAINT, OTHER_TAINT.key]);
      expect((await h.status(agent.port)).repair).toEqual({
        mode: "evict",
        active: false,
        waitingFor: "the watch cache is not in sync",
        bypassing: [],
        unverified: [],
        repaired: 0,
        refusals: 0,
      });

      cluster.api.faults.delete("/api/v1/pods");
      await until(() => nodeTaints().length === 1, 20_000, "the taint removed").catch(withLog(agent.proc));
      expect(nodeTaints()).toEqual([OTHER_TAINT.key]);
      const applied = writes.patches.filter((p) => p.applied);
      expect((applied.at(-1)!.ops as unknown[])[0]).toEqual({
        op: "test",
        path: "/metadata/resourceVersion",
        value: "500",
      });
      await agent.proc.waitForLog(/repair: 2 meshed pod\(s\) of node node-a are unverified/, 15_000);
      await Bun.sleep(3000);
      expect(acts()).toEqual(noActs);
      for (const p of early) expect(cluster.api.objects.has(podPath(p))).toBe(true);
      expect((await h.status(agent.port)).repair.unverified.map((u: any) => u.name).sort()).toEqual([
        "voting-3",
        "web-3",
      ]);
      // A pod that starts now goes through the chain: handled.
      const late = pod("emoji-3");
      await h.start(late);
      expect(h.redirected(late)).toBe(true);
      await until(
        async () =>
          (await h.status(agent.port)).repair.unverified.length === 2 &&
          (await h.status(agent.port)).pods.handled === 1,
        10_000,
        "the new pod handled",
      );
    } finally {
      cluster.api.objects.set(NODE_PATH, {
        apiVersion: "v1",
        kind: "Node",
        metadata: { name: "node-a", labels: { "kubernetes.io/os": "linux", "kubernetes.io/hostname": "node-a" } },
        spec: {},
      });
      await h.close();
    }
  }, 90_000);
});

describe.skipIf(!isRoot())("repair acts on the validator's latest run (real network namespaces)", () => {
  test("--repair evict (the default where the agent does not apply rules): the pod whose validator's latest run failed (95) is evicted, an Event first; an earlier failure before a success, and a run in progress after a failure, are not; a PodDisruptionBudget's refusal is reported and tried again", async () => {
    resetWrites();
    const h = host();
    try {
      const agent = h.agent(["--repair-retry-seconds", "2"]);
      await until(() => isChainedIn(h.dirs, PRIMARY), 15_000, "meshcni chained").catch(withLog(agent.proc));
      const failed = pod("web-4");
      const earlier = pod("voting-4");
      const running = pod("emoji-4");
      const budgeted = pod("vote-bot-4");
      for (const p of [failed, earlier, running, budgeted]) await h.start(p);
      await agent.proc.waitForLog(/repair is active/, 20_000);
      writes.refuse.add(`emojivoto/${budgeted.metadata.name}`);
      // kubelet reports the validators' runs.
      const report = (p: PodObj, v: ValidatorStatus) => {
        Object.assign(p.status.initContainerStatuses[0]!, v);
        cluster.api.updatePod(p);
      };
      report(failed, LATEST_FAILED(95));
      report(earlier, EARLIER_FAILED(95));
      report(running, RUNNING_AFTER_FAILURE(95));
      report(budgeted, LATEST_FAILED(95));

      // At least: on a loaded machine the retry (2 s later) may come before this looks.
      await until(
        () => writes.evicted.length >= 1 && writes.refused.length >= 1,
        15_000,
        "the eviction and the refusal",
      ).catch(withLog(agent.proc));
      expect(writes.evicted).toEqual([key(failed)]);
      expect(writes.deleted).toEqual([]);
      // Each act's Event came first.
      expect(writes.order.filter((o) => o.endsWith("/web-4"))).toEqual([
        "event emojivoto/web-4",
        "evict emojivoto/web-4",
      ]);
      expect(writes.order.filter((o) => o.endsWith("/vote-bot-4")).slice(0, 2)).toEqual([
        "event emojivoto/vote-bot-4",
        "refused emojivoto/vote-bot-4",
      ]);
      expect(writes.events.find((e) => e.involvedObject.name === failed.metadata.name)).toMatchObject({
        type: "Warning",
        reason: "MeshcniRepair",
        involvedObject: { uid: failed.metadata.uid },
        message: expect.stringMatching(
          /^meshcni evicts this pod on node node-a so that its controller creates it again with the mesh's redirect: its linkerd-network-validator init container's latest run failed \(exit code 95/,
        ),
      });
      expect(agent.proc.log()).toMatch(
        /repair: evicted pod emojivoto\/web-4 \(uid [0-9a-f-]+\): its linkerd-network-validator init container's latest run failed/,
      );

      // The refusal: on /status with the server's message, counted, said on the log.
      await until(async () => (await h.status(agent.port)).repair.refusals >= 1, 5000, "the refusal noted");
      const s = await h.status(agent.port);
      const refused = s.repair.bypassing.find((b: any) => b.name === budgeted.metadata.name);
      expect(refused).toMatchObject({
        action: "refused",
        refusal: { message: PDB_REFUSAL, retryAt: expect.any(String) },
      });
      expect(s.repair.refusals).toBeGreaterThanOrEqual(1);
      expect((await h.metrics(agent.port)).get("meshcni_repair_refusals_total")).toBeGreaterThanOrEqual(1);
      expect(agent.proc.log()).toContain(
        `repair: the eviction of pod emojivoto/vote-bot-4 (uid ` +
          `${budgeted.metadata.uid}) was refused (trying again later): ${PDB_REFUSAL}`,
      );
      // Tried again after --repair-retry-seconds; allowed once the budget allows it.
      await until(() => writes.refused.length >= 2, 10_000, "the second try").catch(withLog(agent.proc));
      writes.refuse.clear();
      await until(() => writes.evicted.length === 2, 15_000, "the eviction once allowed").catch(withLog(agent.proc));
      expect(writes.evicted).toEqual([key(failed), key(budgeted)]);
      // Each try an Event, then the act: refused at least twice, then evicted.
      const refusals = writes.refused.length;
      expect(refusals).toBeGreaterThanOrEqual(2);
      expect(writes.order.filter((o) => o.endsWith("/vote-bot-4"))).toEqual([
        ...Array.from({ length: refusals }, () => [
          "event emojivoto/vote-bot-4",
          "refused emojivoto/vote-bot-4",
        ]).flat(),
        "event emojivoto/vote-bot-4",
        "evict emojivoto/vote-bot-4",
      ]);

      // The others stay, with their rules; a run in progress decides nothing yet.
      await Bun.sleep(2000);
      for (const p of [earlier, running]) {
        expect(cluster.api.objects.has(podPath(p))).toBe(true);
        expect(h.redirected(p)).toBe(true);
      }
      expect(writes.evicted.length).toBe(2);
      const after = await h.status(agent.port);
      expect(after.repair).toMatchObject({ repaired: 2, refusals, unverified: [] });
      expect((await h.metrics(agent.port)).get("meshcni_repairs_total")).toBe(2);
      expect(writes.deleted).toEqual([]);
    } finally {
      await h.close();
    }
  }, 120_000);
});

describe("--repair delete and --repair off", () => {
  /** An agent for Istio whose pods never had a sandbox through this host: what counts is their validator. */
  function istioAgent(dirs: HostDirs, mode: string) {
    const conf = join(dirs.root, "plugin-config.json");
    writeFileSync(
      conf,
      JSON.stringify({
        type: "meshcni",
        name: "meshcni",
        mesh: "istio",
        kubernetes: { exclude_namespaces: ["kube-system"] },
      }),
    );
    writeFileSync(
      join(dirs.net, PRIMARY),
      JSON.stringify({ cniVersion: "1.0.0", name: "node-net", plugins: [{ type: "bridge", bridge: "unused0" }] }),
    );
    const fake = join(dirs.root, "meshcni-build");
    writeFileSync(fake, "#!/bin/sh\n", { mode: 0o755 });
    const port = freePort();
    const proc = startInstaller(
      dirs,
      [
        "--plugin-binary",
        fake,
        "--plugin-config",
        conf,
        "--health-port",
        String(port),
        "--repair",
        mode,
        "--repair-grace-seconds",
        "0",
        "--resync-seconds",
        "3",
      ],
      cluster.env,
    );
    return { proc, port };
  }

  test("delete: istio-validation's latest run failed (126): deleted with the UID precondition, an Event first, no eviction; its earlier failure before a success is not", async () => {
    resetWrites();
    const dirs = cluster.dirs();
    const bad = pod("reviews-1", { ns: "bookinfo", mesh: "istio", validator: LATEST_FAILED(126) });
    const fine = pod("ratings-1", { ns: "bookinfo", mesh: "istio", validator: EARLIER_FAILED(126) });
    for (const p of [bad, fine]) cluster.api.addPod(p);
    const a = istioAgent(dirs, "delete");
    try {
      await until(() => writes.deleted.length === 1, 20_000, "the deletion").catch(withLog(a.proc));
      await Bun.sleep(2500);
      expect(writes.deleted).toEqual([key(bad)]);
      expect(writes.evicted).toEqual([]);
      expect(writes.order).toEqual(["event bookinfo/reviews-1", "delete bookinfo/reviews-1"]);
      expect(writes.events[0]!.message).toStartWith(
        "meshcni deletes this pod on node node-a so that its controller creates it again",
      );
      expect(cluster.api.objects.has(podPath(fine))).toBe(true);
      expect(a.proc.log()).toMatch(
        /repair: deleted pod bookinfo\/reviews-1 \(uid [0-9a-f-]+\): its istio-validation init container's latest run failed \(exit code 126/,
      );
      // ratings-1 has no record on this node: unverified, and kept.
      const s = (await (await fetch(`http://127.0.0.1:${a.port}/status`)).json()) as any;
      expect(s.repair).toMatchObject({
        mode: "delete",
        repaired: 1,
        unverified: [{ name: "ratings-1", uid: fine.metadata.uid }],
      });
    } finally {
      await a.proc.stop("SIGTERM");
      for (const p of [bad, fine]) cluster.api.objects.delete(podPath(p));
      dirs.cleanup();
    }
  }, 60_000);

  test("off: the pod whose validator's latest run failed is reported on /status, /metrics and stdout; nothing is written", async () => {
    resetWrites();
    const dirs = cluster.dirs();
    const stray = pod("productpage-1", { ns: "bookinfo", mesh: "istio", validator: LATEST_FAILED(126) });
    const unknown = pod("details-1", { ns: "bookinfo", mesh: "istio" });
    for (const p of [stray, unknown]) cluster.api.addPod(p);
    const a = istioAgent(dirs, "off");
    try {
      await a.proc.waitForLog(
        /repair: pod bookinfo\/productpage-1 bypasses the mesh \(--repair off: reported only\): its istio-validation init container's latest run failed \(exit code 126/,
        20_000,
      );
      await Bun.sleep(2000);
      const s = (await (await fetch(`http://127.0.0.1:${a.port}/status`)).json()) as any;
      expect(s.repair.mode).toBe("off");
      expect(s.repair.bypassing).toEqual([
        {
          namespace: "bookinfo",
          name: "productpage-1",
          uid: stray.metadata.uid,
          reason: expect.stringContaining("istio-validation"),
          action: "reported",
          since: expect.any(String),
        },
      ]);
      expect(s.repair.unverified.map((u: any) => u.name)).toEqual(["details-1"]);
      const m = checkExposition(await (await fetch(`http://127.0.0.1:${a.port}/metrics`)).text()).samples;
      expect([
        m.get("meshcni_agent_bypassing_pods"),
        m.get("meshcni_agent_unverified_pods"),
        m.get("meshcni_repairs_total"),
      ]).toEqual([1, 1, 0]);
      expect(acts()).toEqual(noActs);
      expect(existsSync(join(dirs.state, "containers"))).toBe(false);
    } finally {
      await a.proc.stop("SIGTERM");
      for (const p of [stray, unknown]) cluster.api.objects.delete(podPath(p));
      dirs.cleanup();
    }
  }, 60_000);
});
