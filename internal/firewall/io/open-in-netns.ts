// A backend's tools run by the agent inside one pod's network namespace, with the agent's own
// image's userland: nftables through libnftables in the agent's process, iptables-restore and
// iptables-save (and `ip`, for Istio's TPROXY routes) as processes started inside the namespace
// (netns.ts). The same Firewall the plugin's backends apply, verify and remove through.
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import type { Tools } from "../backend.ts";
import type { OpenFirewall } from "./open.ts";
import { runNftInProcess } from "./nft-inprocess.ts";
import { which } from "./which.ts";
import { type LockPlan, planXtablesLock } from "../iptables/xtables-lock.ts";
import type { FirewallSettings } from "../registry.ts";
import type { Family } from "../../plan/model.ts";
import {
  type Choice,
  chooseBackend,
  type NamespaceTables,
  parseTableNames,
  type Userland,
} from "../namespace-choice.ts";
import { readInNetns, spawnInNetns } from "./setns.ts";

const LEGACY_NAMES = { 4: "/proc/thread-self/net/ip_tables_names", 6: "/proc/thread-self/net/ip6_tables_names" };

/** The legacy iptables tables in the namespace at `path`, as its own /proc/net shows them. */
export function readNamespaceTables(path: string, families: readonly Family[]): NamespaceTables {
  const texts = readInNetns(
    path,
    families.map((f) => LEGACY_NAMES[f]),
  );
  const legacy: NamespaceTables["legacy"] = {};
  families.forEach((f, i) => {
    legacy[f] = parseTableNames(texts[i] ?? "");
  });
  return { legacy };
}

/** The agent's userland: binaries in its PATH (and the system folders), libnftables if it loaded. */
export function agentUserland(nftInProcess: boolean, envPath = process.env.PATH): Userland {
  return { has: (bin) => which(bin, envPath) !== undefined, nftInProcess };
}

const versions = new Map<string, Promise<string | undefined>>();

/** `iptables-restore --version` of the agent's own binary, asked once. */
function restoreVersion(bin: string): Promise<string | undefined> {
  let v = versions.get(bin);
  if (!v) {
    v = (async () => {
      try {
        const p = Bun.spawn([bin, "--version"], { stdout: "pipe", stderr: "pipe" });
        const [out, err, code] = await Promise.all([
          new Response(p.stdout).text(),
          new Response(p.stderr).text(),
          p.exited,
        ]);
        return code === 0 ? out + err : undefined;
      } catch {
        return undefined;
      }
    })();
    versions.set(bin, v);
  }
  return v;
}

/**
 * Asks each iptables-restore of the image for its version once, at the agent's start: the answer
 * is cached for the xtables lock's plan, and the runtime's process machinery is set up before the
 * first start inside a pod's namespace.
 */
export async function warmUpUserland(userland: Userland, envPath = process.env.PATH): Promise<void> {
  const bins = ["iptables-legacy-restore", "iptables-nft-restore", "iptables-restore"];
  await Promise.all(
    bins.map((b) => {
      const p = userland.has(b) ? which(b, envPath) : undefined;
      return p ? restoreVersion(p) : undefined;
    }),
  );
}

/**
 * The Firewall for the namespace at `path` (the agent's view of CNI_NETNS in its netns folder),
 * or the Choice saying what its image lacks for this pod.
 */
export async function openAgentFirewall(o: {
  path: string;
  settings: FirewallSettings;
  families: readonly Family[];
  userland: Userland;
  recorded?: string;
  envPath?: string;
}): Promise<{ fw: OpenFirewall; why: string } | Extract<Choice, { missing: string }>> {
  const envPath = o.envPath ?? process.env.PATH;
  const choice = await chooseBackend({
    mode: o.settings.mode,
    families: o.families,
    userland: o.userland,
    tables: () => readNamespaceTables(o.path, o.families),
    ...(o.recorded !== undefined ? { recorded: o.recorded } : {}),
  });
  if ("missing" in choice) return choice;
  const { backend, tools } = choice as { backend: OpenFirewall["driver"]; tools: Tools };
  const path = (bin: string) => {
    const p = which(bin, envPath);
    if (!p) throw new CniError(Code.MissingBinary, `${bin} not found in the agent's image`, `PATH ${envPath ?? ""}`);
    return p;
  };
  const inProcess = tools.label === "nftables in process";
  let lock: LockPlan = { waitArgs: o.settings.wait ? ["--wait"] : [] };
  if (tools.lockAtNetns) {
    const restore = tools.bins[`restore${o.families[0] ?? 4}`];
    lock = planXtablesLock(restore ? await restoreVersion(path(restore)) : undefined, o.path, o.settings.wait);
  }
  const env = lock.lockFile ? { ...process.env, XTABLES_LOCKFILE: lock.lockFile } : undefined;
  const fw: OpenFirewall = {
    driver: backend,
    backend: tools.label,
    wait: o.settings.wait,
    waitArgs: lock.waitArgs,
    concurrent: !tools.lockAtNetns,
    ...(tools.warning ? { warning: tools.warning } : {}),
    run: async (key, argv, stdin, signal) => {
      const bin = tools.bins[key];
      if (!bin) throw new Error(`backend ${backend.name} asked for a tool it did not choose: ${key}`);
      if (inProcess && key === "nft") {
        const r = await runNftInProcess(o.path, argv, stdin, signal);
        if (r) return r;
      }
      return spawnInNetns(o.path, [path(bin), ...argv], {
        signal,
        ...(stdin !== undefined ? { stdin } : {}),
        ...(env ? { env } : {}),
      });
    },
    ip: (family, argv, signal) => spawnInNetns(o.path, [path("ip"), `-${family}`, ...argv], { signal }),
  };
  return { fw, why: choice.why };
}
