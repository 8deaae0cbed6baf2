// Verify and repair in place with real parts: the compiled agent (dist/meshcni-installer, applying
// rules itself as root) against the stand-in API server, pods in real network namespaces wired by
// the reference bridge plugin through the host's chain. Rules removed by hand from a meshed pod's
// namespace are back within one verification period (an Event, the pod neither evicted nor
// deleted, real TCP to the pod's app port reaching its proxy again); a pod that started before the
// chain is found by its address and gets its rules; a pod of another node, a hostNetwork pod and
// an unmeshed pod are never touched; --repair off only reports; --verify-seconds 0 runs no round.
// Needs root for the network namespaces.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { addWriteRoutes, type Writes } from "../support/apiserver-writes.ts";
import { type Attachment, CniRuntime, type Conflist } from "../support/cni-runtime.ts";
import { isRoot, type Listener, listen, Netns, probe, sh, uniq } from "../support/netns.ts";
import { REFERENCE_PLUGINS } from "../support/pod-lab.ts";
import { checkExposition } from "../support/prometheus.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type InstallerProcess,
  isChainedIn,
  PLUGIN,
  startCluster,
  startInstaller,
  until,
} from "./harness.ts";

const PRIMARY = "10-bridge.conflist";

let cluster: Cluster;
let writes: Writes;
const netnses: Netns[] = [];
const bridges: string[] = [];
const listeners: Listener[] = [];

beforeAll(async () => {
  ensureBuilt();
  cluster = await startCluster();
  writes = addWriteRoutes(cluster.api);
  cluster.setDaemonSet("present");
  cluster.api.addNamespace({ metadata: { name: "emojivoto" } });
}, 120_000);
afterAll(async () => {
  for (const l of listeners) l.stop();
  for (const n of netnses) n.delete();
  for (const b of bridges) sh(["ip", "link", "del", b]);
  await cluster?.close();
});

let uidN = 0;
const uid = () => `7e1f${String(++uidN).padStart(4, "0")}-aaaa-4bbb-8ccc-${uniq().padStart(12, "0").slice(-12)}`;
const kubeletTime = (ms = Date.now()) => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z");

interface PodOpts {
  meshed?: boolean;
  node?: string;
  hostNetwork?: boolean;
  /** The validator's latest run failed (exit 95: no redirect). */
  failed?: boolean;
  /** Its status names no address (the agent cannot find its namespace). */
  noIp?: boolean;
}

