// The agent applies (issue 22): the compiled agent (dist/meshcni-installer) on this host, its
// userland (this machine's libnftables and iptables) standing in for its image's, and the
// compiled plugin on a node whose iptables, nft, nsenter and libnftables are hidden from it (a
// private mount namespace, test/support/hidden-userland.ts), chained after bridge + host-local
// without ipMasq (which would need iptables too), driven by the spec's call sequence, by podman
// and by containerd's CRI. The plugin starts no process on ADD, CHECK and
// DEL (strace -f); real TCP reaches the stand-in proxy ports through the rules the agent applied
// in process (auto) and with its iptables-nft binaries (nft); while applies run, the agent's
// listening sockets and API connections stay in its own namespace; and with the agent killed
// in the middle of a burst, every ADD either applied its rules or failed closed (11). Needs root.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { recordPath } from "../../internal/wire/state.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  type InstallerProcess,
  isChainedIn,
  PLUGIN,
  startCluster,
  startInstaller,
  until,
} from "../agent/harness.ts";
import { type Attachment, bridgeConflist, CniRuntime, type Conflist } from "../support/cni-runtime.ts";
import { Cri } from "../support/cri.ts";
import { PodmanLab, tagScript } from "../support/podman.ts";
import { type HiddenUserland, hiddenUserland, startedProcesses } from "../support/hidden-userland.ts";
import { isRoot, type Listener, listen, Netns, probe, sh, uniq } from "../support/netns.ts";
import { DIST, REFERENCE_PLUGINS } from "../support/pod-lab.ts";

const PRIMARY = "10-bridge.conflist";
const NS = "emojivoto";
const hostNs = () => readlinkSync("/proc/self/ns/net");

let cluster: Cluster;
let dirs: HostDirs;
let agent: InstallerProcess;
let hidden: HiddenUserland;
let scratch: string;
let port = 0;
let bridge = "";
let gateway = "";
const netnses: Netns[] = [];
const listeners: Listener[] = [];

let n = 0;
function pod(name: string) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: NS,
      uid: `a22a${String(++n).padStart(4, "0")}-aaaa-4bbb-8ccc-${uniq().padStart(12, "0")}`,
      annotations: { "linkerd.io/inject": "enabled" },
    },
    spec: {
      nodeName: "node-a",
      initContainers: [
        { name: "linkerd-proxy", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1", restartPolicy: "Always" },
      ],
      containers: [{ name: "web", image: "buoyantio/emojivoto-web:v11" }],
    },
    status: { phase: "Pending" },
  };
}
type PodObj = ReturnType<typeof pod>;

interface Box {
  netns: Netns;
  runtime: CniRuntime;
  a: Attachment;
}

