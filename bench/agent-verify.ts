// The agent's verification (issue 22): its CPU per verification round of 110 meshed pods, and
// the share of one core that makes at the default period (--verify-seconds 60; the target is at
// most 1%). CPU: the agent's threads and the processes it started (iptables-nft-save in auto mode). The real compiled agent (dist/meshcni-installer) against the stand-in API server, 110
// pods of its node, each in a network namespace of its own (a veth's end with its address)
// meshed through the agent by the plugin (dist/meshcni ADD: the agent applies). Two agents run
// side by side over the same window: one verifying once every BENCH_VERIFY_PERIOD seconds, one
// with --verify-seconds 0 (the floor: cache, repair, records); the difference, per round, is
// verification's. Rows: pods found by their records (the usual case), and pods found by their
// addresses (no records: started before the chain); per mode the agent applies with.
//
//   node_modules/.bin/bun bench/agent-verify.ts
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ensureBuilt, freePort, HostDirs, INSTALLER, installerArgs, until } from "../test/agent/harness.ts";
import { type ApiServer, startApiServer } from "../test/support/apiserver.ts";
import { repoPath } from "../test/support/golden.ts";
import { sh } from "../test/support/netns.ts";
import { DIST } from "../test/support/pod-lab.ts";

const PODS = Number(Bun.env.BENCH_VERIFY_PODS ?? 110);
const PERIOD = Number(Bun.env.BENCH_VERIFY_PERIOD ?? 10);
const ROUNDS = Number(Bun.env.BENCH_VERIFY_ROUNDS ?? 3);
const NODE = "node-1";
const TOKEN = "verify-token";
const NS = "emojivoto";
const DEFAULT_PERIOD = 60;
const NFT = { "iptables-mode": "nftables" };

interface Agent {
  port: number;
  dirs: HostDirs;
  status(): Promise<any>;
  cpuMs(): number;
  stop(): Promise<void>;
}

