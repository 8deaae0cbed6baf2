// The agent's watch cache: resident memory of dist/meshcni-installer holding 110 pods of its node
// and 1,000 namespaces, next to the same agent watching an empty cluster (the floor); its CPU
// while repair waits out its grace period after start, then idle with both watches open; and the
// API requests 110 warm lookups on its socket cost (the stand-in API server counts them: the
// target is none).
//
//   node_modules/.bin/bun bench/agent-cache.ts [idle-seconds]
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  type InstallerProcess,
  isChainedIn,
  startCluster,
  startInstaller,
  until,
} from "../test/agent/harness.ts";
import { repoPath } from "../test/support/golden.ts";
import { procSampler } from "./lib.ts";

const PODS = 110;
const NAMESPACES = 1000;

interface Agent {
  cluster: Cluster;
  dirs: HostDirs;
  inst: InstallerProcess;
  port: number;
}

async function startAgent(fill: (c: Cluster) => Promise<void>): Promise<Agent> {
  const cluster = await startCluster();
  cluster.setDaemonSet("present");
  await fill(cluster);
  const dirs = cluster.dirs();
  writeFileSync(
    join(dirs.net, "10-calico.conflist"),
    readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist")),
  );
  const port = freePort();
  const inst = startInstaller(
    dirs,
    ["--plugin-binary", repoPath("dist/meshcni"), "--health-port", String(port)],
    cluster.env,
  );
  await until(() => isChainedIn(dirs, "10-calico.conflist"), 20_000, "the chain");
  await until(
    async () => {
      const s = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as {
        cache?: { pods?: { synced?: boolean }; namespaces?: { synced?: boolean } };
      };
      return s.cache?.pods?.synced && s.cache?.namespaces?.synced;
    },
    20_000,
    "the cache in sync",
  );
  return { cluster, dirs, inst, port };
}

async function stopAgent(a: Agent): Promise<void> {
  await a.inst.stop("SIGKILL");
  a.dirs.cleanup();
  await a.cluster.close();
}

