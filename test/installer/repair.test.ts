// Repair and the startup taint with real parts: the compiled agent (dist/meshcni-installer)
// against the stand-in API server (with the writes of test/support/apiserver-writes.ts), pods in
// real network namespaces wired by the reference bridge plugin through the host's primary chain
// only (meshcni not yet chained), as at node start. Once the agent has chained meshcni, knows the
// node's pods and the grace period has passed, exactly the meshed pods that never went through
// the plugin are deleted, each with an Event; when the test creates them again as their
// controller would, they go through the chain and get the redirect in their netns, and are left
// alone. Handled, unmeshed, hostNetwork, mirror and other-node pods are never touched. The
// startup taint comes off only once the agent can see the node's pods. Needs root.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { PodRecord } from "../../internal/agent/protocol.ts";
import { addWriteRoutes, type Writes } from "../support/apiserver-writes.ts";
import { type Attachment, CniRuntime, type Conflist } from "../support/cni-runtime.ts";
import { isRoot, Netns, sh, uniq } from "../support/netns.ts";
import { REFERENCE_PLUGINS } from "../support/pod-lab.ts";
import { checkExposition } from "../support/prometheus.ts";
import { type Cluster, ensureBuilt, freePort, type HostDirs, isChainedIn, NODE_PATH, PLUGIN, startCluster, startInstaller, until } from "./harness.ts";

const TAINT = "meshcni.io/agent-not-ready";
const OTHER_TAINT = { key: "example.com/dedicated", value: "mesh", effect: "NoSchedule" };
const PRIMARY = "10-bridge.conflist";

let cluster: Cluster;
let writes: Writes;
const netnses: Netns[] = [];
let bridge = "";

beforeAll(async () => {
  ensureBuilt();
  cluster = await startCluster();
  writes = addWriteRoutes(cluster.api);
  cluster.setDaemonSet("present");
}, 120_000);
afterAll(async () => {
  for (const n of netnses) n.delete();
  if (bridge) sh(["ip", "link", "del", bridge]);
  await cluster?.close();
});

let uidN = 0;
const uid = () => `5e1f${String(++uidN).padStart(4, "0")}-aaaa-4bbb-8ccc-${Math.floor(Math.random() * 2 ** 48).toString(16).padStart(12, "0")}`;

/** A pod as the API server holds it once its sandbox is up. */
function pod(name: string, o: { ns?: string; meshed?: boolean; node?: string; hostNetwork?: boolean; annotations?: Record<string, string>; startTime?: string } = {}) {
  const meshed = o.meshed ?? true;
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name, namespace: o.ns ?? "emojivoto", uid: uid(), resourceVersion: "100",
      annotations: { ...(meshed ? { "linkerd.io/inject": "enabled" } : {}), ...o.annotations },
      ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: `${name}-rs`, uid: "rs", controller: true }],
    },
    spec: {
      nodeName: o.node ?? "node-a",
      ...(o.hostNetwork ? { hostNetwork: true } : {}),
      initContainers: meshed ? [
        { name: "linkerd-network-validator", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1" },
        { name: "linkerd-proxy", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1", restartPolicy: "Always" },
      ] : [],
      containers: [{ name: "web", image: "buoyantio/emojivoto-web:v11" }],
    },
    status: {
      phase: "Running",
      startTime: o.startTime ?? "2026-11-24T08:00:00Z",
      conditions: [{ type: "PodReadyToStartContainers", status: "True" }, { type: "Ready", status: "True" }],
      containerStatuses: [{ name: "web", ready: true, restartCount: 0, state: { running: { startedAt: "2026-11-24T08:00:05Z" } } }],
    },
  };
}
type PodObj = ReturnType<typeof pod>;

const podPath = (p: PodObj) => `/api/v1/namespaces/${p.metadata.namespace}/pods/${p.metadata.name}`;