async function startAgent(api: ApiServer, extra: string[], logFile: string, dirs?: HostDirs): Promise<Agent> {
  const d = dirs ?? new HostDirs(TOKEN, api.caPem);
  writeFileSync(
    join(d.net, "10-bridge.conflist"),
    JSON.stringify({ cniVersion: "1.0.0", name: "node-net", plugins: [{ type: "bridge", bridge: "unused0" }] }),
  );
  const port = freePort();
  const proc = Bun.spawn(
    [
      INSTALLER,
      ...installerArgs(d, [
        "--node-name",
        NODE,
        "--plugin-binary",
        join(DIST, "meshcni"),
        "--health-port",
        String(port),
        "--repair-grace-seconds",
        "1",
        ...extra,
      ]),
    ],
    {
      env: {
        PATH: Bun.env.PATH ?? "/usr/bin:/bin",
        KUBERNETES_SERVICE_HOST: "127.0.0.1",
        KUBERNETES_SERVICE_PORT: new URL(api.url).port,
        POD_NAMESPACE: "meshcni",
        NODE_NAME: NODE,
      },
      stdin: "ignore",
      stdout: Bun.file(logFile),
      stderr: Bun.file(`${logFile}.err`),
    },
  );
  const status = async () => (await fetch(`http://127.0.0.1:${port}/status`)).json() as Promise<any>;
  await until(async () => (await status().catch(() => undefined))?.cache?.pods?.synced === true, 30_000, "in sync");
  const clk = Number(sh(["getconf", "CLK_TCK"]).stdout.trim()) || 100;
  return {
    port,
    dirs: d,
    status,
    cpuMs() {
      const f = readFileSync(`/proc/${proc.pid}/stat`, "utf8").split(") ")[1]!.split(" ");
      // utime, stime, and cutime, cstime: the processes it started and reaped (iptables-nft-save).
      return ((Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * 1000) / clk;
    },
    async stop() {
      proc.kill("SIGTERM");
      await proc.exited;
    },
  };
}

/** Verification's CPU per round: the verifying agent's CPU over ROUNDS periods minus the floor's, per round. */
async function measure(verifying: Agent, floor: Agent): Promise<{ perRound: number; checks: number; rounds: number }> {
  // Past the first full round (the pods' first checks spread over it).
  await until(async () => (await verifying.status()).verify?.lastRound !== undefined, (PERIOD + 15) * 1000, "a round");
  const v0 = verifying.cpuMs();
  const f0 = floor.cpuMs();
  const s0 = (await verifying.status()).verify;
  const r0 = s0.runs as number;
  await Bun.sleep(ROUNDS * PERIOD * 1000);
  const v1 = verifying.cpuMs();
  const f1 = floor.cpuMs();
  const s1 = (await verifying.status()).verify;
  const r1 = s1.runs as number;
  const rounds = (r1 - r0) / PODS;
  // Every pod is meshed: a round that finds rules missing (and writes them) is not the round measured.
  if (s1.missing !== s0.missing || s1.unreachable.length > 0)
    throw new Error(`verify found rules missing or pods it cannot reach: ${JSON.stringify(s1).slice(0, 1500)}`);
  return { perRound: (v1 - v0 - (f1 - f0)) / rounds, checks: r1 - r0, rounds };
}

export async function benchAgentVerify(): Promise<string> {
  ensureBuilt();
  const dir = mkdtempSync(join(tmpdir(), "meshcni-bench-verify-"));
  const api = await startApiServer({ token: TOKEN });
  const base = await Bun.file(repoPath("testdata/pods/linkerd-meshed.json")).json();
  api.addNamespace(await Bun.file(repoPath("testdata/pods/namespace-emojivoto.json")).json());
  const tag = `mcvb${process.pid % 10000}`;
  const nets: string[] = [];
  const rows: string[] = [];
  const agents: Agent[] = [];
  const said = Bun.spawnSync([join(DIST, "meshcni")], { env: { PATH: Bun.env.PATH! }, stderr: "pipe" });
  const VERSION = /^meshcni (\S+):/.exec(said.stderr.toString())?.[1] ?? "unknown";
  try {
    const pods: { name: string; uid: string; ip: string; netns: string }[] = [];
    const now = new Date(Math.floor(Date.now() / 1000) * 1000).toISOString().replace(".000Z", "Z");
    for (let i = 0; i < PODS; i++) {
      const name = `web-${i}`;
      const uid = crypto.randomUUID();
      const ip = `10.251.${Math.floor(i / 250)}.${(i % 250) + 2}`;
      const netns = `${tag}-${i}`;
      sh(["ip", "netns", "add", netns]);
      nets.push(netns);
      const x = (argv: string[]) => sh(["ip", "netns", "exec", netns, ...argv]);
      x(["ip", "link", "set", "lo", "up"]);
      // A veth pair (its host end goes with the namespace): the pod's eth0 with its address.
      sh(["ip", "link", "add", `${tag}h${i}`.slice(0, 15), "type", "veth", "peer", "name", "eth0", "netns", netns]);
      x(["ip", "addr", "add", `${ip}/24`, "dev", "eth0"]);
      x(["ip", "link", "set", "eth0", "up"]);
      const pod = structuredClone(base);
      pod.metadata.name = name;
      pod.metadata.uid = uid;
      pod.status = {
        phase: "Running",
        podIP: ip,
        podIPs: [{ ip }],
        conditions: [{ type: "PodReadyToStartContainers", status: "True", lastTransitionTime: now }],
      };
      api.addPod(pod);
      pods.push({ name, uid, ip, netns });
    }
    for (const mode of ["iptables-nft", "nftables"] as const) {
      const label = mode === "nftables" ? "iptables-mode nftables (in process)" : "auto (iptables-nft, processes)";
      // The agent checks and writes with the entry it installs: the mode's.
      const conf = join(dir, `entry-${mode}.json`);
      writeFileSync(
        conf,
        JSON.stringify({ type: "meshcni", mesh: "linkerd", ...(mode === "nftables" ? { linkerd: NFT } : {}) }),
      );
      const verifyArgs = ["--verify-seconds", String(PERIOD), "--plugin-config", conf];
      const verifying = await startAgent(api, verifyArgs, join(dir, `v-${mode}.log`));
      const floor = await startAgent(api, ["--verify-seconds", "0"], join(dir, `f-${mode}.log`));
      agents.push(verifying, floor);
      // Each pod meshed through the verifying agent (it applies; its records name the namespaces).
      for (const p of pods) {
        for (const table of ["nat", "mangle"]) sh(["ip", "netns", "exec", p.netns, "iptables-nft", "-t", table, "-F"]);
        sh(["ip", "netns", "exec", p.netns, "nft", "flush", "ruleset"]);
        const stdin = JSON.stringify({
          cniVersion: "1.0.0",
          name: "k8s-pod-network",
          type: "meshcni",
          agent_socket: verifying.dirs.socket,
          state_dir: verifying.dirs.state,
          kubernetes: { kubeconfig: join(dir, "no-kubeconfig") },
          mesh: "linkerd",
          ...(mode === "nftables" ? { linkerd: NFT } : {}),
          prevResult: {
            cniVersion: "1.0.0",
            ips: [{ address: `${p.ip}/24`, interface: 0 }],
            interfaces: [{ name: "eth0", sandbox: `/var/run/netns/${p.netns}` }],
          },
        });
        const r = Bun.spawnSync([join(DIST, "meshcni")], {
          stdin: new Blob([stdin]),
          env: {
            PATH: Bun.env.PATH!,
            CNI_COMMAND: "ADD",
            CNI_CONTAINERID: `bench-${p.name}`,
            CNI_NETNS: `/var/run/netns/${p.netns}`,
            CNI_IFNAME: "eth0",
            CNI_PATH: "/opt/cni/bin",
            CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${p.name};K8S_POD_UID=${p.uid}`,
          },
          stdout: "pipe",
          stderr: "pipe",
        });
        if (r.exitCode !== 0) throw new Error(`ADD of ${p.name}: ${r.stdout.toString()} ${r.stderr.toString()}`);
      }
      const byRecord = await measure(verifying, floor);
      rows.push(row(`${label}, found by record`, byRecord));
      await verifying.stop();
      // The same pods with no records (started before the chain): found by address.
      rmSync(join(verifying.dirs.state, "containers"), { recursive: true, force: true });
      const again = await startAgent(api, verifyArgs, join(dir, `a-${mode}.log`), verifying.dirs);
      agents.push(again);
      const byAddress = await measure(again, floor);
      rows.push(row(`${label}, found by address (no records)`, byAddress));
      await again.stop();
      await floor.stop();
    }
  } finally {
    for (const a of agents) await a.stop().catch(() => {});
    for (const n of nets) sh(["ip", "netns", "del", n]);
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return [
    `## The agent's verification (${PODS} meshed pods, meshcni ${VERSION})`,
    "",
    `The agent's CPU (utime + stime, with the processes it started) per verification round of ${PODS} pods: a verifying agent's ` +
      `(--verify-seconds ${PERIOD}) minus an agent's with --verify-seconds 0 over the same ${ROUNDS} periods, ` +
      `per round; the share of one core at the default period (${DEFAULT_PERIOD} s; target ≤ 1%).`,
    "",
    "| pods | CPU per round | per pod | share of one core at 60 s | checks (rounds) |",
    "|---|---|---|---|---|",
    ...rows,
    "",
  ].join("\n");
}

function row(name: string, m: { perRound: number; checks: number; rounds: number }): string {
  const share = m.perRound / (DEFAULT_PERIOD * 1000);
  const verdict = share <= 0.01 ? "✓" : "✗";
  return (
    `| ${name} | ${m.perRound.toFixed(0)} ms | ${(m.perRound / PODS).toFixed(2)} ms | ` +
    `${(share * 100).toFixed(2)}% ${verdict} | ${m.checks} (${m.rounds.toFixed(1)}) |`
  );
}

if (import.meta.main) console.log(await benchAgentVerify());
