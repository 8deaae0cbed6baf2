// A burst of pods on one machine: N real network namespaces wired at the same moment by the
// reference bridge + host-local plugins with the compiled meshcni chained after them, each
// through the spec's call sequence (test/support/cni-runtime.ts), against the stand-in API
// server holding N meshed pods. Each pod has an annotation of its own, so the rules of one pod
// can be told from another's. With `agent`, the real node agent (dist/meshcni-installer, its
// service account pointing at the same stand-in API server) watches the node's pods and the
// plugin asks it over its socket, as on a node with the agent; without, every ADD GETs its pod
// through the kubeconfig. Used by test/hardening/burst.test.ts and bench/burst.ts.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ApiServer, startApiServer } from "../../support/apiserver.ts";
import { type Attachment, bridgeConflist, CniRuntime, type PluginRun } from "../../support/cni-runtime.ts";
import { repoPath } from "../../support/golden.ts";
import { sh, uniq } from "../../support/netns.ts";
import { DIST, REFERENCE_PLUGINS } from "../../support/pod-lab.ts";
import { ensureBuilt, freePort, HostDirs, type InstallerProcess, startInstaller, until } from "../../agent/harness.ts";

/** kubelet's default --max-pods. */
export const KUBELET_MAX_PODS = 110;
const NS = "burst";
/** The node of testdata/pods/linkerd-meshed.json: the agent watches it. */
const NODE = "node-1";
const TOKEN = "burst-token";
/** Each pod's own inbound port to skip: 20000 + its number. */
export const ownPort = (i: number) => 20000 + i;

export type Backend = "nft" | "legacy";

export interface BurstPod {
  index: number;
  name: string;
  netns: string;
  attachment: Attachment;
}

export interface BurstRound {
  /** From the first ADD starting to the last one finishing. */
  wallMs: number;
  /** The slowest chain (bridge then meshcni) of one pod. */
  worstChainMs: number;
  /** The slowest single meshcni ADD (empty when meshcni is not in the chain). */
  worstMeshcniMs?: number;
  failures: { pod: string; error: string }[];
  runs: PluginRun[];
}

let labCounter = 0;

export class BurstLab {
  readonly dir: string;
  readonly kubeconfig: string;
  readonly bridge: string;
  readonly subnet: string;
  private readonly tag = uniq();
  private netnsNames: string[] = [];
  /** The node agent and its folders, when the lab runs with one. */
  agent?: { process: InstallerProcess; dirs: HostDirs; port: number };