/** Creates the pod's netns and runs ADD through the host's chain as it is now in `dirs.net`. */
async function sandbox(dirs: HostDirs, p: PodObj): Promise<{ netns: Netns; runtime: CniRuntime; a: Attachment }> {
  const conflist = JSON.parse(readFileSync(join(dirs.net, PRIMARY), "utf8")) as Conflist;
  const runtime = new CniRuntime(conflist, [REFERENCE_PLUGINS, dirs.bin], join(dirs.root, "cni-cache"));
  const netns = Netns.create(`mcr-${uniq()}`);
  netnses.push(netns);
  const a: Attachment = { containerId: `c${uniq()}`, netns: netns.path, ifname: "eth0", cniArgs: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${p.metadata.namespace};K8S_POD_NAME=${p.metadata.name};K8S_POD_UID=${p.metadata.uid}` };
  await runtime.add(a);
  return { netns, runtime, a };
}

const redirected = (n: Netns) => n.exec(["iptables-save", "-t", "nat"]).stdout.includes("PROXY_INIT_REDIRECT");
const nodeTaints = () => ((cluster.api.objects.get(NODE_PATH) as { spec: { taints?: { key: string }[] } }).spec.taints ?? []).map((t) => t.key);
const deletedNames = () => writes.deleted.map((d) => d.split(" ")[0]).sort();

describe.skipIf(!isRoot())("repair on a node where pods started before meshcni was chained", () => {
  test("exactly the meshed pods without an ADD are deleted, with an Event; recreated, they get the redirect; the startup taint comes off only once the agent sees the node's pods", async () => {
    const dirs = cluster.dirs();
    bridge = `mcr${uniq()}`.slice(0, 15);
    // The host's network plugin alone, as kubelet found it at node start.
    writeFileSync(join(dirs.net, PRIMARY), JSON.stringify({
      cniVersion: "1.0.0", name: "node-net",
      plugins: [{ type: "bridge", bridge, isGateway: true, ipMasq: false, ipam: { type: "host-local", subnet: `10.${150 + (process.pid % 90)}.7.0/24`, dataDir: join(dirs.root, "ipam") } }],
    }, null, 2));
    cluster.api.addNamespace({ metadata: { name: "emojivoto" } });
    cluster.api.objects.set(NODE_PATH, {
      apiVersion: "v1", kind: "Node",
      metadata: { name: "node-a", resourceVersion: "500", labels: { "kubernetes.io/os": "linux" } },
      spec: { taints: [{ key: TAINT, effect: "NoSchedule" }, OTHER_TAINT] },
    });

    const bypassing = [pod("web-1"), pod("voting-1")];
    const handled = pod("emoji-1");
    const plain = pod("plain-1", { meshed: false });
    const hostNet = pod("host-1", { hostNetwork: true });
    const mirror = pod("mirror-1", { annotations: { "kubernetes.io/config.mirror": "0f3c", "kubernetes.io/config.source": "file" } });
    const otherNode = pod("far-1", { node: "node-b" });
    const all = [...bypassing, handled, plain, hostNet, mirror, otherNode];
    for (const p of all) cluster.api.addPod(p);
    const boxes = new Map<string, Awaited<ReturnType<typeof sandbox>>>();
    for (const p of [...bypassing, handled, plain, mirror]) boxes.set(p.metadata.name, await sandbox(dirs, p));
    // emoji-1 went through the plugin: its record in the state folder, as the plugin writes it.
    mkdirSync(join(dirs.state, "containers"), { recursive: true });
    const rec: PodRecord = { v: 1, containerId: boxes.get("emoji-1")!.a.containerId, namespace: "emojivoto", name: "emoji-1", uid: handled.metadata.uid, decision: "meshed", reason: "runs linkerd-proxy", time: new Date().toISOString() };
    writeFileSync(join(dirs.state, "containers", `${rec.containerId}.json`), JSON.stringify(rec));
    for (const b of boxes.values()) expect(redirected(b.netns)).toBe(false);

    // The agent cannot list the node's pods at first: the taint must stay, nothing is deleted.
    cluster.api.faults.set("/api/v1/pods", { kind: "status", code: 503 });
    const port = freePort();
    const agent = startInstaller(dirs, ["--plugin-binary", PLUGIN, "--dest-net-dir", dirs.net, "--health-port", String(port), "--repair-grace-seconds", "1", "--startup-taint", TAINT, "--resync-seconds", "3"], cluster.env);
    try {
      await until(() => isChainedIn(dirs, PRIMARY), 15_000, "meshcni chained").catch((e) => { throw new Error(`${e.message}\n${agent.log()}`); });
      await Bun.sleep(3500);
      expect(nodeTaints()).toEqual([TAINT, OTHER_TAINT.key]);
      expect(writes.deleted).toEqual([]);
      const waiting = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
      expect(waiting.repair).toEqual({ mode: "delete", active: false, bypassing: [], repaired: 0 });

      cluster.api.faults.delete("/api/v1/pods");
      await until(() => writes.deleted.length >= 2, 20_000, "the repair").catch((e) => { throw new Error(`${e.message}\n${agent.log()}`); });
      // Only its own taint went, by a patch that tested the node's resourceVersion.
      expect(nodeTaints()).toEqual([OTHER_TAINT.key]);
      const applied = writes.patches.filter((p) => p.applied);
      expect(applied.length).toBe(1);
      expect((applied[0]!.ops as unknown[])[0]).toEqual({ op: "test", path: "/metadata/resourceVersion", value: "500" });
      // A few more rounds: nobody else.
      await Bun.sleep(5000);
      expect(deletedNames()).toEqual(["emojivoto/voting-1", "emojivoto/web-1"]);
      expect(writes.deleted).toEqual(expect.arrayContaining(bypassing.map((p) => `emojivoto/${p.metadata.name} ${p.metadata.uid}`)));
      for (const p of [handled, plain, hostNet, mirror, otherNode]) expect(cluster.api.objects.has(podPath(p))).toBe(true);
      expect(writes.events.map((e) => [e.reason, e.type, e.involvedObject.name, e.involvedObject.uid]).sort()).toEqual(
        bypassing.map((p) => ["MeshcniRepair", "Warning", p.metadata.name, p.metadata.uid]).sort());
      expect(writes.events[0]!.message).toMatch(/^meshcni deleted this pod on node node-a so that its controller creates it again with the mesh's redirect: started before meshcni was chained/);
      expect(agent.log()).toMatch(/repair: deleted pod emojivoto\/web-1 \(uid [0-9a-f-]+\): started before meshcni was chained/);
      expect(agent.log()).toContain(`removed the startup taint ${TAINT} from node node-a`);

      // Their controller creates them again: new UIDs, a new sandbox each, now through meshcni.
      const again = bypassing.map((p) => pod(p.metadata.name, { startTime: new Date().toISOString() }));
      for (const p of again) {
        cluster.api.addPod(p);
        const box = await sandbox(dirs, p);
        expect(redirected(box.netns)).toBe(true);
      }
      await Bun.sleep(7000); // two lists and a few rounds later
      expect(deletedNames()).toEqual(["emojivoto/voting-1", "emojivoto/web-1"]);
      for (const p of again) expect(cluster.api.objects.has(podPath(p))).toBe(true);

      const status = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
      expect(status.repair).toEqual({ mode: "delete", active: true, bypassing: [], repaired: 2 });
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      checkExposition(metrics);
      expect(metrics).toContain("\nmeshcni_repairs_total 2\n");
      expect(metrics).toContain("\nmeshcni_agent_bypassing_pods 0\n");

      // The agent restarts (a rollout): the pods that started while the first one ran are not
      // taken for pods that came before the chain (the chain's time is kept in the state folder).
      expect(await agent.stop("SIGTERM")).toBe(0);
      const port2 = freePort();
      const second = startInstaller(dirs, ["--plugin-binary", PLUGIN, "--dest-net-dir", dirs.net, "--health-port", String(port2), "--repair-grace-seconds", "1", "--resync-seconds", "3"], cluster.env);
      try {
        await second.waitForLog(/repair is active/, 15_000);
        await Bun.sleep(5000);
        expect(deletedNames()).toEqual(["emojivoto/voting-1", "emojivoto/web-1"]);
        const s2 = (await (await fetch(`http://127.0.0.1:${port2}/status`)).json()) as any;
        expect(s2.repair).toEqual({ mode: "delete", active: true, bypassing: [], repaired: 0 });
      } finally {
        await second.stop("SIGTERM");
      }
    } finally {
      await agent.stop("SIGTERM");
      for (const b of boxes.values()) await b.runtime.del(b.a).catch(() => {});
      dirs.cleanup();
    }
  }, 120_000);
});

