// The agent applies (issue 22): every figure a ratio to a floor measured in the same run, with
// the real compiled agent (dist/meshcni-installer) on this host against the stand-in API server,
// its cache in sync before anything is timed.
// - The plugin's own cost: a meshed ADD through an agent that applies (iptables-mode nftables: in process)
//   against the least agent client (bench/support/least-client.ts, compiled as the plugin is)
//   asking the same agent for the same pod with the same request, the agent applying in both:
//   wall time, and CPU (user + sys of the process and its children, from wait4's rusage);
//   peak RSS (GNU time) of an ADD and a DEL, each binary dropped from the page cache first (see
//   peakRss).
// - End to end: that ADD against today's warm-agent meshed ADD in iptables-nft mode (a second
//   agent with --agent-applies=false: it plans, the plugin applies with nsenter and
//   iptables-nft-restore), in the same run; and every mode the agent applies with.
// - DEL of a meshed pod (its record there) against the least client's DEL (a stat, one report).
// - 110 pods at once: bridge + meshcni through the agent, bridge + the least client asking the
//   same agent, bridge alone, bridge + meshcni with the plugin applying, and 110 × VERSION.
// - The agent's own CPU per meshed ADD (utime + stime of all its threads, /proc/PID/stat).
// Run alone: node_modules/.bin/bun bench/agent-applies.ts
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { recordPath } from "../internal/wire/state.ts";
import { ensureBuilt, freePort, HostDirs, INSTALLER, installerArgs, until } from "../test/agent/harness.ts";
import { type ApiServer, startApiServer } from "../test/support/apiserver.ts";
import { bridgeConflist, CniRuntime } from "../test/support/cni-runtime.ts";
import { repoPath } from "../test/support/golden.ts";
import { sh, uniq } from "../test/support/netns.ts";
import { DIST, REFERENCE_PLUGINS } from "../test/support/pod-lab.ts";
import { buildLikePlugin, type Cmd, freshCopy, ms, ratio, summarize, table } from "./lib.ts";

const RUNS = Number(Bun.env.BENCH_RUNS ?? 100);
const BURST = Number(Bun.env.BENCH_BURST_PODS ?? 110);
const ROUNDS = Number(Bun.env.BENCH_BURST_ROUNDS ?? 3);
const NODE = "node-1";
const TOKEN = "applies-token";
const NS = "emojivoto";
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

interface Agent {
  pid: number;
  dirs: HostDirs;
  stop(): Promise<void>;
  /** utime + stime of all its threads, in ms. */
  cpuMs(): number;
}