  private constructor(
    readonly api: ApiServer,
    readonly size: number,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), "meshcni-burst-"));
    this.kubeconfig = join(this.dir, "ZZZ-meshcni-kubeconfig");
    writeFileSync(this.kubeconfig, api.kubeconfig(), { mode: 0o600 });
    this.bridge = `mcburst${this.tag}`.slice(0, 15);
    // A /24 of its own: 253 addresses for host-local, the gateway takes one.
    this.subnet = `10.${200 + ((process.pid + labCounter++ * 13) % 50)}.${(process.pid >> 3) % 250}.0/24`;
  }

  static async start(size = KUBELET_MAX_PODS, opts: { agent?: boolean } = {}): Promise<BurstLab> {
    const api = await startApiServer({ token: TOKEN });
    const base = await Bun.file(repoPath("testdata/pods/linkerd-meshed.json")).json();
    api.addNamespace({ metadata: { name: NS } });
    for (let i = 0; i < size; i++) {
      const pod = structuredClone(base);
      pod.metadata.name = `web-${i}`;
      pod.metadata.namespace = NS;
      pod.metadata.annotations = {
        ...pod.metadata.annotations,
        "config.linkerd.io/skip-inbound-ports": String(ownPort(i)),
      };
      api.addPod(pod);
    }
    const lab = new BurstLab(api, size);
    if (opts.agent) await lab.startAgent();
    return lab;
  }

  /** Starts the real agent against the lab's API server and waits until its cache holds every pod. */
  private async startAgent(): Promise<void> {
    ensureBuilt();
    const dirs = new HostDirs(TOKEN, this.api.caPem);
    // Something for the agent to chain into; the burst's runtimes use their own conflist.
    writeFileSync(
      join(dirs.net, "10-bridge.conflist"),
      JSON.stringify({ cniVersion: "1.0.0", name: "node-net", plugins: [{ type: "bridge", bridge: "unused0" }] }),
    );
    const port = freePort();
    const proc = startInstaller(
      dirs,
      ["--node-name", NODE, "--plugin-binary", join(DIST, "meshcni"), "--health-port", String(port), "--repair", "off"],
      {
        KUBERNETES_SERVICE_HOST: "127.0.0.1",
        KUBERNETES_SERVICE_PORT: new URL(this.api.url).port,
        NODE_NAME: NODE,
      },
    );
    this.agent = { process: proc, dirs, port };
    const cached = async () => {
      const s = (await (await fetch(`http://127.0.0.1:${port}/status`)).json().catch(() => undefined)) as
        | { cache?: { pods?: { synced?: boolean; objects?: number } } }
        | undefined;
      return s?.cache?.pods?.synced === true && s.cache.pods.objects === this.size;
    };
    await until(() => cached().catch(() => false), 20_000, "the agent's cache of the burst's pods").catch((e) => {
      throw new Error(`${(e as Error).message}\n${proc.log()}`);
    });
  }

  /** GETs of single pods the API server answered so far (list and watch not counted). */
  podGets(): number {
    return Array.from({ length: this.size }, (_, i) =>
      this.api.count(`/api/v1/namespaces/${NS}/pods/web-${i}`, "get"),
    ).reduce((a, b) => a + b, 0);
  }

  meshcniEntry(backend: Backend): Record<string, unknown> {
    return {
      type: "meshcni",
      name: "meshcni",
      log_level: "info",
      // The burst is about contention, not speed: on a slow 2-core machine 110 plugins at once
      // can take longer than the default 5 s bound, which would turn a slow run into failures.
      // bench/burst.ts reports how long it took.
      timeout_seconds: 60,
      kubernetes: { kubeconfig: this.kubeconfig },
      linkerd: { "inbound-ports-to-ignore": ["4191", "4190"], "iptables-mode": backend },
      ...(this.agent ? { agent_socket: this.agent.dirs.socket, state_dir: this.agent.dirs.state } : {}),
    };
  }

  runtime(withMeshcni: boolean, backend: Backend, round: string): CniRuntime {
    const conflist = bridgeConflist({
      name: `burst-${this.tag}`,
      bridge: this.bridge,
      subnet: this.subnet,
      ipamDir: join(this.dir, "ipam"),
      meshcni: this.meshcniEntry(backend),
      cniVersion: "1.0.0",
    });
    if (!withMeshcni) conflist.plugins = conflist.plugins.slice(0, 1);
    return new CniRuntime(conflist, [REFERENCE_PLUGINS, DIST], join(this.dir, `cache-${round}`));
  }

  /** Creates `size` fresh network namespaces (one `ip -batch`), returning the pods that use them. */
  createNamespaces(round: string): BurstPod[] {
    const pods: BurstPod[] = [];
    for (let i = 0; i < this.size; i++) {
      const netns = `mcb${this.tag}${round}${i}`;
      pods.push({
        index: i,
        name: `web-${i}`,
        netns,
        attachment: {
          containerId: `c${this.tag}${round}${i}`,
          netns: `/var/run/netns/${netns}`,
          ifname: "eth0",
          cniArgs: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=web-${i};K8S_POD_INFRA_CONTAINER_ID=c${i}`,
        },
      });
    }
    this.netnsNames.push(...pods.map((p) => p.netns));
    const r = sh(["ip", "-batch", "-"], { stdin: pods.map((p) => `netns add ${p.netns}\n`).join("") });
    if (r.code !== 0) throw new Error(`creating ${this.size} network namespaces failed: ${r.stderr}`);
    return pods;
  }

  deleteNamespaces(pods: BurstPod[]): void {
    const names = new Set(pods.map((p) => p.netns));
    const r = sh(["ip", "-force", "-batch", "-"], { stdin: [...names].map((n) => `netns del ${n}\n`).join("") });
    if (r.code !== 0) throw new Error(`deleting the burst's network namespaces failed: ${r.stderr}`);
    this.netnsNames = this.netnsNames.filter((n) => !names.has(n));
  }

  /** ADD for every pod at the same moment. */
  async burst(rt: CniRuntime, pods: BurstPod[]): Promise<BurstRound> {
    const chainMs: number[] = [];
    const failures: BurstRound["failures"] = [];
    const t0 = performance.now();
    await Promise.all(
      pods.map(async (p) => {
        const s = performance.now();
        try {
          await rt.add(p.attachment);
          chainMs.push(performance.now() - s);
        } catch (e) {
          failures.push({ pod: p.name, error: (e as Error).message });
        }
      }),
    );
    const wallMs = performance.now() - t0;
    const meshcni = rt.runs.filter((r) => r.type === "meshcni" && r.code === 0).map((r) => r.ms);
    const round: BurstRound = { wallMs, worstChainMs: Math.max(0, ...chainMs), failures, runs: [...rt.runs] };
    if (meshcni.length > 0) round.worstMeshcniMs = Math.max(...meshcni);
    return round;
  }

  /** DEL for every pod (in parallel, each in the spec's reverse order); failures are returned. */
  async teardown(rt: CniRuntime, pods: BurstPod[]): Promise<string[]> {
    const errors: string[] = [];
    await Promise.all(
      pods.map((p) => rt.del(p.attachment).catch((e) => void errors.push(`${p.name}: ${(e as Error).message}`))),
    );
    return errors;
  }

  /** iptables-save of one pod's namespace for a backend. */
  save(p: BurstPod, backend: Backend): string {
    const r = sh(["ip", "netns", "exec", p.netns, `iptables-${backend}-save`, "-t", "nat"]);
    if (r.code !== 0) throw new Error(`iptables-${backend}-save in ${p.netns}: ${r.stderr}`);
    return r.stdout;
  }

  /** Deletes every namespace, the bridge and the files; throws if a namespace of this lab is left. */
  async close(): Promise<void> {
    const names = this.netnsNames;
    if (names.length > 0) sh(["ip", "-force", "-batch", "-"], { stdin: names.map((n) => `netns del ${n}\n`).join("") });
    this.netnsNames = [];
    sh(["ip", "link", "del", this.bridge]);
    if (this.agent) {
      await this.agent.process.stop("SIGTERM");
      this.agent.dirs.cleanup();
    }
    await this.api.close();
    rmSync(this.dir, { recursive: true, force: true });
    const listed = new Set(
      sh(["ip", "netns", "list"])
        .stdout.split("\n")
        .map((l) => l.split(" ")[0]),
    );
    const left = names.filter((n) => listed.has(n));
    if (left.length > 0)
      throw new Error(`${left.length} network namespaces of the burst were not deleted, e.g. ${left[0]}`);
  }
}

/** What a pod's nat table must hold: exactly its own rules, once each (checked on iptables-save). */
export function checkOwnRules(save: string, i: number, size: number): string[] {
  const problems: string[] = [];
  const lines = save.split("\n").filter((l) => l.startsWith("-A "));
  const ours = lines.filter((l) => /PROXY_INIT/.test(l));
  const portLists = ours.flatMap((l) => [...l.matchAll(/--dports (\S+)/g)].map((m) => m[1]!));
  const ports = portLists.flatMap((p) => p.split(","));
  if (!ports.includes(String(ownPort(i)))) problems.push(`web-${i}: its own port ${ownPort(i)} is missing`);
  const foreign = ports.filter((p) => Number(p) >= 20000 && Number(p) < 20000 + size && Number(p) !== ownPort(i));
  if (foreign.length > 0) problems.push(`web-${i}: rules of other pods: ports ${foreign.join(",")}`);
  const jumps = (chain: string, target: string) =>
    lines.filter((l) => l.startsWith(`-A ${chain} `) && l.endsWith(`-j ${target}`)).length;
  if (jumps("PREROUTING", "PROXY_INIT_REDIRECT") !== 1)
    problems.push(`web-${i}: ${jumps("PREROUTING", "PROXY_INIT_REDIRECT")} jumps from PREROUTING`);
  if (jumps("OUTPUT", "PROXY_INIT_OUTPUT") !== 1)
    problems.push(`web-${i}: ${jumps("OUTPUT", "PROXY_INIT_OUTPUT")} jumps from OUTPUT`);
  // ignore 4191,4190 + own port; redirect-all; uid; loopback; redirect-all-outgoing; the two jumps.
  if (ours.length !== 7) problems.push(`web-${i}: ${ours.length} rules of meshcni, expected 7:\n${ours.join("\n")}`);
  if (new Set(ours).size !== ours.length) problems.push(`web-${i}: a rule twice`);
  return problems;
}

/** Errors that say iptables had to wait for, or gave up on, the xtables lock. */
export function lockTrouble(runs: readonly PluginRun[]): string[] {
  return runs
    .filter((r) => /xtables lock|holding the xtables|Resource temporarily unavailable/i.test(r.stderr + r.stdout))
    .map((r) => `${r.type}: ${(r.stderr + r.stdout).trim().slice(0, 300)}`);
}