describe("--repair off", () => {
  test("reports the bypassing pods on /status, /metrics and stdout, deletes nothing", async () => {
    for (const path of [...cluster.api.objects.keys()]) if (path.includes("/pods/")) cluster.api.objects.delete(path);
    const dirs = cluster.dirs();
    writeFileSync(join(dirs.net, PRIMARY), JSON.stringify({ cniVersion: "1.0.0", name: "node-net", plugins: [{ type: "bridge", bridge: "unused0" }] }));
    const stray = pod("stray-1", { ns: "offns" });
    cluster.api.addPod(stray);
    const fake = join(dirs.root, "meshcni-build");
    writeFileSync(fake, "#!/bin/sh\n", { mode: 0o755 });
    const port = freePort();
    const before = writes.deleted.length;
    const agent = startInstaller(dirs, ["--plugin-binary", fake, "--health-port", String(port), "--repair", "off", "--repair-grace-seconds", "0", "--resync-seconds", "3"], cluster.env);
    try {
      await agent.waitForLog(/repair: pod offns\/stray-1 bypasses the mesh \(--repair off: reported only\): started before meshcni was chained/, 20_000);
      const status = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
      expect(status.repair.mode).toBe("off");
      expect(status.repair.bypassing).toEqual([{ namespace: "offns", name: "stray-1", uid: stray.metadata.uid, reason: expect.stringContaining("started before meshcni was chained"), action: "reported", since: expect.any(String) }]);
      expect(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()).toContain("\nmeshcni_agent_bypassing_pods 1\n");
      expect(writes.deleted.length).toBe(before);
      expect(cluster.api.objects.has(podPath(stray))).toBe(true);
    } finally {
      await agent.stop("SIGTERM");
      cluster.api.objects.delete(podPath(stray));
      dirs.cleanup();
    }
  }, 60_000);
});
