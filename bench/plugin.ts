// Plugin benchmarks, each as a ratio to a floor measured in the same run:
// - VERSION vs an empty program compiled the same way (Bun's start-up floor), and vs Debian's
//   Go `bridge` plugin;
// - ADD for a meshed pod vs nsenter + iptables-restore of the same payload plus one GET of the pod
//   from the same stand-in API server (curl), and vs Linkerd's method (one nsenter + iptables
//   exec per rule);
// - ADD for a pod that is not meshed vs meshcni VERSION;
// - peak memory of one run (GNU time's maximum resident set size);
// - through a warm node agent (bench/support/api-process.ts runs a stand-in): meshed ADD vs an
//   empty program + nsenter + iptables-restore and vs Linkerd's method, ADD of a pod that is not
//   meshed and DEL of a container never touched vs VERSION, peak RSS of a meshed ADD.
// Run alone: node_modules/.bin/bun bench/plugin.ts
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoPath } from "../test/support/golden.ts";
import { linkerdProfile } from "../internal/mesh/linkerd/profile.ts";
import { parsePluginConf } from "../internal/config/plugin-config.ts";
import { ruleSetOf } from "../internal/firewall/iptables/from-plan.ts";
import { renderFresh, renderCleanup } from "../internal/firewall/iptables/restore.ts";
import { parseSave } from "../internal/firewall/iptables/save.ts";
import {
  buildEmptyProgram,
  buildLikePlugin,
  type Cmd,
  freshCopy,
  measure,
  ms,
  ratio,
  type Stats,
  startApiProcess,
  table,
} from "./lib.ts";

const BUILT = repoPath("dist/meshcni");
const BRIDGE = "/usr/lib/cni/bridge";
const RUNS = Number(Bun.env.BENCH_RUNS ?? 200);