export async function benchAgentCache(seconds = Number(Bun.env.MESHCNI_BENCH_IDLE_SECONDS ?? 30)): Promise<string> {
  ensureBuilt();
  const base = JSON.parse(readFileSync(repoPath("testdata/pods/linkerd-meshed.json"), "utf8"));
  const namespace = JSON.parse(readFileSync(repoPath("testdata/pods/namespace-emojivoto.json"), "utf8"));
  const podBytes = JSON.stringify(base).length;

  const empty = await startAgent(async () => {});
  await Bun.sleep(2000);
  const emptySampler = procSampler(empty.inst.proc.pid);
  const floor = emptySampler.sample();
  emptySampler.stop();
  await stopAgent(empty);

  const full = await startAgent(async (c) => {
    for (let i = 0; i < NAMESPACES; i++) {
      c.api.addNamespace({
        ...namespace,
        metadata: { ...namespace.metadata, name: i === 0 ? "emojivoto" : `team-${i}`, uid: `ns-uid-${i}` },
      });
    }
    for (let i = 0; i < PODS; i++) {
      c.api.addPod({
        ...base,
        metadata: { ...base.metadata, name: `web-${i}`, namespace: "emojivoto", uid: `pod-uid-${i}` },
        spec: { ...base.spec, nodeName: "node-a" },
      });
    }
  });
  // Polled every 100 ms from here: each thread's CPU is kept once seen (bench/lib.ts).
  const sampler = procSampler(full.inst.proc.pid);
  try {
    await Bun.sleep(2000); // start-up settles (the binary copy, the first GC)
    const synced = sampler.sample();
    // Repair waits out its grace period (30 s from the chain) before it is active; the idle
    // window starts once it is, and after the round that ends the wait.
    const g0 = sampler.sample();
    const t0Grace = performance.now();
    await full.inst.waitForLog(/repair is active/, 60_000); // its log, not /status: no work for the agent
    await Bun.sleep(2000);
    const g1 = sampler.sample();
    const graceS = (performance.now() - t0Grace) / 1000;
    const i0 = sampler.sample();
    await Bun.sleep((seconds * 1000) / 2);
    const ih = sampler.sample();
    await Bun.sleep((seconds * 1000) / 2);
    const i1 = sampler.sample();
    const api = full.cluster.api;
    const gets = () =>
      api.requests.filter((r) => r.path.includes("/pods/") || /^\/api\/v1\/namespaces\/[^/]+$/.test(r.path)).length;
    const before = gets();
    const ask = (path: string) => fetch(`http://localhost${path}`, { unix: full.dirs.socket } as RequestInit);
    const l0 = sampler.sample();
    const t0 = performance.now();
    const answers = await Promise.all(
      Array.from({ length: PODS }, (_, i) =>
        ask(`/v1/pods/emojivoto/web-${i}?uid=pod-uid-${i}`).then(
          async (r) => ((await r.json()) as { source?: string }).source,
        ),
      ),
    );
    const lookupMs = performance.now() - t0;
    const l1 = sampler.sample();
    const fromCache = answers.filter((s) => s === "cache").length;
    const getsPerLookup = (gets() - before) / PODS;
    // Churn: every pod changes once (status updates as kubelet would send them).
    const c0 = sampler.sample();
    for (let i = 0; i < PODS; i++) {
      api.updatePod({
        ...base,
        metadata: { ...base.metadata, name: `web-${i}`, namespace: "emojivoto", uid: `pod-uid-${i}` },
        spec: { ...base.spec, nodeName: "node-a" },
        status: { phase: "Running" },
      });
    }
    await Bun.sleep(1000);
    const c1 = sampler.sample();
    if (full.inst.proc.exitCode !== null) throw new Error(`the agent died:\n${full.inst.log()}`);
    const mb = (kb: number) => (kb / 1024).toFixed(1);
    const rss = synced.rssKb / 1024;
    return [
      "## Agent: the watch cache",
      "",
      `dist/meshcni-installer with its cache in sync, against the stand-in API ` +
        `server (TLS). Each pod is testdata/pods/linkerd-meshed.json (${podBytes} ` +
        `bytes of JSON) bound to the node; the cache keeps a trimmed copy.`,
      "",
      "| agent | resident memory |",
      "|---|---|",
      `| empty cluster: no pods, 1 namespace (floor) | ${mb(floor.rssKb)} MB |`,
      `| ${PODS} cached pods and ${NAMESPACES} namespaces | ` +
        `${mb(synced.rssKb)} MB (+${mb(synced.rssKb - floor.rssKb)} MB) |`,
      "",
      `Target: at most 60 MB with ${PODS} pods and ${NAMESPACES} namespaces: ${rss <= 60 ? "met" : "NOT met"}.`,
      "",
      `From 2 s after the cache was in sync until repair was active (the end of its grace period, 30 s after the ` +
        `chain) and 2 s more: ${((g1.cpuNs - g0.cpuNs) / 1e6).toFixed(2)} ms of CPU over ${graceS.toFixed(1)} s.`,
      "",
      `Idle for ${seconds} s with both watches open, repair active: ` +
        `${((i1.cpuNs - i0.cpuNs) / 1e6).toFixed(2)} ms of CPU ` +
        `(${(((i1.cpuNs - i0.cpuNs) / 1e9 / seconds) * 100).toFixed(4)} %; ` +
        `first half ${((ih.cpuNs - i0.cpuNs) / 1e6).toFixed(2)} ms, ` +
        `second half ${((i1.cpuNs - ih.cpuNs) / 1e6).toFixed(2)} ms).`,
      "",
      `${PODS} lookups at once on the socket: ${fromCache} answered from the cache, ${getsPerLookup.toFixed(2)} ` +
        `API requests per lookup (target 0: ${getsPerLookup === 0 ? "met" : "NOT met"}), ${lookupMs.toFixed(0)} ` +
        `ms for all of them, ${((l1.cpuNs - l0.cpuNs) / 1e6).toFixed(1)} ms of the agent's CPU.`,
      "",
      `${PODS} pod updates through the watch: ${((c1.cpuNs - c0.cpuNs) / 1e6).toFixed(1)} ` +
        `ms of the agent's CPU; resident memory afterwards ${mb(c1.rssKb)} MB.`,
      "",
    ].join("\n");
  } finally {
    sampler.stop();
    await stopAgent(full);
  }
}

if (import.meta.main)
  console.log(await benchAgentCache(Number(Bun.argv[2] ?? Bun.env.MESHCNI_BENCH_IDLE_SECONDS ?? 30)));