/** The chain the agent left in the host's folder, run with the hidden-userland plugin; `mode` for meshcni. */
function box(p: PodObj, mode?: string): Box {
  const conflist = JSON.parse(readFileSync(join(dirs.net, PRIMARY), "utf8")) as Conflist;
  if (mode) {
    const entry = conflist.plugins.find((x) => x.type === "meshcni") as Record<string, any>;
    entry.linkerd = { ...(entry.linkerd ?? {}), "iptables-mode": mode };
    conflist.name = `${conflist.name}-${mode}`;
  }
  const runtime = new CniRuntime(conflist, [REFERENCE_PLUGINS, hidden.pluginDir], join(dirs.root, "cni-cache"));
  const netns = Netns.create(`mca-${uniq()}`);
  netnses.push(netns);
  const a: Attachment = {
    containerId: `c${uniq()}${uniq()}`,
    netns: netns.path,
    ifname: "eth0",
    cniArgs: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${p.metadata.name};K8S_POD_UID=${p.metadata.uid}`,
  };
  return { netns, runtime, a };
}

const inNft = (b: Box) =>
  b.netns.exec(["nft", "list", "table", "ip", "meshcni"]).stdout.includes("PROXY_INIT_REDIRECT");
const inIptables = (b: Box) => b.netns.save("nft", 4).includes("PROXY_INIT_REDIRECT");
const status = async () => (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
const failMsg = (e: unknown) => `${(e as Error).message}\n--- agent ---\n${agent.log()}`;

/** The processes the plugin started in the traces written since `from`. */
function startedSince(from: number) {
  return hidden
    .traces()
    .slice(from)
    .map((f) => startedProcesses(readFileSync(f, "utf8")));
}

async function seen(p: PodObj): Promise<void> {
  const count = (await status()).cache.pods.objects as number;
  cluster.api.addPod(p);
  await until(
    async () => (await status()).cache.pods.objects > count,
    15_000,
    `the watch delivering ${p.metadata.name}`,
  );
}

beforeAll(async () => {
  if (!isRoot()) return;
  ensureBuilt();
  scratch = mkdtempSync(join(tmpdir(), "meshcni-applies-"));
  hidden = hiddenUserland(scratch, { strace: true });
  cluster = await startCluster();
  cluster.setDaemonSet("present");
  cluster.api.addNamespace({ metadata: { name: NS } });
  dirs = cluster.dirs();
  bridge = `mca${uniq()}`.slice(0, 15);
  const subnet = `10.${60 + (process.pid % 90)}.22.0/24`;
  gateway = subnet.replace(/0\/24$/, "1");
  writeFileSync(
    join(dirs.net, PRIMARY),
    JSON.stringify({
      cniVersion: "1.0.0",
      name: "node-net",
      // No ipMasq: it would need the host's iptables too.
      plugins: [
        {
          type: "bridge",
          bridge,
          isGateway: true,
          ipMasq: false,
          ipam: { type: "host-local", subnet, dataDir: join(dirs.root, "ipam") },
        },
      ],
    }),
  );
  port = freePort();
  agent = startInstaller(
    dirs,
    ["--node-name", "node-a", "--plugin-binary", PLUGIN, "--dest-net-dir", dirs.net, "--health-port", String(port)],
    cluster.env,
  );
  agent.proc.unref();
  await until(() => isChainedIn(dirs, PRIMARY), 15_000, "meshcni chained").catch((e) => {
    throw new Error(failMsg(e));
  });
  await until(async () => (await status().catch(() => undefined))?.cache?.pods?.synced === true, 15_000, "synced");
  listeners.push(await listen(undefined, { 19997: "outside" }));
}, 120_000);

afterAll(async () => {
  await agent?.stop("SIGKILL");
  for (const l of listeners) l.stop();
  for (const x of netnses) x.delete();
  if (bridge) sh(["ip", "link", "del", bridge]);
  dirs?.cleanup();
  await cluster?.close();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

describe.skipIf(!isRoot())("the agent applies; the plugin needs nothing on the host", () => {
  test("the host the plugin sees has no iptables, nft, nsenter or libnftables", () => {
    const r = sh([
      join(hidden.dir, "probe"),
      "sh",
      "-c",
      "for b in iptables iptables-nft-restore iptables-legacy-restore ip6tables-restore nft nsenter; do " +
        "$b --version >/dev/null 2>&1 && echo $b; done; echo end",
    ]);
    expect(r.stdout.trim()).toBe("end");
    expect(hidden.hidden).toEqual(
      expect.arrayContaining(["/usr/sbin/xtables-nft-multi", "/usr/sbin/xtables-legacy-multi", "/usr/sbin/nft"]),
    );
    expect(hidden.hidden.some((p) => p.includes("libnftables.so"))).toBe(true);
    expect(hidden.hidden.some((p) => p.endsWith("/nsenter"))).toBe(true);
  });

  for (const mode of [undefined, "nftables"] as const) {
    const what = mode
      ? "iptables-mode nftables (in process, through the agent's libnftables)"
      : "auto (the agent's iptables-nft-restore, started in the namespace)";
    test(`${what}: ADD, CHECK and DEL start no process in the plugin; real TCP reaches the proxy`, async () => {
      const p = pod(`web-${mode ?? "auto"}`);
      await seen(p);
      const b = box(p, mode);
      const from = hidden.traces().length;
      await b.runtime.add(b.a).catch((e) => {
        throw new Error(failMsg(e));
      });
      expect(mode ? inNft(b) : inIptables(b)).toBe(true);
      const rec = JSON.parse(readFileSync(recordPath(dirs.state, b.a.containerId), "utf8"));
      expect(rec).toMatchObject({ decision: "meshed", backend: mode ? "nftables in process" : "nft" });
      const line = await agent.waitForLog(
        new RegExp(`plugin ADD pod=${NS}/${p.metadata.name} outcome=meshed .*`),
        5000,
      );
      expect(line).toContain(mode ? "nftables in process" : "backend=nft ");
      // Real TCP: in to the proxy's inbound port, out to its outbound port, the proxy's own user past it.
      listeners.push(await listen(b.netns, { 4143: "proxy-inbound", 4140: "proxy-outbound", 8080: "app" }));
      const ip = b.netns.exec(["ip", "-4", "-o", "addr", "show", "eth0"]).stdout.match(/inet (\S+)\//)![1]!;
      expect(probe(undefined, ip, 8080)).toBe("proxy-inbound port=4143");
      expect(probe(b.netns, gateway, 19997)).toBe("proxy-outbound port=4140");
      expect(probe(b.netns, gateway, 19997, { uid: 2102 })).toBe("outside port=19997");
      await b.runtime.check(b.a);
      await agent.waitForLog(new RegExp(`plugin CHECK pod=${NS}/${p.metadata.name} outcome=meshed `), 5000);
      await b.runtime.del(b.a);
      await agent.waitForLog(new RegExp(`plugin DEL pod=${NS}/${p.metadata.name} outcome=ok `), 5000);
      // ADD, CHECK, DEL: three runs of the plugin, each executing itself only and forking nothing.
      const runs = startedSince(from);
      expect(runs.length).toBe(3);
      for (const r of runs) expect(r).toEqual({ execs: [join(DIST, "meshcni")], forks: [] });
    }, 60_000);
  }

  /** The meshcni entry the agent chained into the host's folder (its socket, state folder, kubeconfig). */
  const chainedEntry = () => {
    const conflist = JSON.parse(readFileSync(join(dirs.net, PRIMARY), "utf8")) as Conflist;
    const { type: _, ...entry } = conflist.plugins.find((x) => x.type === "meshcni") as Record<string, unknown>;
    return entry;
  };

  test("podman drives the chain: a meshed pod's TCP reaches its proxy; the plugin started no process", async () => {
    const pm = new PodmanLab({ pluginDirs: [REFERENCE_PLUGINS, hidden.pluginDir] });
    const podmanBridge = `mcq${uniq()}`.slice(0, 15);
    const subnet = `10.${60 + (process.pid % 90)}.23.0/24`;
    const network = `applies${uniq()}`;
    pm.writeNetwork(
      "10-applies.conflist",
      bridgeConflist({
        name: network,
        bridge: podmanBridge,
        subnet,
        ipamDir: `${pm.dir}/ipam`,
        meshcni: chainedEntry(),
      }),
      podmanBridge,
    );
    try {
      await seen(pod("web-podman"));
      const from = hidden.traces().length;
      const ip = await pm.run(
        "web-podman",
        network,
        tagScript({ 4143: "proxy-inbound", 4140: "proxy-outbound", 8080: "app" }),
        `K8S_POD_NAMESPACE=${NS}`,
      );
      await pm.waitListening("web-podman", 4143);
      expect(probe(undefined, ip, 8080)).toBe("proxy-inbound port=4143");
      const gw = subnet.replace(/0\/24$/, "1");
      expect((await pm.exec("web-podman", ["nc", "-w", "3", gw, "19997"])).stdout.trim()).toBe(
        "proxy-outbound port=4140",
      );
      const line = await agent.waitForLog(/plugin ADD pod=emojivoto\/web-podman outcome=meshed .*/, 5000);
      expect(line).toContain("backend=nft ");
      await pm.rm("web-podman");
      await agent.waitForLog(/plugin DEL pod=emojivoto\/web-podman outcome=ok /, 5000);
      const runs = startedSince(from);
      expect(runs.length).toBeGreaterThanOrEqual(2);
      for (const r of runs) expect(r).toEqual({ execs: [join(DIST, "meshcni")], forks: [] });
    } finally {
      await pm.close();
    }
  }, 120_000);

  test("containerd's CRI drives the chain: RunPodSandbox meshes through the agent, Stop and Remove DEL start nothing", async () => {
    const cri = await Cri.start({ plugins: { meshcni: join(hidden.pluginDir, "meshcni") }, record: ["meshcni"] });
    try {
      const criBridge = `mcr${uniq()}`.slice(0, 15);
      const subnet = `10.${60 + (process.pid % 90)}.24.0/24`;
      await cri.writeConflist(
        "10-pods.conflist",
        bridgeConflist({
          name: `cri-${uniq()}`,
          bridge: criBridge,
          subnet,
          ipamDir: join(cri.dir, "ipam"),
          meshcni: chainedEntry(),
        }),
      );
      const p = pod("web-cri");
      await seen(p);
      const from = hidden.traces().length;
      const sb = await cri.runPodSandbox({ name: p.metadata.name, namespace: NS, uid: p.metadata.uid });
      expect(sb.netns.save("nft", 4)).toContain("PROXY_INIT_REDIRECT");
      listeners.push(await listen(sb.netns, { 4143: "proxy-inbound", 8080: "app" }));
      expect(probe(undefined, sb.ip, 8080)).toBe("proxy-inbound port=4143");
      await agent.waitForLog(/plugin ADD pod=emojivoto\/web-cri outcome=meshed .*backend=nft /, 5000);
      await cri.stopPodSandbox(sb.id);
      await cri.removePodSandbox(sb.id);
      const calls = cri.calls("meshcni").filter((c) => c.env.CNI_CONTAINERID === sb.id);
      expect(calls.map((c) => [c.command, c.exitCode])).toEqual([
        ["ADD", 0],
        ["DEL", 0],
        ["DEL", 0],
      ]);
      const runs = startedSince(from);
      expect(runs.length).toBe(3);
      for (const r of runs) expect(r).toEqual({ execs: [join(DIST, "meshcni")], forks: [] });
    } finally {
      await cri.close();
    }
  }, 180_000);

  test("while applies run, the agent's listening sockets and API connections stay in its own namespace", async () => {
    const pid = agent.proc.pid;
    const pods = Array.from({ length: 12 }, (_, i) => pod(`web-ns-${i}`));
    for (const p of pods) cluster.api.addPod(p);
    await until(async () => (await status()).cache.pods.objects >= pods.length, 15_000, "the watch");
    const boxes = pods.map((p, i) => box(p, i % 2 ? undefined : "nftables"));
    const podNamespaces = new Set(boxes.map((b) => `net:[${statSync(b.netns.path).ino}]`));
    const foreign: string[] = [];
    let sampling = true;
    let samples = 0;
    const sample = async () => {
      while (sampling) {
        for (const b of boxes) {
          const ss = b.netns.exec(["ss", "-Htanp"]).stdout + b.netns.exec(["ss", "-Hxlp"]).stdout;
          for (const l of ss.split("\n")) if (l.includes(`pid=${pid},`)) foreign.push(`${b.netns.name}: ${l}`);
        }
        // The agent's threads, all in its own namespace, but for the JS thread inside the
        // synchronous setns window of an in-process apply (nft-inprocess.ts), and only in the
        // namespace of a pod being applied. A thread that exits between the listing and the
        // look is gone, not foreign.
        for (const t of readdirSync(`/proc/${pid}/task`)) {
          let ns: string;
          try {
            ns = readlinkSync(`/proc/${pid}/task/${t}/ns/net`);
          } catch {
            continue;
          }
          if (ns === hostNs() || (t === String(pid) && podNamespaces.has(ns))) continue;
          foreign.push(`thread ${t} in ${ns}`);
        }
        samples++;
        await Bun.sleep(5);
      }
    };
    const sampler = sample();
    // New API connections meanwhile: the watches dropped (the agent reconnects), /status asked.
    const churn = (async () => {
      for (let i = 0; i < 3; i++) {
        cluster.api.dropWatches();
        await status();
        await Bun.sleep(30);
      }
    })();
    const results = await Promise.allSettled(boxes.map((b) => b.runtime.add(b.a)));
    await churn;
    await Bun.sleep(300);
    sampling = false;
    await sampler;
    expect(
      results.filter((r) => r.status === "rejected").map((r) => String((r as PromiseRejectedResult).reason)),
    ).toEqual([]);
    for (const [i, b] of boxes.entries()) expect(i % 2 ? inIptables(b) : inNft(b)).toBe(true);
    expect(samples).toBeGreaterThan(3);
    expect(foreign).toEqual([]);
    // Its own seccomp filter: CAP_SYS_ADMIN serves setns alone (test/agent/apply-seccomp.test.ts).
    expect(readFileSync(`/proc/${pid}/status`, "utf8")).toMatch(/Seccomp_filters:\s+[1-9]/);
    // And in its own namespace it has them: the health port, the API server's connections.
    const own = sh(["ss", "-Htanp"])
      .stdout.split("\n")
      .filter((l) => l.includes(`pid=${pid},`));
    expect(own.some((l) => l.startsWith("LISTEN") && l.includes(`:${port} `))).toBe(true);
    expect(own.some((l) => l.startsWith("ESTAB") && l.includes(new URL(cluster.api.url).port))).toBe(true);
  }, 120_000);

  test("the agent killed in the middle of a burst: every ADD applied its rules or failed closed (11)", async () => {
    const pods = Array.from({ length: 16 }, (_, i) => pod(`web-burst-${i}`));
    for (const p of pods) cluster.api.addPod(p);
    await until(async () => (await status()).cache.pods.objects >= 12 + pods.length, 15_000, "the watch");
    const boxes = pods.map((p, i) => box(p, i % 2 ? "nft" : undefined));
    let done = 0;
    const outcomes = boxes.map(async (b, i) => {
      await Bun.sleep(i * 40);
      try {
        await b.runtime.add(b.a);
        done++;
        return { ok: true, code: 0, ruled: inNft(b) || inIptables(b) };
      } catch (e) {
        const out = (e as { run?: { stdout: string } }).run?.stdout ?? "";
        let code = -1;
        try {
          code = JSON.parse(out).code;
        } catch {
          // bridge's own failure, say
        }
        return { ok: false, code, ruled: inNft(b) || inIptables(b), err: String(e).slice(0, 300) };
      }
    });
    // Killed once five of them are meshed, the others on their way.
    await until(() => done >= 5, 20_000, "five pods of the burst meshed");
    agent.proc.kill("SIGKILL");
    const r = await Promise.all(outcomes);
    console.log(
      `burst: ${r.filter((x) => x.ok).length} applied by the agent, ${r.filter((x) => !x.ok).length} failed closed`,
    );
    for (const x of r) {
      if (x.ok) expect(x).toMatchObject({ ok: true, ruled: true });
      // (An ADD the agent applied just before it died has its rules, and fails: the runtime
      // removes that sandbox.)
      else expect({ code: x.code, err: x.err }).toEqual({ code: 11, err: x.err });
    }
    // Some of each: the kill fell inside the burst.
    expect(r.some((x) => x.ok)).toBe(true);
    expect(r.some((x) => !x.ok)).toBe(true);
  }, 120_000);
});
