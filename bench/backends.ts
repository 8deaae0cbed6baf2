// Backends side by side: ADD and DEL of the compiled plugin for a meshed dual-stack pod (Linkerd,
// ipv6: true, so both families) on the iptables backend (iptables-nft-restore, one transaction
// per family) and on the nftables backend (one transaction: in process through libnftables, and
// with MESHCNI_NFT_INPROCESS=0 through nsenter + `nft -f`), against the same floor:
// an empty Bun program built as the plugin is, plus one GET of the pod from the same stand-in API
// server (curl). Also the backends' own apply step alone (nsenter + the binaries, same payloads).
// Run alone: node_modules/.bin/bun bench/backends.ts
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ruleSetOf } from "../internal/firewall/iptables/from-plan.ts";
import { renderFresh } from "../internal/firewall/iptables/restore.ts";
import { renderCreateScript } from "../internal/firewall/nftables/render.ts";
import { parsePluginConf } from "../internal/config/plugin-config.ts";
import { linkerdProfile } from "../internal/mesh/linkerd/profile.ts";
import { writeRecordFor } from "../internal/agent/state/files.ts";
import { repoPath } from "../test/support/golden.ts";
import {
  buildEmptyProgram,
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
const RUNS = Number(Bun.env.BENCH_RUNS ?? 100);

function must(argv: string[], stdin?: string): string {
  const r = Bun.spawnSync(argv, {
    stdin: stdin !== undefined ? new TextEncoder().encode(stdin) : "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  if (r.exitCode !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr.toString()}`);
  return r.stdout.toString();
}

export async function benchBackends(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "meshcni-bench-backends-"));
  // The plugin, written now beside the floor compiled below (lib.ts's freshCopy says why).
  const PLUGIN = freshCopy(BUILT, dir);
  const { proc: api, info } = await startApiProcess();
  const netns = `mcbb${process.pid}`;
  must(["ip", "netns", "add", netns]);
  const netnsPath = `/var/run/netns/${netns}`;
  try {
    const empty = await buildEmptyProgram(dir);

    // The plugin's records in the run's own folder, not the host's /var/run/meshcni.
    const stateDir = join(dir, "state");
    const confFor = (mode: string) => ({
      cniVersion: "1.0.0",
      name: "k8s-pod-network",
      type: "meshcni",
      log_level: "info",
      state_dir: stateDir,
      kubernetes: { kubeconfig: info.kubeconfig },
      linkerd: { "inbound-ports-to-ignore": ["4191", "4190"], "iptables-mode": mode, ipv6: true },
      prevResult: {
        cniVersion: "1.0.0",
        ips: [
          { address: "10.244.1.12/24", gateway: "10.244.1.1", interface: 0 },
          { address: "fd00:10:244:1::c/64", gateway: "fd00:10:244:1::1", interface: 0 },
        ],
        interfaces: [{ name: "eth0", sandbox: netnsPath }],
      },
    });
    const env = (command: string) => ({
      PATH: Bun.env.PATH!,
      CNI_COMMAND: command,
      CNI_CONTAINERID: "bench",
      CNI_NETNS: netnsPath,
      CNI_IFNAME: "eth0",
      CNI_PATH: "/opt/cni/bin",
      CNI_ARGS: "IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=web-5b8b6f7c9d-x2x7q",
    });

    // The same plan the plugin builds, as each backend's payload.
    const pod = await Bun.file(repoPath("testdata/pods/linkerd-meshed.json")).json();
    const nsObj = await Bun.file(repoPath("testdata/pods/namespace-emojivoto.json")).json();
    const plan = linkerdProfile.plan({
      conf: parsePluginConf(JSON.stringify(confFor("nft"))),
      pod,
      namespace: nsObj,
      podAddresses: [],
    });
    const [v4, v6] = plan.families.map(ruleSetOf).map(renderFresh) as [string, string];
    // What the plugin sends to a namespace without meshcni's tables (the first try of every ADD).
    const script = renderCreateScript(plan);
    const enter = ["nsenter", `--net=${netnsPath}`, "--"];
    // `nft flush ruleset` empties iptables-nft's tables too: one reset for both backends.
    const reset = () => must(["ip", "netns", "exec", netns, "nft", "flush", "ruleset"]);
    // Each DEL finds the pod's rules and the record an ADD leaves: without the record, DEL
    // would take the path of a container meshcni never touched and remove nothing.
    const recorded = (backend: string) =>
      writeRecordFor(stateDir, {
        v: 1,
        containerId: "bench",
        namespace: "emojivoto",
        name: "web-5b8b6f7c9d-x2x7q",
        decision: "meshed",
        reason: "the pod runs linkerd-proxy",
        backend,
        families: [4, 6],
        time: new Date().toISOString(),
      });
    const withIptables = () => {
      reset();
      must(["ip", "netns", "exec", netns, "iptables-nft-restore", "--noflush"], v4);
      must(["ip", "netns", "exec", netns, "ip6tables-nft-restore", "--noflush"], v6);
      recorded("nft");
    };
    const withNft = () => {
      reset();
      must(["ip", "netns", "exec", netns, "nft", "-f", "-"], script);
      recorded("nftables");
    };
    const podUrl = `${info.url}/api/v1/namespaces/emojivoto/pods/web-5b8b6f7c9d-x2x7q`;
    const versionEnv = { PATH: Bun.env.PATH!, CNI_COMMAND: "VERSION" };

    const cmds: Cmd[] = [
      {
        name: "meshcni ADD, iptables backend (iptables-nft-restore × 2)",
        argv: [PLUGIN],
        env: env("ADD"),
        stdin: JSON.stringify(confFor("nft")),
        before: reset,
      },
      {
        name: "meshcni ADD, nftables backend, in process (no process started)",
        argv: [PLUGIN],
        env: env("ADD"),
        stdin: JSON.stringify(confFor("nftables")),
        before: reset,
      },
      {
        name: "meshcni ADD, nftables backend, nsenter + nft × 1",
        argv: [PLUGIN],
        env: { ...env("ADD"), MESHCNI_NFT_INPROCESS: "0" },
        stdin: JSON.stringify(confFor("nftables")),
        before: reset,
      },
      {
        name: "meshcni DEL, iptables backend",
        argv: [PLUGIN],
        env: env("DEL"),
        stdin: JSON.stringify(confFor("nft")),
        before: withIptables,
      },
      {
        name: "meshcni DEL, nftables backend, in process",
        argv: [PLUGIN],
        env: env("DEL"),
        stdin: JSON.stringify(confFor("nftables")),
        before: withNft,
      },
      {
        name: "meshcni DEL, nftables backend, nsenter + nft × 1",
        argv: [PLUGIN],
        env: { ...env("DEL"), MESHCNI_NFT_INPROCESS: "0" },
        stdin: JSON.stringify(confFor("nftables")),
        before: withNft,
      },
      // Both families at once, as the plugin applies them with iptables-nft (no shared lock).
      {
        name: "apply alone: nsenter + iptables-nft-restore, IPv4 and IPv6 at once",
        argv: [
          "sh",
          "-c",
          `${enter.join(" ")} iptables-nft-restore --noflush <<'E4' &\n${v4}E4\np=$!\n` +
            `${enter.join(" ")} ip6tables-nft-restore --noflush <<'E6'\n${v6}E6\ns=$?\nwait $p && exit $s\n`,
        ],
        before: reset,
      },
      {
        name: "apply alone: nsenter + nft -f (both families)",
        argv: [...enter, "nft", "-f", "-"],
        stdin: script,
        before: reset,
      },
      {
        name: "floor: empty Bun program (same build)",
        argv: [empty],
        env: versionEnv,
        stdin: '{"cniVersion":"1.0.0"}',
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
    ];
    const stats = measure(cmds, RUNS, 5);
    const [addIpt, addNft, addNftExec, delIpt, delNft, delNftExec, rawIpt, rawNft, emptyS, getS] = stats as [
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
    const floor = emptyS.median + getS.median;
    reset();
    return [
      "## Backends: ADD and DEL, iptables vs nftables",
      "",
      `Medians of ${RUNS} interleaved runs; a meshed Linkerd pod with IPv4 and IPv6 rules. ` +
        `The floor is an empty Bun program built as the plugin is (${ms(emptyS.median)}) ` +
        `plus one GET of the pod (${ms(getS.median)}) = ${ms(floor)}; DEL needs no API, ` +
        `so its floor is the empty program alone. The sh wrapper adds one process start to ` +
        `the iptables apply-alone row, which runs both families at once as the plugin does.`,
      "",
      table(stats),
      "",
      "| figure | iptables | nftables in process | nftables, nsenter + nft | in process / iptables |",
      "|---|---|---|---|---|",
      `| ADD / floor (${ms(floor)}) | ${ratio(addIpt.median, floor)} | ${ratio(addNft.median, floor)} ` +
        `| ${ratio(addNftExec.median, floor)} | ${ratio(addNft.median, addIpt.median)} |`,
      `| DEL / empty Bun program | ${ratio(delIpt.median, emptyS.median)} | ${ratio(delNft.median, emptyS.median)} ` +
        `| ${ratio(delNftExec.median, emptyS.median)} | ${ratio(delNft.median, delIpt.median)} |`,
      `| apply alone (processes) | ${ms(rawIpt.median)} | | ${ms(rawNft.median)} | |`,
      "",
    ].join("\n");
  } finally {
    api.stdin.end();
    Bun.spawnSync(["ip", "netns", "del", netns]);
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(await benchBackends());
