// Burst benchmark: 110 pods (kubelet's default maximum per node) created at the same moment, each
// a fresh network namespace wired by bridge + host-local with meshcni chained after them through
// the spec's call sequence; against floors measured in the same run with the same concurrency:
// - the same 110 pods with bridge alone (what the node pays without meshcni);
// - 110 × nsenter + iptables-restore of each pod's own payload (applying the rules, nothing else).
// Median of a few rounds each, interleaved. Lookups go through the real node agent (its watch
// cache, over its socket) unless BENCH_BURST_LOOKUP=kubeconfig (every ADD GETs its pod).
// Run alone: node_modules/.bin/bun bench/burst.ts
import { parsePluginConf } from "../internal/config/plugin-config.ts";
import { linkerdProfile } from "../internal/mesh/linkerd/profile.ts";
import { ruleSetOf } from "../internal/firewall/iptables/from-plan.ts";
import { renderFresh } from "../internal/firewall/iptables/restore.ts";
import {
  type Backend,
  type BurstPod,
  BurstLab,
  checkOwnRules,
  KUBELET_MAX_PODS,
  lockTrouble,
  ownPort,
} from "../test/hardening/burst/burst-lab.ts";
import { repoPath } from "../test/support/golden.ts";
import { ms, ratio } from "./lib.ts";

const ROUNDS = Number(Bun.env.BENCH_BURST_ROUNDS ?? 3);
const AGENT = Bun.env.BENCH_BURST_LOOKUP !== "kubeconfig";
const BACKENDS = (Bun.env.BENCH_BURST_BACKENDS ?? "nft,legacy").split(",") as Backend[];
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function payloadsFor(lab: BurstLab, backend: Backend): Promise<string[]> {
  const base = await Bun.file(repoPath("testdata/pods/linkerd-meshed.json")).json();
  const conf = parsePluginConf(JSON.stringify({ cniVersion: "1.0.0", name: "burst", ...lab.meshcniEntry(backend) }));
  return Array.from({ length: lab.size }, (_, i) => {
    const pod = structuredClone(base);
    pod.metadata.annotations = {
      ...pod.metadata.annotations,
      "config.linkerd.io/skip-inbound-ports": String(ownPort(i)),
    };
    return renderFresh(
      linkerdProfile
        .plan({ conf, pod, namespace: { metadata: { name: "burst", labels: {}, annotations: {} } }, podAddresses: [] })
        .families.map(ruleSetOf)[0]!,
    );
  });
}

/** 110 × meshcni VERSION at the same moment: Bun's start-up under the same contention. */
async function versionBurst(n: number): Promise<number> {
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: n }, async () => {
      const proc = Bun.spawn([repoPath("dist/meshcni")], {
        env: { PATH: Bun.env.PATH, CNI_COMMAND: "VERSION" },
        stdin: "ignore",
        stdout: "ignore",
        stderr: "ignore",
      });
      if ((await proc.exited) !== 0) throw new Error("meshcni VERSION failed");
    }),
  );
  return performance.now() - t0;
}

/** 110 × nsenter + iptables-restore at the same moment, each into its own namespace. */
async function restoreBurst(
  pods: BurstPod[],
  payloads: string[],
  backend: Backend,
): Promise<{ wallMs: number; worstMs: number }> {
  const times: number[] = [];
  const t0 = performance.now();
  await Promise.all(
    pods.map(async (p, i) => {
      const s = performance.now();
      const proc = Bun.spawn(
        ["nsenter", `--net=${p.attachment.netns}`, "--", `iptables-${backend}-restore`, "--noflush"],
        {
          stdin: new Blob([payloads[i]!]),
          stdout: "ignore",
          stderr: "pipe",
          env: { ...Bun.env, XTABLES_LOCKFILE: backend === "legacy" ? p.attachment.netns : undefined },
        },
      );
      const [err, code] = await Promise.all([new Response(proc.stderr).text(), proc.exited]);
      if (code !== 0) throw new Error(`iptables-${backend}-restore in ${p.netns}: ${err}`);
      times.push(performance.now() - s);
    }),
  );
  return { wallMs: performance.now() - t0, worstMs: Math.max(...times) };
}

