// A small pod lab on one machine: the stand-in API server holding pods, the plugin's kubeconfig,
// and pods wired by the real bridge + host-local plugins with the compiled meshcni chained after
// them, driven through the spec's call sequence. Tests and the demo build on it.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ApiServer, startApiServer } from "./apiserver.ts";
import { type Attachment, bridgeConflist, CniRuntime } from "./cni-runtime.ts";
import { repoPath } from "./golden.ts";
import { Netns, sh, uniq } from "./netns.ts";

export const REFERENCE_PLUGINS = "/usr/lib/cni";
export const DIST = repoPath("dist");

export interface Pod {
  name: string;
  namespace: string;
  netns: Netns;
  ip: string;
  gateway: string;
  result: any;
  runtime: CniRuntime;
  attachment: Attachment;
  /** In a dual-stack lab: the pod's IPv6 address and its gateway. */
  ip6?: string;
  gateway6?: string;
}

let subnetCounter = 0;

export class PodLab {
  readonly dir: string;
  readonly kubeconfig: string;
  readonly bridge: string;
  private readonly pods: Pod[] = [];
  private readonly octet: number;

  /** Where the runtime looks for plugins; a test may put a wrapped meshcni first. */
  pluginDirs: string[] = [REFERENCE_PLUGINS, DIST];

  private constructor(
    readonly api: ApiServer,
    readonly dualStack = false,
  ) {
    this.dir = mkdtempSync(join(tmpdir(), "meshcni-lab-"));
    this.kubeconfig = join(this.dir, "ZZZ-meshcni-kubeconfig");
    writeFileSync(this.kubeconfig, api.kubeconfig(), { mode: 0o600 });
    this.bridge = `mcb${uniq()}`.slice(0, 15);
    this.octet = 100 + ((process.pid + subnetCounter++ * 7) % 150);
  }

  static async start(opts: { token?: string; dualStack?: boolean } = {}): Promise<PodLab> {
    return new PodLab(await startApiServer({ token: opts.token ?? "lab-token" }), opts.dualStack ?? false);
  }

  get subnet(): string {
    return `10.${this.octet}.0.0/24`;
  }

  get subnet6(): string {
    return `fd00:${this.octet}::/64`;
  }

  /** The plugin's conflist entry for this lab, merged with `extra` (deeply for the sections). */
  entry(extra: Record<string, any> = {}): Record<string, unknown> {
    const base: Record<string, any> = {
      name: "meshcni",
      log_level: "debug",
      kubernetes: { kubeconfig: this.kubeconfig, exclude_namespaces: [] },
      // The lab's own state folder: its records and fallback log stay out of the host's.
      state_dir: join(this.dir, "state"),
      agent_socket: join(this.dir, "state", "agent.sock"),
      linkerd: { "inbound-ports-to-ignore": ["4191", "4190"] },
    };
    for (const [k, v] of Object.entries(extra)) {
      base[k] = v && typeof v === "object" && !Array.isArray(v) && base[k] ? { ...base[k], ...v } : v;
    }
    return base;
  }

  runtime(meshcni: Record<string, unknown>, cniVersion = "1.0.0", env: Record<string, string> = {}): CniRuntime {
    const conflist = bridgeConflist({
      name: `lab-${this.bridge}`,
      bridge: this.bridge,
      subnet: this.subnet,
      ipamDir: join(this.dir, "ipam"),
      meshcni,
      cniVersion,
      ...(this.dualStack ? { subnet6: this.subnet6 } : {}),
    });
    return new CniRuntime(conflist, this.pluginDirs, join(this.dir, "cache"), env);
  }

  /** Creates a netns and runs ADD for `podObject` (added to the API server) through the chain. */
  async addPod(
    podObject: any,
    meshcni: Record<string, unknown>,
    opts: { cniVersion?: string; cniArgs?: string; env?: Record<string, string> } = {},
  ): Promise<Pod> {
    const name = podObject.metadata.name as string;
    const namespace = (podObject.metadata.namespace as string) ?? "default";
    this.api.addPod(podObject);
    const netns = Netns.create(`mc-${uniq()}`);
    // No duplicate address detection in the pod: its IPv6 address is usable at once.
    if (this.dualStack)
      netns.exec(["sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0", "net.ipv6.conf.all.accept_dad=0"]);
    const runtime = this.runtime(meshcni, opts.cniVersion, opts.env);
    const attachment: Attachment = {
      containerId: `c${uniq()}`,
      netns: netns.path,
      ifname: "eth0",
      cniArgs:
        opts.cniArgs ??
        `IgnoreUnknown=1;K8S_POD_NAMESPACE=${namespace};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=x`,
    };
    const pod: Pod = { name, namespace, netns, ip: "", gateway: "", result: undefined, runtime, attachment };
    this.pods.push(pod);
    const result = (await runtime.add(attachment)) as any;
    pod.result = result;
    const v4 = result.ips.find((i: any) => !String(i.address).includes(":"));
    const v6 = result.ips.find((i: any) => String(i.address).includes(":"));
    pod.ip = String(v4.address).split("/")[0]!;
    pod.gateway = String(v4.gateway);
    if (v6) {
      pod.ip6 = String(v6.address).split("/")[0]!;
      pod.gateway6 = String(v6.gateway);
      await settleIPv6(netns, this.bridge);
    }
    return pod;
  }

  async close(): Promise<void> {
    for (const p of this.pods) {
      try {
        await p.runtime.del(p.attachment);
      } catch {
        // best effort
      }
      p.netns.delete();
    }
    sh(["ip", "link", "del", this.bridge]);
    await this.api.close();
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Waits until neither the pod's nor the bridge's IPv6 addresses are tentative (DAD). */
async function settleIPv6(netns: Netns, bridge: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const pod = netns.exec(["ip", "-6", "addr", "show", "tentative"]).stdout.trim();
    const host = sh(["ip", "-6", "addr", "show", "dev", bridge, "tentative"]).stdout.trim();
    if (pod === "" && host === "") return;
    await Bun.sleep(50);
  }
}

export async function readFixture(path: string): Promise<any> {
  return await Bun.file(repoPath(path)).json();
}

/** A deep copy of a pod fixture with extra annotations and a new name. */
export function withAnnotations(pod: any, name: string, annotations: Record<string, string>): any {
  const copy = structuredClone(pod);
  copy.metadata.name = name;
  copy.metadata.annotations = { ...copy.metadata.annotations, ...annotations };
  return copy;
}