function pod(name: string, o: PodOpts = {}) {
  const meshed = o.meshed ?? true;
  return {
    apiVersion: "v1",
    kind: "Pod",
    noIp: o.noIp ?? false,
    metadata: {
      name,
      namespace: "emojivoto",
      uid: uid(),
      resourceVersion: "100",
      annotations: meshed ? { "linkerd.io/inject": "enabled" } : ({} as Record<string, string>),
      ownerReferences: [{ apiVersion: "apps/v1", kind: "ReplicaSet", name: `${name}-rs`, uid: "rs", controller: true }],
    },
    spec: {
      nodeName: o.node ?? "node-a",
      ...(o.hostNetwork ? { hostNetwork: true } : {}),
      initContainers: meshed
        ? [
            { name: "linkerd-network-validator", image: "proxy:1" },
            { name: "linkerd-proxy", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1", restartPolicy: "Always" },
          ]
        : [],
      containers: [{ name: "web", image: "buoyantio/emojivoto-web:v11" }],
    },
    status: {
      phase: "Running",
      startTime: kubeletTime(),
      podIP: "",
      podIPs: [] as { ip: string }[],
      conditions: [
        { type: "PodReadyToStartContainers", status: "True", lastTransitionTime: kubeletTime() },
        { type: "Ready", status: "True" },
      ],
      initContainerStatuses: meshed
        ? [
            o.failed
              ? {
                  name: "linkerd-network-validator",
                  ready: false,
                  restartCount: 2,
                  state: { waiting: { reason: "CrashLoopBackOff" } },
                  lastState: { terminated: { exitCode: 95, reason: "Error", finishedAt: kubeletTime() } },
                }
              : {
                  name: "linkerd-network-validator",
                  ready: true,
                  restartCount: 0,
                  state: { terminated: { exitCode: 0, reason: "Completed" } },
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

let subnet = 0;
function host() {
  const dirs = cluster.dirs();
  const bridge = `mcv${uniq()}`.slice(0, 15);
  bridges.push(bridge);
  const conflist = {
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
          subnet: `10.${150 + (process.pid % 90)}.${120 + subnet++}.0/24`,
          dataDir: join(dirs.root, "ipam"),
        },
      },
    ],
  };
  writeFileSync(join(dirs.net, PRIMARY), JSON.stringify(conflist, null, 2));
  const boxes = new Map<string, { netns: Netns; runtime: CniRuntime; a: Attachment; ip: string }>();
  const agents: InstallerProcess[] = [];
  return {
    dirs,
    boxes,
    /** The pod in the API server, its sandbox made through the host's chain as it is now, its IP in its status. */
    async start(p: PodObj) {
      cluster.api.addPod(p);
      const chain = JSON.parse(readFileSync(join(dirs.net, PRIMARY), "utf8")) as Conflist;
      const runtime = new CniRuntime(chain, [REFERENCE_PLUGINS, dirs.bin], join(dirs.root, "cni-cache"));
      const netns = Netns.create(`mcv-${uniq()}`);
      netnses.push(netns);
      const a: Attachment = {
        containerId: `c${uniq()}${uniq()}`,
        netns: netns.path,
        ifname: "eth0",
        cniArgs: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${p.metadata.namespace};K8S_POD_NAME=${p.metadata.name};K8S_POD_UID=${p.metadata.uid}`,
      };
      const result = (await runtime.add(a)) as { ips: { address: string }[] };
      const ip = result.ips[0]!.address.split("/")[0]!;
      boxes.set(p.metadata.name, { netns, runtime, a, ip });
      listeners.push(await listen(netns, { 4143: "proxy-inbound", 8080: "app" }));
      // Every pod's status names its sandbox's address (the hostNetwork pod's too): only the
      // rules that keep verify away from a pod protect the ones it must not touch.
      if (!p.noIp) {
        p.status.podIP = ip;
        p.status.podIPs = [{ ip }];
      }
      const ready = kubeletTime();
      p.status.conditions[0]!.lastTransitionTime = ready;
      // A validator runs once the sandbox is ready: its failure is this sandbox's (a failure
      // stamped at the pod's creation, a second earlier on a loaded machine, would be an older one's).
      const validator = p.status.initContainerStatuses[0] as { lastState?: { terminated?: { finishedAt: string } } };
      if (validator?.lastState?.terminated) validator.lastState.terminated.finishedAt = ready;
      cluster.api.updatePod(p);
      return ip;
    },
    /** What the pod's namespace holds in its nat table and meshcni's nftables tables. */
    rules: (p: PodObj) => {
      const ns = boxes.get(p.metadata.name)!.netns;
      const nat = ns
        .exec(["iptables-save", "-t", "nat"])
        .stdout.split("\n")
        .filter((l) => !l.startsWith("#"))
        .join("\n");
      return nat + ns.exec(["nft", "list", "ruleset"]).stdout;
    },
    redirected(p: PodObj) {
      return this.rules(p).includes("PROXY_INIT_REDIRECT");
    },
    /** Removes every rule from the pod's namespace, as an operator (or a stray tool) would by hand. */
    flush(p: PodObj) {
      const ns = boxes.get(p.metadata.name)!.netns;
      ns.exec(["iptables", "-t", "nat", "-F"]);
      ns.exec(["iptables", "-t", "nat", "-X"]);
      ns.exec(["nft", "flush", "ruleset"]);
    },
    /** Real TCP from the host to the pod's app port: "proxy-inbound port=4143" when redirected. */
    tcp: (p: PodObj) => probe(undefined, boxes.get(p.metadata.name)!.ip, 8080),
    agent(extra: string[] = []) {
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
          ...extra,
        ],
        cluster.env,
      );
      agents.push(proc);
      return { proc, port };
    },
    status: async (port: number) => (await fetch(`http://127.0.0.1:${port}/status`)).json() as Promise<any>,
    metrics: async (port: number) =>
      checkExposition(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()).samples,
    async close() {
      for (const a of agents) await a.stop("SIGKILL");
      for (const b of boxes.values()) await b.runtime.del(b.a).catch(() => {});
      for (const path of [...cluster.api.objects.keys()]) if (path.includes("/pods/")) cluster.api.objects.delete(path);
      dirs.cleanup();
    },
  };
}

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
const eventsOf = (p: PodObj) =>
  writes.events.filter((e: any) => e.involvedObject?.uid === p.metadata.uid) as {
    reason: string;
    type: string;
    message: string;
  }[];

describe.skipIf(!isRoot())("verify and repair in place (real network namespaces)", () => {
  test("rules removed by hand are back within one period (--verify-seconds 2): an Event, the pod kept, TCP reaches the proxy again", async () => {
    resetWrites();
    const h = host();
    try {
      const a = h.agent(["--verify-seconds", "2"]);
      await until(() => isChainedIn(h.dirs, PRIMARY), 15_000, "meshcni chained").catch(withLog(a.proc));
      const web = pod("web-v1");
      await h.start(web);
      expect(h.redirected(web)).toBe(true);
      expect(h.tcp(web)).toBe("proxy-inbound port=4143");
      // The agent checks right after the ADD it applied.
      await until(async () => (await h.status(a.port)).verify?.runs >= 1, 10_000, "a check after the ADD").catch(
        withLog(a.proc),
      );
      expect((await h.status(a.port)).verify.rewritten).toBe(0);

      h.flush(web);
      expect(h.redirected(web)).toBe(false);
      expect(h.tcp(web)).toBe("app port=8080");
      const flushedAt = Date.now();
      await until(() => h.redirected(web), 8_000, "the rules back").catch(withLog(a.proc));
      // Within one period (2 s) and the tick that picks it up; the bound leaves slack for a loaded
      // machine (each look at the rules is an iptables-save in the namespace).
      expect(Date.now() - flushedAt).toBeLessThan(6_000);
      expect(h.tcp(web)).toBe("proxy-inbound port=4143");
      await until(() => eventsOf(web).length > 0, 5_000, "the Event").catch(withLog(a.proc));
      const ev = eventsOf(web)[0]!;
      expect([ev.reason, ev.type]).toEqual(["MeshcniRepair", "Warning"]);
      expect(ev.message).toContain("missing or altered in its network namespace on node node-a");
      expect(ev.message).toContain("wrote them back; connections opened before keep their path until they close");
      expect(writes.evicted).toEqual([]);
      expect(writes.deleted).toEqual([]);
      expect(cluster.api.objects.has(podPath(web))).toBe(true);
      expect(a.proc.log()).toMatch(/verify: wrote \d+ rules back into pod emojivoto\/web-v1/);
      const s = await h.status(a.port);
      expect(s.repair.mode).toBe("in-place");
      expect(s.verify).toMatchObject({ periodSeconds: 2, mode: "in-place", rewritten: 1, failures: 0 });
      expect(s.verify.missing).toBeGreaterThanOrEqual(1);
      expect(s.verify.findings).toEqual([
        expect.objectContaining({ name: "web-v1", verdict: "missing", action: "rewritten", via: "record" }),
      ]);
      const m = await h.metrics(a.port);
      expect(m.get("meshcni_verify_rewrites_total")).toBe(1);
      expect(m.get("meshcni_verify_runs_total")).toBeGreaterThanOrEqual(2);
      // Afterwards the rounds find the rules in place and write nothing more.
      await until(async () => (await h.status(a.port)).verify.lastRound !== undefined, 6_000, "a full round");
      await Bun.sleep(2500);
      expect((await h.status(a.port)).verify.rewritten).toBe(1);
      expect(eventsOf(web).length).toBe(1);

      // Removed again: written back again (logged and counted), with no second Event within minutes.
      h.flush(web);
      await until(() => h.redirected(web), 8_000, "the rules back again").catch(withLog(a.proc));
      await until(async () => (await h.status(a.port)).verify.rewritten === 2, 5_000, "counted");
      expect(eventsOf(web).length).toBe(1);

      // The namespace goes (the pod is going away): evidence of nothing, nothing written or failed.
      h.boxes.get(web.metadata.name)!.netns.delete();
      await Bun.sleep(4500);
      const gone = (await h.status(a.port)).verify;
      expect([gone.rewritten, gone.failures]).toEqual([2, 0]);
      expect(gone.lastRound.gone).toBeGreaterThanOrEqual(1);
    } finally {
      await h.close();
    }
  }, 90_000);

  test("a pod started before the chain is found by its address and gets its rules; another node's, a hostNetwork and an unmeshed pod are never touched", async () => {
    resetWrites();
    const h = host();
    try {
      // Sandboxes made by the host's network plugin alone, before meshcni was chained.
      const early = pod("web-v2");
      const other = pod("web-other", { node: "node-b" });
      const hostNet = pod("web-hostnet", { hostNetwork: true });
      const plain = pod("plain-v2", { meshed: false });
      for (const p of [early, other, hostNet, plain]) await h.start(p);
      const before = new Map([other, hostNet, plain].map((p) => [p.metadata.name, h.rules(p)]));
      for (const p of [early, other, hostNet, plain]) expect(h.redirected(p)).toBe(false);
      expect(h.tcp(early)).toBe("app port=8080");

      const a = h.agent(["--verify-seconds", "2"]);
      await until(() => isChainedIn(h.dirs, PRIMARY), 15_000, "meshcni chained").catch(withLog(a.proc));
      await until(() => h.redirected(early), 10_000, "the early pod's rules written").catch(withLog(a.proc));
      expect(h.tcp(early)).toBe("proxy-inbound port=4143");
      await until(() => eventsOf(early).length > 0, 5_000, "the Event").catch(withLog(a.proc));
      const s = await h.status(a.port);
      expect(s.verify.findings).toEqual([
        expect.objectContaining({ name: "web-v2", verdict: "missing", action: "rewritten", via: "address" }),
      ]);
      // Still no record of an ADD: the report says so, and the pod is not removed for it.
      expect(s.repair.unverified.map((u: any) => u.name)).toEqual(["web-v2"]);
      await Bun.sleep(4500); // two more periods
      for (const p of [other, hostNet, plain]) {
        expect(h.rules(p)).toBe(before.get(p.metadata.name)!);
        expect(eventsOf(p)).toEqual([]);
      }
      expect(h.tcp(plain)).toBe("app port=8080");
      expect(writes.evicted).toEqual([]);
      expect(writes.deleted).toEqual([]);
      expect((await h.status(a.port)).verify.rewritten).toBe(1);
    } finally {
      await h.close();
    }
  }, 90_000);

  test("--repair off: missing rules are reported on /status and /metrics, nothing written; --verify-seconds 0: no periodic round", async () => {
    resetWrites();
    const h = host();
    try {
      const a = h.agent(["--verify-seconds", "2", "--repair", "off"]);
      await until(() => isChainedIn(h.dirs, PRIMARY), 15_000, "meshcni chained").catch(withLog(a.proc));
      const web = pod("web-v3");
      await h.start(web);
      expect(h.redirected(web)).toBe(true);
      h.flush(web);
      await until(async () => (await h.status(a.port)).verify.missing >= 1, 8_000, "reported").catch(withLog(a.proc));
      const s = await h.status(a.port);
      expect(s.verify.findings).toEqual([expect.objectContaining({ name: "web-v3", action: "reported" })]);
      // Repair lists it as bypassing, on this evidence, and only reports it.
      await until(async () => (await h.status(a.port)).repair.bypassing.length > 0, 8_000, "bypassing").catch(
        withLog(a.proc),
      );
      const bypassing = (await h.status(a.port)).repair.bypassing;
      expect(bypassing.map((b: any) => [b.name, b.action])).toEqual([["web-v3", "reported"]]);
      expect(bypassing[0].reason).toStartWith("its rules are missing or altered in its network namespace: ");
      expect(s.verify.rewritten).toBe(0);
      expect((await h.metrics(a.port)).get("meshcni_verify_missing_total")).toBeGreaterThanOrEqual(1);
      expect(a.proc.log()).toContain("verify: pod emojivoto/web-v3's rules are missing or altered");
      expect(h.redirected(web)).toBe(false);
      expect(writes.events).toEqual([]);
      expect(writes.evicted).toEqual([]);
      await a.proc.stop("SIGKILL");

      const b = h.agent(["--verify-seconds", "0"]);
      await b.proc.waitForLog(/verify: no periodic check/, 15_000);
      await Bun.sleep(4000);
      const s0 = await h.status(b.port);
      expect(s0.verify.runs).toBe(0);
      expect(s0.verify.periodSeconds).toBe(0);
      expect(h.redirected(web)).toBe(false);
    } finally {
      await h.close();
    }
  }, 90_000);

  test("--repair in-place on the validator's evidence: a pod whose namespace the agent reaches gets its rules written, one it cannot reach is evicted", async () => {
    resetWrites();
    const h = host();
    try {
      // Started before the chain: no rules, and their validators' latest runs failed (95).
      const reach = pod("web-v4", { failed: true });
      const far = pod("web-v5", { failed: true, noIp: true });
      for (const p of [reach, far]) await h.start(p);
      for (const p of [reach, far]) expect(h.redirected(p)).toBe(false);
      // No periodic verification: only the validator's evidence acts here.
      const a = h.agent(["--verify-seconds", "0"]);
      await until(() => isChainedIn(h.dirs, PRIMARY), 15_000, "meshcni chained").catch(withLog(a.proc));
      await until(() => writes.evicted.length > 0 && h.redirected(reach), 20_000, "the acts").catch(withLog(a.proc));
      expect(h.tcp(reach)).toBe("proxy-inbound port=4143");
      expect(h.redirected(far)).toBe(false);
      expect(writes.evicted).toEqual([`emojivoto/web-v5 ${far.metadata.uid}`]);
      expect(writes.deleted).toEqual([]);
      expect(eventsOf(reach).map((e) => e.message)).toEqual([
        expect.stringContaining("linkerd-network-validator init container's latest run failed"),
      ]);
      expect(eventsOf(reach)[0]!.message).toContain("wrote them back");
      expect(eventsOf(far).map((e) => e.message)).toEqual([expect.stringContaining("meshcni evicts this pod")]);
      expect(a.proc.log()).toContain("repair: wrote the rules of pod emojivoto/web-v4");
      expect(a.proc.log()).toContain("repair: the agent cannot reach the namespace of pod emojivoto/web-v5");
      const s = await h.status(a.port);
      // (The evicted pod is gone from the API server, and so from the list.)
      expect(s.repair.bypassing.find((b: any) => b.name === "web-v4")?.action).toBe("rewritten");
      expect(s.repair.repaired).toBe(2);
      expect((await h.metrics(a.port)).get("meshcni_repairs_total")).toBe(2);
    } finally {
      await h.close();
    }
  }, 90_000);

  test("--repair evict: a pod whose rules are gone from its namespace is evicted on that evidence (an Event first), nothing written; one whose rules only differ is reported, kept", async () => {
    resetWrites();
    const h = host();
    try {
      const a = h.agent(["--verify-seconds", "2", "--repair", "evict"]);
      await until(() => isChainedIn(h.dirs, PRIMARY), 15_000, "meshcni chained").catch(withLog(a.proc));
      const web = pod("web-v6");
      const kept = pod("web-v7");
      for (const p of [web, kept]) await h.start(p);
      for (const p of [web, kept]) expect(h.redirected(p)).toBe(true);
      await Bun.sleep(3000); // a full period: both checked, nothing found
      expect(writes.evicted).toEqual([]);
      // The neighbour's rules only differ (one more rule in meshcni's chain, as a change of
      // meshcni's config would make them): reported, never evicted for that.
      const extra = [
        "iptables",
        "-t",
        "nat",
        "-A",
        "PROXY_INIT_REDIRECT",
        "-p",
        "tcp",
        "--dport",
        "9999",
        "-j",
        "RETURN",
      ];
      expect(h.boxes.get(kept.metadata.name)!.netns.exec(extra).code).toBe(0);
      h.flush(web);
      await until(() => writes.evicted.length > 0, 20_000, "the eviction").catch(withLog(a.proc));
      expect(writes.evicted).toEqual([`emojivoto/web-v6 ${web.metadata.uid}`]);
      expect(eventsOf(web).map((e) => e.message)).toEqual([
        expect.stringContaining("its rules are missing or altered in its network namespace"),
      ]);
      expect(eventsOf(web)[0]!.message).toStartWith("meshcni evicts this pod on node node-a");
      expect(h.redirected(web)).toBe(false);
      await Bun.sleep(4000); // past the confirmation delay for the neighbour too
      expect(writes.evicted).toEqual([`emojivoto/web-v6 ${web.metadata.uid}`]);
      expect(eventsOf(kept)).toEqual([]);
      expect(cluster.api.objects.has(podPath(kept))).toBe(true);
      const s = await h.status(a.port);
      expect(s.verify.rewritten).toBe(0);
      expect(s.verify.findings.find((f: any) => f.name === "web-v7")).toMatchObject({
        verdict: "missing",
        action: "reported",
      });
      expect(s.repair.bypassing.map((b: any) => b.name)).not.toContain("web-v7");
    } finally {
      await h.close();
    }
  }, 90_000);
});