async function startAgent(api: ApiServer, extra: string[], logFile: string): Promise<Agent> {
  const dirs = new HostDirs(TOKEN, api.caPem);
  writeFileSync(
    join(dirs.net, "10-bridge.conflist"),
    JSON.stringify({ cniVersion: "1.0.0", name: "node-net", plugins: [{ type: "bridge", bridge: "unused0" }] }),
  );
  const port = freePort();
  // The log to a file: the benchmark's timed runs block this process, and a pipe would fill.
  const proc = Bun.spawn(
    [
      INSTALLER,
      ...installerArgs(dirs, [
        "--node-name",
        NODE,
        "--plugin-binary",
        join(DIST, "meshcni"),
        "--health-port",
        String(port),
        "--repair",
        "off",
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
  const synced = async () => {
    const s = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
    return s?.cache?.pods?.synced === true;
  };
  await until(() => synced().catch(() => false), 30_000, "the agent's cache in sync");
  const clk = Number(sh(["getconf", "CLK_TCK"]).stdout.trim()) || 100;
  return {
    pid: proc.pid,
    dirs,
    async stop() {
      proc.kill("SIGTERM");
      await proc.exited;
      dirs.cleanup();
    },
    cpuMs() {
      const f = readFileSync(`/proc/${proc.pid}/stat`, "utf8").split(") ")[1]!.split(" ");
      return ((Number(f[11]) + Number(f[12])) * 1000) / clk;
    },
  };
}

/** Times each command `runs` times round-robin; wall time and CPU (user + sys, children included). */
function measureCpu(cmds: Cmd[], runs: number, warmup = 5) {
  const wall = cmds.map(() => [] as number[]);
  const cpu = cmds.map(() => [] as number[]);
  const enc = new TextEncoder();
  for (let i = 0; i < runs + warmup; i++) {
    cmds.forEach((c, k) => {
      c.before?.();
      const t0 = performance.now();
      const r = Bun.spawnSync(c.argv, {
        env: c.env ?? Bun.env,
        stdin: c.stdin !== undefined ? enc.encode(c.stdin) : "ignore",
        stdout: "pipe",
        stderr: "pipe",
      });
      const dt = performance.now() - t0;
      if (r.exitCode !== 0) throw new Error(`${c.name}: exit ${r.exitCode}\n${r.stdout}\n${r.stderr}`);
      if (i >= warmup) {
        wall[k]!.push(dt);
        cpu[k]!.push(Number(r.resourceUsage!.cpuTime.total) / 1000);
      }
    });
  }
  return cmds.map((c, k) => ({ wall: summarize(c.name, wall[k]!), cpu: summarize(c.name, cpu[k]!) }));
}

/**
 * Peak RSS in MB of one run, from GNU time. Most of it is the executable's own pages (the runtime's
 * code it runs), mapped from the page cache, and how many a fault maps depends on how the file
 * came into the cache (one large write, a copy in chunks, readahead): the same binary differs by 3
 * to 4 MB. So each binary is dropped from the page cache and run once before its measured runs,
 * and every binary measured is read back in the same way.
 */
function peakRssOf(cmd: Cmd): number {
  // Written back first: the page cache keeps a file's dirty pages (a binary this run wrote).
  sh(["sync", cmd.argv[0]!]);
  sh(["dd", `if=${cmd.argv[0]}`, "iflag=nocache", "count=0", "status=none"]);
  peakRss(cmd);
  return Math.max(peakRss(cmd), peakRss(cmd), peakRss(cmd));
}

function peakRss(cmd: Cmd): number {
  cmd.before?.();
  const r = Bun.spawnSync(["/usr/bin/time", "-f", "%M", ...cmd.argv], {
    env: cmd.env ?? Bun.env,
    stdin: cmd.stdin !== undefined ? new TextEncoder().encode(cmd.stdin) : "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  return Number(r.stderr.toString().trim().split("\n").at(-1)) / 1024;
}

export async function benchAgentApplies(): Promise<string> {
  ensureBuilt();
  const dir = mkdtempSync(join(tmpdir(), "meshcni-bench-applies-"));
  const api = await startApiServer({ token: TOKEN });
  const base = await Bun.file(repoPath("testdata/pods/linkerd-meshed.json")).json();
  api.addNamespace(await Bun.file(repoPath("testdata/pods/namespace-emojivoto.json")).json());
  for (let i = 0; i < BURST; i++) {
    const pod = structuredClone(base);
    pod.metadata.name = `web-${i}`;
    pod.metadata.uid = crypto.randomUUID();
    api.addPod(pod);
  }
  const applying = await startAgent(api, [], join(dir, "agent-applies.log"));
  const planning = await startAgent(api, ["--agent-applies=false"], join(dir, "agent-plans.log"));
  const netns = `mcap${process.pid}`;
  // Legacy iptables tables stay in a namespace once made (auto then takes legacy there): its own.
  const legacyNetns = `mcal${process.pid}`;
  sh(["ip", "netns", "add", netns]);
  sh(["ip", "netns", "add", legacyNetns]);
  const netnsPath = `/var/run/netns/${netns}`;
  const names: string[] = [];
  try {
    const PLUGIN = freshCopy(join(DIST, "meshcni"), dir);
    const least = await buildLikePlugin(join(import.meta.dir, "support/least-client.ts"), join(dir, "least-client"));
    // The build's version, which the agent checks the plugin's request against.
    const said = Bun.spawnSync([PLUGIN], { env: { PATH: Bun.env.PATH! }, stderr: "pipe" }).stderr.toString();
    const VERSION = /^meshcni (\S+):/.exec(said)?.[1] ?? "unknown";
    const entry = (agent: Agent, mode: string) => ({
      cniVersion: "1.0.0",
      name: "k8s-pod-network",
      type: "meshcni",
      log_level: "info",
      agent_socket: agent.dirs.socket,
      state_dir: agent.dirs.state,
      kubernetes: { kubeconfig: join(dir, "no-kubeconfig") },
      linkerd: { "inbound-ports-to-ignore": ["4191", "4190"], "iptables-mode": mode },
      prevResult: {
        cniVersion: "1.0.0",
        ips: [{ address: "10.244.1.12/24", gateway: "10.244.1.1", interface: 0 }],
        interfaces: [{ name: "eth0", sandbox: netnsPath }],
      },
    });
    const uid0 = (api.objects.get(`/api/v1/namespaces/${NS}/pods/web-0`) as { metadata: { uid: string } }).metadata.uid;
    const env = (command: string, id = "bench") => ({
      PATH: Bun.env.PATH!,
      CNI_COMMAND: command,
      CNI_CONTAINERID: id,
      CNI_NETNS: netnsPath,
      CNI_IFNAME: "eth0",
      CNI_PATH: "/opt/cni/bin",
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=web-0;K8S_POD_UID=${uid0}`,
    });
    // Each ADD into a namespace as the runtime hands it over: no rules of either kind.
    const reset = () => sh(["ip", "netns", "exec", netns, "nft", "flush", "ruleset"]);
    const resetLegacy = () =>
      sh(["ip", "netns", "exec", legacyNetns, "iptables-legacy", "-t", "nat", "-F"]) &&
      sh(["ip", "netns", "exec", legacyNetns, "iptables-legacy", "-t", "nat", "-X"]);
    const addVia = (
      name: string,
      argv: string[],
      agent: Agent,
      mode: string,
      extra: Record<string, string> = {},
    ): Cmd => ({
      name,
      argv,
      env: { ...env("ADD"), ...extra },
      stdin: JSON.stringify(entry(agent, mode)),
      before: reset,
    });
    const meshed = JSON.stringify({
      v: 1,
      containerId: "bench-del",
      namespace: NS,
      name: "web-0",
      decision: "meshed",
      reason: "bench",
      backend: "nftables in process",
      families: [4],
      time: new Date().toISOString(),
    });
    const plantRecord = () => {
      mkdirSync(join(applying.dirs.state, "containers"), { recursive: true });
      writeFileSync(recordPath(applying.dirs.state, "bench-del"), meshed);
    };
    const cmds: Cmd[] = [
      addVia(
        "meshcni ADD, meshed pod, the agent applies (iptables-mode nftables: in process)",
        [PLUGIN],
        applying,
        "nftables",
      ),
      addVia("least client ADD, the same request to the same agent (it applies)", [least], applying, "nftables", {
        LEAST_VERSION: VERSION,
      }),
      addVia("today: meshcni ADD, warm agent plans, the plugin applies (iptables-nft)", [PLUGIN], planning, "nft"),
      addVia("meshcni ADD, the agent applies, iptables-mode nft (its iptables-nft-restore)", [PLUGIN], applying, "nft"),
      {
        ...addVia("meshcni ADD, the agent applies, iptables-mode legacy", [PLUGIN], applying, "legacy"),
        env: { ...env("ADD"), CNI_NETNS: `/var/run/netns/${legacyNetns}` },
        before: resetLegacy,
      },
      addVia("least client ADD, the agent applies, iptables-mode nft", [least], applying, "nft", {
        LEAST_VERSION: VERSION,
      }),
      {
        name: "meshcni DEL, meshed pod (its record there)",
        argv: [PLUGIN],
        env: env("DEL", "bench-del"),
        stdin: JSON.stringify(entry(applying, "nftables")),
        before: plantRecord,
      },
      {
        name: "least client DEL (a stat, one report)",
        argv: [least],
        env: env("DEL", "bench-del"),
        stdin: JSON.stringify(entry(applying, "nftables")),
        before: plantRecord,
      },
    ];
    const r = measureCpu(cmds, RUNS);
    // The nftables rows applied in process, as meant.
    const rec = JSON.parse(readFileSync(recordPath(applying.dirs.state, "bench"), "utf8"));
    cmds[0]!.before!();
    Bun.spawnSync(cmds[0]!.argv, { env: cmds[0]!.env!, stdin: new TextEncoder().encode(cmds[0]!.stdin!) });
    const auto = JSON.parse(readFileSync(recordPath(applying.dirs.state, "bench"), "utf8")).backend;
    if (auto !== "nftables in process") throw new Error(`nftables applied with ${auto} (${rec.backend} before)`);
    // The agent's own CPU per meshed ADD: a series of the plugin's ADDs alone (nftables in process).
    const cpu0 = applying.cpuMs();
    measureCpu([cmds[0]!], RUNS, 0);
    const agentCpuPerAdd = (applying.cpuMs() - cpu0) / RUNS;
    const cpuPlan0 = planning.cpuMs();
    measureCpu([cmds[2]!], RUNS, 0);
    const planningCpuPerAdd = (planning.cpuMs() - cpuPlan0) / RUNS;
    const [aAdd, lAdd, today, aNft, aLegacy, lNft, aDel, lDel] = r as [
      (typeof r)[0],
      (typeof r)[0],
      (typeof r)[0],
      (typeof r)[0],
      (typeof r)[0],
      (typeof r)[0],
      (typeof r)[0],
      (typeof r)[0],
    ];
    const rssPlugin = peakRssOf(cmds[0]!);
    const rssLeast = peakRssOf(cmds[1]!);
    const rssPluginDel = peakRssOf(cmds[6]!);
    const rssLeastDel = peakRssOf(cmds[7]!);
    void lNft;

    // The burst: BURST fresh namespaces at once through the spec's call sequence.
    const bridge = `mcab${uniq()}`.slice(0, 15);
    const subnet = `10.${200 + (process.pid % 50)}.${(process.pid >> 3) % 250}.0/24`;
    const leastDir = join(dir, "least-plugins");
    mkdirSync(leastDir);
    sh(["cp", least, join(leastDir, "meshcni")]);
    const runtime = (withPlugin: boolean, agent: Agent, mode: string, dirs: string[], round: string, e = {}) => {
      const c = bridgeConflist({
        name: `bench-${round}`,
        bridge,
        subnet,
        ipamDir: join(dir, "ipam"),
        meshcni: { ...entry(agent, mode), timeout_seconds: 60, prevResult: undefined },
      });
      if (!withPlugin) c.plugins = c.plugins.slice(0, 1);
      return new CniRuntime(c, [REFERENCE_PLUGINS, ...dirs], join(dir, `cache-${round}`), e);
    };
    const burst = async (rt: CniRuntime, round: string) => {
      const pods = Array.from({ length: BURST }, (_, i) => ({
        ns: `mcab${round}${i}`,
        a: {
          containerId: `c${round}${i}`,
          netns: `/var/run/netns/mcab${round}${i}`,
          ifname: "eth0",
          cniArgs: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=web-${i}`,
        },
      }));
      sh(["ip", "-batch", "-"], { stdin: pods.map((p) => `netns add ${p.ns}\n`).join("") });
      names.push(...pods.map((p) => p.ns));
      const t0 = performance.now();
      const failed: string[] = [];
      await Promise.all(pods.map((p) => rt.add(p.a).catch((e) => void failed.push((e as Error).message))));
      const wall = performance.now() - t0;
      if (failed.length > 0) throw new Error(`burst ${round}: ${failed.length} failed: ${failed[0]}`);
      await Promise.all(pods.map((p) => rt.del(p.a).catch(() => {})));
      sh(["ip", "-force", "-batch", "-"], { stdin: pods.map((p) => `netns del ${p.ns}\n`).join("") });
      return wall;
    };
    const versionBurst = async () => {
      const t0 = performance.now();
      await Promise.all(
        Array.from(
          { length: BURST },
          () => Bun.spawn([PLUGIN], { env: { CNI_COMMAND: "VERSION" }, stdout: "ignore", stderr: "ignore" }).exited,
        ),
      );
      return performance.now() - t0;
    };
    const rows = {
      bridge: [] as number[],
      meshcni: [] as number[],
      least: [] as number[],
      today: [] as number[],
      version: [] as number[],
    };
    const burstCpu: number[] = [];
    const head = [
      "## The agent applies",
      "",
      `Medians of ${RUNS} runs each, interleaved, with the real agent on this host (its cache in sync); a second agent with --agent-applies=false for today's path. Each ADD into a namespace emptied first.`,
      "",
    ];
    for (let k = 0; k < ROUNDS; k++) {
      rows.bridge.push(await burst(runtime(false, applying, "nftables", [DIST], `b${k}`), `b${k}`));
      const c0 = applying.cpuMs();
      rows.meshcni.push(await burst(runtime(true, applying, "nftables", [DIST], `m${k}`), `m${k}`));
      burstCpu.push((applying.cpuMs() - c0) / BURST);
      rows.least.push(
        await burst(runtime(true, applying, "nftables", [leastDir], `l${k}`, { LEAST_VERSION: VERSION }), `l${k}`),
      );
      rows.today.push(await burst(runtime(true, planning, "nft", [DIST], `t${k}`), `t${k}`));
      rows.version.push(await versionBurst());
    }
    sh(["ip", "link", "del", bridge]);
    const verdict = (x: number, max: number) => (x <= max ? `≤ ${max}x ✓` : `> ${max}x ✗`);
    const wallTable = table(r.map((x) => x.wall));
    const cpuRows = r.map((x) => `| ${x.cpu.name} | ${ms(x.cpu.median)} | ${ms(x.cpu.p90)} |`);
    const perAdd = [
      ...head,
      wallTable,
      "",
      "| CPU (user + sys, children included) | median | p90 |",
      "|---|---|---|",
      ...cpuRows,
      "",
      "| figure | value | target |",
      "|---|---|---|",
      `| plugin's wall time: meshed ADD through the agent / least client = ${ms(aAdd.wall.median)} / ${ms(lAdd.wall.median)} | ${ratio(aAdd.wall.median, lAdd.wall.median)} | ${verdict(aAdd.wall.median / lAdd.wall.median, 1.15)} |`,
      `| plugin's CPU: meshed ADD through the agent / least client = ${ms(aAdd.cpu.median)} / ${ms(lAdd.cpu.median)} | ${ratio(aAdd.cpu.median, lAdd.cpu.median)} | ${verdict(aAdd.cpu.median / lAdd.cpu.median, 1.15)} |`,
      `| end to end: ADD, agent applies in process / today's warm-agent ADD in iptables-nft mode = ${ms(aAdd.wall.median)} / ${ms(today.wall.median)} | ${ratio(aAdd.wall.median, today.wall.median)} | ${verdict(aAdd.wall.median / today.wall.median, 0.7)} |`,
      `| end to end: ADD, agent applies with iptables-nft / today's | ${ratio(aNft.wall.median, today.wall.median)} | (reported) |`,
      `| end to end: ADD, agent applies with iptables-legacy / today's | ${ratio(aLegacy.wall.median, today.wall.median)} | (reported) |`,
      `| DEL of a meshed pod / least client's DEL = ${ms(aDel.wall.median)} / ${ms(lDel.wall.median)} | ${ratio(aDel.wall.median, lDel.wall.median)} | ${verdict(aDel.wall.median / lDel.wall.median, 1.1)} |`,
      `| peak RSS of a meshed ADD (max of 3, each binary read back into the page cache alike): plugin / least client = ${rssPlugin.toFixed(1)} / ${rssLeast.toFixed(1)} MB | ${ratio(rssPlugin, rssLeast)} | ${verdict(rssPlugin / rssLeast, 1.1)} |`,
      `| peak RSS of a DEL (its record there): plugin / least client = ${rssPluginDel.toFixed(1)} / ${rssLeastDel.toFixed(1)} MB | ${ratio(rssPluginDel, rssLeastDel)} | (reported) |`,
      `| the agent's CPU per meshed ADD (its apply included; ${RUNS} ADDs in a row) | ${ms(agentCpuPerAdd)} | (reported; the agent that only plans: ${ms(planningCpuPerAdd)}) |`,
      "",
    ];
    if (ROUNDS === 0) return perAdd.join("\n");
    const [b, m, l, t, v] = [rows.bridge, rows.meshcni, rows.least, rows.today, rows.version].map(median) as [
      number,
      number,
      number,
      number,
      number,
    ];

    return [
      ...perAdd,
      `### ${BURST} pods at once`,
      "",
      `Median of ${ROUNDS} rounds, each ${BURST} fresh namespaces through bridge + host-local and the plugin named, at the same moment, on this machine's cores.`,
      "",
      "| chain | wall |",
      "|---|---|",
      `| bridge alone | ${ms(b)} |`,
      `| bridge + meshcni, the agent applies (nftables in process) | ${ms(m)} |`,
      `| bridge + least client asking the same agent (it applies) | ${ms(l)} |`,
      `| bridge + meshcni, today's path (agent plans, plugin applies, iptables-nft) | ${ms(t)} |`,
      `| ${BURST} × meshcni VERSION | ${ms(v)} |`,
      "",
      "| figure | value | target |",
      "|---|---|---|",
      `| meshcni's share (with − bridge alone) / the least clients' share = ${ms(m - b)} / ${ms(l - b)} | ${ratio(m - b, l - b)} | ${verdict((m - b) / (l - b), 1.15)} |`,
      `| bridge + meshcni / bridge alone | ${ratio(m, b)} | (reported; today's path ${ratio(t, b)}) |`,
      `| meshcni's share / ${BURST} × VERSION | ${ratio(m - b, v)} | (reported) |`,
      `| the agent's CPU per meshed ADD in the burst | ${ms(median(burstCpu))} | (reported) |`,
      "",
    ].join("\n");
  } finally {
    sh(["ip", "netns", "del", netns]);
    sh(["ip", "netns", "del", legacyNetns]);
    if (names.length > 0) sh(["ip", "-force", "-batch", "-"], { stdin: names.map((n) => `netns del ${n}\n`).join("") });
    await applying.stop();
    await planning.stop();
    await api.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(await benchAgentApplies());
