// The agent (the node agent) at rest: CPU time and wake-ups over a quiet minute, and resident
// memory, once the chain is in place and the agent answers on its socket (a stand-in API server
// holds its DaemonSet). Floor, measured side by side: a compiled Bun program that only watches a
// folder (what any inotify-driven Bun daemon costs).
//
//   node_modules/.bin/bun bench/installer-idle.ts [seconds]
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  ensureBuilt,
  freePort,
  isChainedIn,
  readyz,
  startCluster,
  startInstaller,
  until,
} from "../test/agent/harness.ts";
import { repoPath } from "../test/support/golden.ts";
import { type ProcSample, procSampler } from "./lib.ts";

export async function benchIdle(seconds = Number(Bun.env.MESHCNI_BENCH_IDLE_SECONDS ?? 60)): Promise<string> {
  ensureBuilt();
  const cluster = await startCluster();
  cluster.setDaemonSet("present");
  const dirs = cluster.dirs();
  writeFileSync(
    join(dirs.net, "10-calico.conflist"),
    readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist")),
  );
  const floorSrc = join(dirs.root, "idle-watcher.ts");
  const floorBin = join(dirs.root, "idle-watcher");
  writeFileSync(floorSrc, 'import { watch } from "node:fs";\nwatch(process.argv[2]!, () => {});\n');
  const built = Bun.spawnSync(
    [repoPath("node_modules/.bin/bun"), "build", "--compile", floorSrc, "--outfile", floorBin],
    { stdout: "pipe", stderr: "pipe" },
  );
  if (built.exitCode !== 0) throw new Error(`building the floor failed: ${built.stderr.toString()}`);
  const port = freePort();
  const inst = startInstaller(
    dirs,
    ["--plugin-binary", repoPath("dist/meshcni"), "--health-port", String(port)],
    cluster.env,
  );
  const floor = Bun.spawn([floorBin, dirs.root], { stdout: "ignore", stderr: "inherit" });
  const samplers: ReturnType<typeof procSampler>[] = [];
  try {
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 20_000, "the chain");
    await until(async () => (await readyz(port)).status === 200, 5000, "ready");
    // Polled every 100 ms from here: each thread's CPU and wake-ups are kept once seen (bench/lib.ts).
    const [agent, floorSampler] = [procSampler(inst.proc.pid), procSampler(floor.pid)];
    samplers.push(agent, floorSampler);
    // Start-up: repair waits out its grace period (30 s from the chain), looking at the chain
    // every 2 s; the quiet minute starts once it is active, and 2 s more.
    const g0 = agent.sample();
    const t0Grace = performance.now();
    await inst.waitForLog(/repair is active/, 60_000);
    await Bun.sleep(2000);
    const g1 = agent.sample();
    const graceS = (performance.now() - t0Grace) / 1000;
    const [a0, f0] = [agent.sample(), floorSampler.sample()];
    await Bun.sleep(seconds * 1000);
    const [a1, f1] = [agent.sample(), floorSampler.sample()];
    if (inst.proc.exitCode !== null) throw new Error(`installer died:\n${inst.log()}`);
    // Then busy: 110 pods looked up through the agent (pods of no node, so not in its watch cache:
    // each a short wait for the watch, then its own GET) and 1,000 reports printed.
    for (let i = 0; i < 110; i++) {
      cluster.api.addPod({ metadata: { name: `web-${i}`, namespace: "bench", uid: `uid-${i}` } } as never);
    }
    cluster.api.addNamespace({ metadata: { name: "bench" } });
    const ask = (path: string, init: RequestInit = {}) =>
      fetch(`http://localhost${path}`, { ...init, unix: dirs.socket } as RequestInit);
    const b0 = agent.sample();
    await Promise.all(
      Array.from({ length: 110 }, (_, i) => ask(`/v1/pods/bench/web-${i}`).then((r) => r.arrayBuffer())),
    );
    for (let i = 0; i < 1000; i += 50) {
      await Promise.all(
        Array.from({ length: 50 }, (_, k) =>
          ask("/v1/reports", {
            method: "POST",
            body: JSON.stringify({
              v: 1,
              command: "ADD",
              containerId: `c${i + k}`.padEnd(64, "0"),
              pod: { namespace: "bench", name: `web-${(i + k) % 110}`, uid: `uid-${(i + k) % 110}` },
              outcome: "meshed",
              reason: "has a linkerd-proxy container",
              rules: 12,
              backend: "iptables-nft",
              lookup: "agent-api",
              durationMs: 20 + ((i + k) % 40),
              lines: ["meshcni: info applied 12 rules (iptables-nft, IPv4)"],
              time: new Date().toISOString(),
              version: "bench",
            }),
          }).then((r) => r.arrayBuffer()),
        ),
      );
    }
    await until(
      () => (inst.log().match(/plugin ADD pod=bench\//g)?.length ?? 0) >= 1000,
      30_000,
      "the reports printed",
    );
    const b1 = agent.sample();
    const row = (name: string, s0: ProcSample, s1: ProcSample) =>
      `| ${name} | ${((s1.cpuNs - s0.cpuNs) / 1e6).toFixed(2)} ms | ` +
      `${(((s1.cpuNs - s0.cpuNs) / 1e9 / seconds) * 100).toFixed(4)} % | ` +
      `${s1.wakeups - s0.wakeups} | ${(s1.rssKb / 1024).toFixed(1)} MB |`;
    const rssMb = a1.rssKb / 1024;
    return [
      "## Installer: idle cost",
      "",
      `Start-up, from the agent's readiness until repair was active (its 30 s grace ` +
        `period after the chain) and 2 s more: ${((g1.cpuNs - g0.cpuNs) / 1e6).toFixed(2)} ` +
        `ms of CPU over ${graceS.toFixed(1)} s, ${g1.wakeups - g0.wakeups} wake-ups.`,
      "",
      `Then over ${seconds} s with nothing changing (chain in place, /readyz answering, ` +
        `three folders watched, the agent's socket served, repair active, a resync each minute):`,
      "",
      "| process | CPU time | CPU share | wake-ups | resident memory |",
      "|---|---|---|---|---|",
      row("meshcni-installer", a0, a1),
      row("compiled Bun program watching one folder (floor)", f0, f1),
      "",
      `Targets: CPU essentially zero (no polling) and resident memory at ` +
        `most 60 MB: ${(a1.cpuNs - a0.cpuNs) / 1e6 < 50 ? "CPU met" : "CPU NOT met"}, ` +
        `${rssMb <= 60 ? "memory met" : "memory NOT met"}.`,
      "",
      `Then 110 pod lookups on the agent's socket (pods not bound to the node, so each one ` +
        `GET by the agent after a short wait for the watch) and 1,000 reports printed: ` +
        `${((b1.cpuNs - b0.cpuNs) / 1e6).toFixed(0)} ms of CPU, resident memory ` +
        `${(b1.rssKb / 1024).toFixed(1)} MB afterwards (${b1.rssKb / 1024 <= 60 ? "within" : "NOT within"} 60 MB).`,
      "",
    ].join("\n");
  } finally {
    for (const s of samplers) s.stop();
    await inst.stop();
    floor.kill("SIGKILL");
    await floor.exited;
    dirs.cleanup();
    await cluster.close();
  }
}

if (import.meta.main) console.log(await benchIdle(Number(Bun.argv[2] ?? Bun.env.MESHCNI_BENCH_IDLE_SECONDS ?? 60)));
