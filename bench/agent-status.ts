// /status with many records: dist/meshcni-installer started over a state folder holding N records
// (20,000 by default, far past any node: what a flood of forged ADDs can leave), then asked for
// /status K times. Per call: the wall time, the agent's CPU (every thread, bench/lib.ts), the
// answer's size; and the agent's resident memory after. The agent holds the records in memory
// (internal/agent/state/record-index.ts) rather than read every file at every call.
//
//   node_modules/.bin/bun bench/agent-status.ts [records] [calls]
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureBuilt, freePort, isChainedIn, startCluster, startInstaller, until } from "../test/agent/harness.ts";
import { repoPath } from "../test/support/golden.ts";
import { procSampler } from "./lib.ts";

export async function benchAgentStatus(records = 20_000, calls = 20): Promise<string> {
  ensureBuilt();
  const cluster = await startCluster();
  cluster.setDaemonSet("present");
  const dirs = cluster.dirs();
  const calico = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"));
  writeFileSync(join(dirs.net, "10-calico.conflist"), calico);
  const folder = join(dirs.state, "containers");
  mkdirSync(folder, { recursive: true, mode: 0o700 });
  for (let i = 0; i < records; i++) {
    const id = `${i.toString(16).padStart(12, "0")}${"a".repeat(52)}`;
    writeFileSync(
      join(folder, `${id}.json`),
      `${JSON.stringify({
        v: 1,
        containerId: id,
        namespace: "emojivoto",
        name: `web-${i}`,
        uid: crypto.randomUUID(),
        decision: i % 2 ? "meshed" : "skipped",
        reason: "has a linkerd-proxy container",
        backend: "iptables-nft",
        families: [4],
        time: new Date().toISOString(),
      })}\n`,
    );
  }
  const port = freePort();
  const args = ["--plugin-binary", repoPath("dist/meshcni"), "--health-port", String(port), "--resync-seconds", "3600"];
  const inst = startInstaller(dirs, args, cluster.env);
  try {
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 20_000, "the chain");
    const status = async () => {
      const t0 = performance.now();
      const text = await (await fetch(`http://127.0.0.1:${port}/status`)).text();
      const handled = (JSON.parse(text) as { pods: { handled: number } }).pods.handled;
      return { ms: performance.now() - t0, bytes: Buffer.byteLength(text), handled };
    };
    await until(async () => (await status()).handled === records, 60_000, "every record in /status");
    for (let i = 0; i < 3; i++) await status(); // warm
    const sampler = procSampler(inst.proc.pid);
    const before = sampler.sample();
    const times: number[] = [];
    let bytes = 0;
    for (let i = 0; i < calls; i++) {
      const s = await status();
      times.push(s.ms);
      bytes = s.bytes;
    }
    const after = sampler.sample();
    sampler.stop();
    times.sort((a, b) => a - b);
    const median = times[Math.floor(times.length / 2)]!;
    const cpuMs = (after.cpuNs - before.cpuNs) / 1e6 / calls;
    return [
      "## /status with many records (bench/agent-status.ts)",
      "",
      "| records | calls | median wall | agent CPU per call | answer | agent RSS after |",
      "|---|---|---|---|---|---|",
      `| ${records} | ${calls} | ${median.toFixed(1)} ms | ${cpuMs.toFixed(1)} ms | ${(bytes / 1e6).toFixed(2)} MB ` +
        `| ${(after.rssKb / 1024).toFixed(1)} MB |`,
      "",
    ].join("\n");
  } finally {
    await inst.stop("SIGKILL");
    dirs.cleanup();
    await cluster.close();
  }
}

if (import.meta.main) console.log(await benchAgentStatus(Number(Bun.argv[2] ?? 20_000), Number(Bun.argv[3] ?? 20)));