function must(argv: string[], stdin?: string): string {
  const r = Bun.spawnSync(argv, {
    stdin: stdin !== undefined ? new TextEncoder().encode(stdin) : "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  if (r.exitCode !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

/** Peak RSS in MB of one run, from GNU time. */
function peakRss(cmd: Cmd): number {
  const r = Bun.spawnSync(["/usr/bin/time", "-f", "%M", ...cmd.argv], {
    env: cmd.env ?? Bun.env,
    stdin: cmd.stdin !== undefined ? new TextEncoder().encode(cmd.stdin) : "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const lines = r.stderr.toString().trim().split("\n");
  return Number(lines.at(-1)) / 1024;
}

export async function benchPlugin(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "meshcni-bench-"));
  const { proc: api, info } = await startApiProcess();
  const netns = `mcbench${process.pid}`;
  must(["ip", "netns", "add", netns]);
  const netnsPath = `/var/run/netns/${netns}`;
  try {
    // The plugin, written now beside the floors below (lib.ts's freshCopy says why).
    const PLUGIN = freshCopy(BUILT, dir);
    // The empty program, compiled exactly as the plugin is.
    const empty = await buildEmptyProgram(dir);
    // The least any plugin with an agent can do (bench/support/least-client.ts), built the same way.
    const least = await buildLikePlugin(join(import.meta.dir, "support/least-client.ts"), join(dir, "least-client"));
    const emptyPlain = join(dir, "empty-plain");
    must([repoPath("node_modules/.bin/bun"), "build", "--compile", `${empty}.ts`, "--outfile", emptyPlain]);

    const versionEnv = { PATH: Bun.env.PATH!, CNI_COMMAND: "VERSION" };
    const vstdin = '{"cniVersion":"1.0.0"}';
    // Without an agent (the kubeconfig rows), the plugin's records and fallback log go to the
    // run's own folder, not the host's /var/run/meshcni.
    const conf = {
      cniVersion: "1.0.0",
      name: "k8s-pod-network",
      type: "meshcni",
      log_level: "info",
      state_dir: join(dir, "state"),
      agent_socket: join(dir, "no-agent.sock"),
      kubernetes: { kubeconfig: info.kubeconfig },
      linkerd: { "inbound-ports-to-ignore": ["4191", "4190"], "iptables-mode": "nft" },
      prevResult: {
        cniVersion: "1.0.0",
        ips: [{ address: "10.244.1.12/24", gateway: "10.244.1.1", interface: 0 }],
        interfaces: [{ name: "eth0", sandbox: netnsPath }],
      },
    };
    const addEnv = (pod: string, ns = "emojivoto") => ({
      PATH: Bun.env.PATH!,
      CNI_COMMAND: "ADD",
      CNI_CONTAINERID: "bench",
      CNI_NETNS: netnsPath,
      CNI_IFNAME: "eth0",
      CNI_PATH: "/opt/cni/bin",
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${pod}`,
    });

    // The payload the plugin applies for the meshed pod, from the same rule builder.
    const pod = await Bun.file(repoPath("testdata/pods/linkerd-meshed.json")).json();
    const nsObj = await Bun.file(repoPath("testdata/pods/namespace-emojivoto.json")).json();
    const pconf = parsePluginConf(JSON.stringify(conf));
    const redirect = linkerdProfile.plan({ conf: pconf, pod, namespace: nsObj, podAddresses: [] });
    const ruleset = ruleSetOf(redirect.families[0]!);
    const payload = renderFresh(ruleset);
    // The same entry with the node agent: the agent writes agent_socket and state_dir.
    const agentConf = JSON.stringify({ ...conf, agent_socket: info.agentSocket, state_dir: info.stateDir });
    const delEnv = { ...addEnv("web-5b8b6f7c9d-x2x7q"), CNI_COMMAND: "DEL", CNI_CONTAINERID: "never-added" };
    const reset = () => {
      const state = parseSave(must(["ip", "netns", "exec", netns, "iptables-nft-save", "-t", "nat"]));
      const cleanup = renderCleanup(ruleset.chains, state);
      if (cleanup) must(["ip", "netns", "exec", netns, "iptables-nft-restore", "--noflush"], cleanup);
    };
    // Linkerd's method: iptables-save, then one nsenter + iptables exec per chain and rule, then
    // a final iptables-save, as linkerd-cni runs them.
    const perRule = [
      `nsenter --net=${netnsPath} -- iptables-nft-save -t nat >/dev/null`,
      ...ruleset.chains.map((c) => `nsenter --net=${netnsPath} -- iptables-nft -t nat -N ${c.name}`),
      ...ruleset.rules.map(
        (r) =>
          `nsenter --net=${netnsPath} -- iptables-nft -t nat -A ${r.chain} ${r.args.map((a) => `'${a}'`).join(" ")}`,
      ),
      `nsenter --net=${netnsPath} -- iptables-nft-save -t nat >/dev/null`,
    ].join(" && ");
    const podUrl = `${info.url}/api/v1/namespaces/emojivoto/pods/web-5b8b6f7c9d-x2x7q`;

    const startup = measure(
      [
        { name: "empty Bun program (same build)", argv: [empty], env: versionEnv, stdin: vstdin },
        { name: "empty Bun program (plain --compile)", argv: [emptyPlain], env: versionEnv, stdin: vstdin },
        { name: "meshcni VERSION", argv: [PLUGIN], env: versionEnv, stdin: vstdin },
        { name: "Go bridge VERSION", argv: [BRIDGE], env: versionEnv, stdin: vstdin },
      ],
      RUNS,
    );
    const [emptySame, emptyPlainS, version, bridge] = startup as [Stats, Stats, Stats, Stats];

    const add = measure(
      [
        {
          name: "meshcni ADD, meshed pod (GET pod + namespace, restore)",
          argv: [PLUGIN],
          env: addEnv("web-5b8b6f7c9d-x2x7q"),
          stdin: JSON.stringify(conf),
          before: reset,
        },
        {
          name: "meshcni ADD, meshed pod with every annotation (one GET, restore)",
          argv: [PLUGIN],
          env: addEnv("web-5b8b6f7c9d-a1b2c"),
          stdin: JSON.stringify(conf),
          before: reset,
        },
        {
          name: "floor: nsenter + iptables-restore of the same payload",
          argv: ["nsenter", `--net=${netnsPath}`, "--", "iptables-nft-restore", "--noflush"],
          stdin: payload,
          before: reset,
        },
        {
          name: "floor: one GET of the pod (curl, TLS, token)",
          argv: [
            "curl",
            "-sf",
            "-o",
            "/dev/null",
            "--cacert",
            info.caFile,
            "-H",
            `Authorization: Bearer ${info.token}`,
            podUrl,
          ],
        },
        { name: "Linkerd's method: one nsenter + iptables exec per rule", argv: ["sh", "-c", perRule], before: reset },
        {
          name: "meshcni ADD, pod without a proxy (GET pod, no rules)",
          argv: [PLUGIN],
          env: addEnv("nginx-6d4cf56db6-abcde", "default"),
          stdin: JSON.stringify(conf),
        },
        { name: "meshcni VERSION (same round)", argv: [PLUGIN], env: versionEnv, stdin: vstdin },
      ],
      Math.max(50, Math.floor(RUNS / 2)),
    );
    const [addMeshed, addOneGet, floorRestore, floorGet, perRuleS, addSkip, version2] = add as Stats[] as [
      Stats,
      Stats,
      Stats,
      Stats,
      Stats,
      Stats,
      Stats,
    ];
    const floor = floorRestore.median + floorGet.median;

    // Through a warm node agent: no API request, no TLS.
    const viaAgent = measure(
      [
        {
          name: "meshcni ADD, meshed pod, warm agent (restore)",
          argv: [PLUGIN],
          env: addEnv("web-5b8b6f7c9d-x2x7q"),
          stdin: agentConf,
          before: reset,
        },
        { name: "floor: empty Bun program (same build)", argv: [empty], env: versionEnv, stdin: vstdin },
        {
          name: "floor: nsenter + iptables-restore of the same payload",
          argv: ["nsenter", `--net=${netnsPath}`, "--", "iptables-nft-restore", "--noflush"],
          stdin: payload,
          before: reset,
        },
        { name: "Linkerd's method: one nsenter + iptables exec per rule", argv: ["sh", "-c", perRule], before: reset },
        {
          name: "meshcni ADD, pod without a proxy, warm agent",
          argv: [PLUGIN],
          env: addEnv("nginx-6d4cf56db6-abcde", "default"),
          stdin: agentConf,
        },
        { name: "meshcni DEL, container never touched (no record)", argv: [PLUGIN], env: delEnv, stdin: agentConf },
        { name: "meshcni VERSION (same round)", argv: [PLUGIN], env: versionEnv, stdin: vstdin },
        {
          name: "the least agent client, ADD: stdin, one request and answer (the agent reports)",
          argv: [least],
          env: addEnv("nginx-6d4cf56db6-abcde", "default"),
          stdin: agentConf,
        },
        {
          name: "the least agent client, DEL: stdin, a stat, one report",
          argv: [least],
          env: delEnv,
          stdin: agentConf,
        },
        {
          name:
            "the least agent client, meshed ADD: one request and answer, " +
            "then nsenter + iptables-restore of the payload by Bun.spawn, one report",
          argv: [least],
          env: { ...addEnv("web-5b8b6f7c9d-x2x7q"), LEAST_PAYLOAD: payload },
          stdin: agentConf,
          before: reset,
        },
      ],
      Math.max(50, Math.floor(RUNS / 2)),
    );
    const [aAdd, aEmpty, aRestore, aPerRule, aSkip, aDel, aVersion, lAdd, lDel, lApply] = viaAgent as [
      Stats,
      Stats,
      Stats,
      Stats,
      Stats,
      Stats,
      Stats,
      Stats,
      Stats,
      Stats,
    ];
    const agentFloor = aEmpty.median + aRestore.median;
    // What no design with an agent can skip for a meshed pod: the least client's ADD applying
    // the payload itself (one process started, as a plugin must) and reporting.
    const leastMeshed = lApply.median;
    const rssLeast = Math.max(
      ...[0, 1, 2].map(() =>
        peakRss({ name: "", argv: [least], env: addEnv("nginx-6d4cf56db6-abcde", "default"), stdin: agentConf }),
      ),
    );
    // The same, applying a meshed pod's payload itself: what starting one process adds.
    const rssLeastApply = Math.max(
      ...[0, 1, 2].map(() => {
        reset();
        return peakRss({
          name: "",
          argv: [least],
          env: { ...addEnv("web-5b8b6f7c9d-x2x7q"), LEAST_PAYLOAD: payload },
          stdin: agentConf,
        });
      }),
    );

    reset();
    const rssAdd = peakRss({
      name: "",
      argv: [PLUGIN],
      env: addEnv("web-5b8b6f7c9d-x2x7q"),
      stdin: JSON.stringify(conf),
    });
    const rssVersion = peakRss({ name: "", argv: [PLUGIN], env: versionEnv, stdin: vstdin });
    const rssSkip = peakRss({
      name: "",
      argv: [PLUGIN],
      env: addEnv("nginx-6d4cf56db6-abcde", "default"),
      stdin: JSON.stringify(conf),
    });
    const rssEmpty = peakRss({ name: "", argv: [empty], env: versionEnv, stdin: vstdin });
    reset();
    const rssAgentAdd = Math.max(
      ...[0, 1, 2].map(() => {
        reset();
        return peakRss({ name: "", argv: [PLUGIN], env: addEnv("web-5b8b6f7c9d-x2x7q"), stdin: agentConf });
      }),
    );
    reset();

    const verdict = (x: number, max: number) => (x <= max ? `≤ ${max}x ✓` : `> ${max}x ✗`);
    const lines = [
      "## Plugin start-up and ADD",
      "",
      `Medians of ${RUNS} runs (ADD rounds: ${add[0]!.runs}), ` +
        `interleaved; ratios against floors measured in the same run.`,
      "",
      table(startup, emptySame),
      "",
      table(add),
      "",
      "| figure | value | target |",
      "|---|---|---|",
      `| meshcni VERSION / empty Bun program (same build) ` +
        `| ${ratio(version.median, emptySame.median)} | ${verdict(version.median / emptySame.median, 1.1)} |`,
      `| meshcni VERSION / empty Bun program (plain --compile) ` +
        `| ${ratio(version.median, emptyPlainS.median)} | (reported) |`,
      `| meshcni VERSION / Go bridge VERSION | ${ratio(version.median, bridge.median)} | ` +
        `(reported; an empty Bun program is ${ratio(emptyPlainS.median, bridge.median)}) |`,
      `| ADD meshed pod / (nsenter + iptables-restore + one GET) = ${ms(addMeshed.median)} / ` +
        `${ms(floor)} | ${ratio(addMeshed.median, floor)} | ${verdict(addMeshed.median / floor, 1.25)} |`,
      `| ADD meshed pod, one GET / same floor | ${ratio(addOneGet.median, floor)} | (reported) |`,
      `| ADD meshed pod / Linkerd's exec per rule (${ms(perRuleS.median)}) ` +
        `| ${ratio(addMeshed.median, perRuleS.median)} | ${verdict(addMeshed.median / perRuleS.median, 0.3)} |`,
      `| ADD pod without proxy / meshcni VERSION | ${ratio(addSkip.median, version2.median)} ` +
        `| ${verdict(addSkip.median / version2.median, 2)} |`,
      `| peak RSS: ADD meshed pod | ${rssAdd.toFixed(1)} MB | ${rssAdd <= 30 ? "≤ 30 MB ✓" : "> 30 MB ✗"} |`,
      `| peak RSS: ADD pod without proxy / VERSION / empty Bun program | ${rssSkip.toFixed(1)} ` +
        `/ ${rssVersion.toFixed(1)} / ${rssEmpty.toFixed(1)} MB | (reported) |`,
      "",
      "### Through a warm node agent",
      "",
      "The plugin asks a stand-in agent (the agent's socket server and handler, " +
        "answering from memory) and reports to it; no API request.",
      "",
      table(viaAgent),
      "",
      "| figure | value | target |",
      "|---|---|---|",
      `| ADD meshed pod / (empty Bun program + nsenter + iptables-restore) = ${ms(aAdd.median)} / ` +
        `${ms(agentFloor)} | ${ratio(aAdd.median, agentFloor)} | ${verdict(aAdd.median / agentFloor, 1.3)} |`,
      `| ADD meshed pod / Linkerd's exec per rule (${ms(aPerRule.median)}) ` +
        `| ${ratio(aAdd.median, aPerRule.median)} | ${verdict(aAdd.median / aPerRule.median, 0.3)} |`,
      `| ADD pod without proxy / meshcni VERSION | ${ratio(aSkip.median, aVersion.median)} ` +
        `| ${verdict(aSkip.median / aVersion.median, 1.5)} |`,
      `| DEL of a container never touched / meshcni VERSION | ` +
        `${ratio(aDel.median, aVersion.median)} | ${verdict(aDel.median / aVersion.median, 1.2)} |`,
      `| peak RSS: ADD meshed pod through the agent (max of 3) ` +
        `| ${rssAgentAdd.toFixed(1)} MB | ${rssAgentAdd <= 30 ? "≤ 30 MB ✓" : "> 30 MB ✗"} |`,
      "",
      "Where those targets sit: the least agent client (bench/support/least-client.ts, " +
        "compiled as the plugin is) reads stdin, asks the agent once and, for a meshed pod or a DEL, " +
        "reports once, and does nothing else: no validation, no decision, no rules, no log line. " +
        "Each target measured on it instead of the plugin; for a meshed pod, the least client " +
        "applies the same payload itself, as a plugin must (Bun.spawn of nsenter + iptables-restore).",
      "",
      "| the same figure for the least agent client | value | meshcni | target |",
      "|---|---|---|---|",
      `| ADD meshed pod: least meshed ADD, applying the payload itself (Bun.spawn of nsenter + ` +
        `iptables-restore) / (empty Bun program + nsenter + iptables-restore) | ${ratio(leastMeshed, agentFloor)} ` +
        `| ${ratio(aAdd.median, agentFloor)} | ${verdict(leastMeshed / agentFloor, 1.3)} |`,
      `| ADD meshed pod: least meshed ADD / Linkerd's exec per rule | ${ratio(leastMeshed, aPerRule.median)} ` +
        `| ${ratio(aAdd.median, aPerRule.median)} | ${verdict(leastMeshed / aPerRule.median, 0.3)} |`,
      `| ADD pod without proxy: least ADD / meshcni VERSION | ${ratio(lAdd.median, aVersion.median)} ` +
        `| ${ratio(aSkip.median, aVersion.median)} | ${verdict(lAdd.median / aVersion.median, 1.5)} |`,
      `| DEL never touched: least DEL / meshcni VERSION | ${ratio(lDel.median, aVersion.median)} ` +
        `| ${ratio(aDel.median, aVersion.median)} | ${verdict(lDel.median / aVersion.median, 1.2)} |`,
      `| peak RSS (max of 3): least ADD, without the restore's process | ${rssLeast.toFixed(1)} MB ` +
        `| ${rssAgentAdd.toFixed(1)} MB | ${rssLeast <= 30 ? "≤ 30 MB ✓" : "> 30 MB ✗"} |`,
      `| peak RSS (max of 3): least meshed ADD, applying the payload itself (Bun.spawn) ` +
        `| ${rssLeastApply.toFixed(1)} MB | ${rssAgentAdd.toFixed(1)} MB ` +
        `| ${rssLeastApply <= 30 ? "≤ 30 MB ✓" : "> 30 MB ✗"} |`,
      "",
    ];
    return lines.join("\n");
  } finally {
    api.stdin.end();
    Bun.spawnSync(["ip", "netns", "del", netns]);
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(await benchPlugin());