export async function benchBurst(): Promise<string> {
  const lines: string[] = [
    `## Burst: ${KUBELET_MAX_PODS} pods at once ` +
      `(${AGENT ? "lookups through the warm node agent" : "every ADD GETs its pod through the kubeconfig"})`,
    "",
    `${KUBELET_MAX_PODS} pods created at the same moment, ` +
      `each a fresh network namespace, through the spec's call sequence; ` +
      `median of ${ROUNDS} rounds. Floors with the same concurrency ` +
      `in the same run: bridge + host-local alone for the same pods, ` +
      `and ${KUBELET_MAX_PODS} × nsenter + iptables-restore of each pod's own payload.`,
    "",
    "| backend | bridge + meshcni (wall) | slowest meshcni ADD | slowest pod (chain) | floor: " +
      "bridge alone | floor: nsenter + iptables-restore | meshcni / bridge alone (target ≤ 1.6x) " +
      "| meshcni's share (with − without) / restore floor | pod GETs per round | target ≤ 3 s |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ];
  const versions: string[] = [];
  for (const backend of BACKENDS) {
    const lab = await BurstLab.start(KUBELET_MAX_PODS, { agent: AGENT });
    try {
      const payloads = await payloadsFor(lab, backend);
      const full: number[] = [];
      const worstAdd: number[] = [];
      const worstChain: number[] = [];
      const bridgeOnly: number[] = [];
      const restore: number[] = [];
      const version: number[] = [];
      const podGets: number[] = [];
      for (let r = 0; r < ROUNDS; r++) {
        // bridge alone
        let pods = lab.createNamespaces(`b${r}`);
        let rt = lab.runtime(false, backend, `b${r}`);
        const b = await lab.burst(rt, pods);
        if (b.failures.length > 0) throw new Error(`bridge alone: ${b.failures[0]!.error}`);
        bridgeOnly.push(b.wallMs);
        await lab.teardown(rt, pods);
        lab.deleteNamespaces(pods);
        // bridge + meshcni
        pods = lab.createNamespaces(`m${r}`);
        rt = lab.runtime(true, backend, `m${r}`);
        const getsBefore = lab.podGets();
        const m = await lab.burst(rt, pods);
        podGets.push(lab.podGets() - getsBefore);
        if (m.failures.length > 0)
          throw new Error(`bridge + meshcni: ${m.failures.length} failed, first: ${m.failures[0]!.error}`);
        const lock = lockTrouble(m.runs);
        if (lock.length > 0) throw new Error(`xtables lock trouble: ${lock[0]}`);
        const wrong = pods.flatMap((p) => checkOwnRules(lab.save(p, backend), p.index, lab.size));
        if (wrong.length > 0) throw new Error(`rules not as expected: ${wrong[0]}`);
        full.push(m.wallMs);
        worstAdd.push(m.worstMeshcniMs!);
        worstChain.push(m.worstChainMs);
        await lab.teardown(rt, pods);
        lab.deleteNamespaces(pods);
        // the restore floor
        pods = lab.createNamespaces(`r${r}`);
        restore.push((await restoreBurst(pods, payloads, backend)).wallMs);
        lab.deleteNamespaces(pods);
        version.push(await versionBurst(lab.size));
      }
      versions.push(`${backend} round: ${ms(median(version))}`);
      const [f, w, c, b, rs] = [
        median(full),
        median(worstAdd),
        median(worstChain),
        median(bridgeOnly),
        median(restore),
      ];
      lines.push(
        `| ${backend} | ${ms(f)} | ${ms(w)} | ${ms(c)} | ${ms(b)} | ${ms(rs)} | ${ratio(f, b)} ` +
          `| ${ratio(Math.max(0, f - b), rs)} | ${podGets.join(", ")} | ${f <= 3000 ? "✓" : "✗"} |`,
      );
    } finally {
      await lab.close();
    }
  }
  lines.push(
    "",
    `For scale, ${KUBELET_MAX_PODS} × \`meshcni VERSION\` at once ` +
      `(Bun's start-up alone, same contention): ${versions.join(", ")}. ` +
      (AGENT
        ? "The agent (with its watch cache) and the stand-in API server run on the same two cores."
        : "The stand-in API server answering the lookups runs on the same two cores."),
  );
  lines.push(
    "",
    "Every round checks that all ADDs succeeded, that no iptables call " +
      "met the xtables lock, and that each pod holds exactly its own rules.",
    "",
  );
  return lines.join("\n");
}

if (import.meta.main) console.log(await benchBurst());
