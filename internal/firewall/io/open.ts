// A backend's binaries (and ip) inside a pod's network namespace, through nsenter.
import { backendFor, type FirewallSettings } from "../registry.ts";
import type { Backend, Firewall, HostView, Tools } from "../backend.ts";
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import type { Family } from "../../plan/model.ts";
import { type LockPlan, planXtablesLock } from "../iptables/xtables-lock.ts";
import { run } from "./exec.ts";
import { nftLibraryAvailable, runNftInProcess } from "./nft-inprocess.ts";
import { fileIdentity, which } from "./which.ts";

export function missing(bin: string): CniError {
  const pkg = bin === "nsenter" ? "util-linux" : bin === "ip" ? "iproute2" : bin === "nft" ? "nftables" : "iptables";
  return new CniError(
    Code.MissingBinary,
    `${bin} not found on the host`,
    `meshcni runs on the node and needs ${bin} in the container runtime's PATH or in /usr/sbin, ` +
      `/usr/bin, /sbin or /bin; install it on the node (Debian: apt-get install ${pkg})`,
  );
}

/**
 * Which backend the host's own `iptables` command is: the same file as iptables-nft or as
 * iptables-legacy (Debian's alternatives, RHEL's and Alpine's symlinks all resolve to one).
 */
async function hostIptables(envPath: string | undefined): Promise<"nft" | "legacy" | undefined> {
  const host = await fileIdentity(which("iptables", envPath));
  if (!host) return undefined;
  for (const b of ["nft", "legacy"] as const) {
    if (host === (await fileIdentity(which(`iptables-${b}`, envPath)))) return b;
  }
  return undefined;
}

/** MESHCNI_NFT_INPROCESS=0 makes the nftables backend run `nft` through nsenter instead. */
const inProcessAllowed = () => Bun.env.MESHCNI_NFT_INPROCESS !== "0";

/** The backend and binaries a firewall for these settings would use, or the name of the missing one. */
export async function resolveFirewallBinaries(
  settings: FirewallSettings,
  families: readonly Family[],
  envPath: string | undefined,
) {
  const has = (bin: string) => which(bin, envPath) !== undefined;
  const host: HostView = { has, hostIptables: settings.mode === "auto" ? await hostIptables(envPath) : undefined };
  const nsenter = which("nsenter", envPath);
  let backend = await backendFor(settings.mode, families, host);
  // libnftables is loaded only where nftables is (or may become) the backend.
  const mayUseNft =
    backend.name === "nftables" || (settings.mode === "auto" && "missing" in backend.tools("auto", families, host));
  if (mayUseNft && inProcessAllowed() && (await nftLibraryAvailable())) {
    host.nftLibrary = true;
    backend = await backendFor(settings.mode, families, host);
  }
  const chosen = backend.tools(settings.mode, families, host);
  return { nsenter, backend, chosen, inProcess: backend.name === "nftables" && host.nftLibrary === true };
}

/** A Firewall with the backend it belongs to. */
export interface OpenFirewall extends Firewall {
  readonly driver: Backend;
}

/** `iptables-restore --version` on the host; undefined when it does not answer. */
async function restoreVersion(bin: string): Promise<string | undefined> {
  try {
    const r = await run([bin, "--version"], { signal: AbortSignal.timeout(2000) });
    return r.code === 0 ? r.stdout + r.stderr : undefined;
  } catch {
    return undefined;
  }
}

export async function openFirewall(
  netns: string,
  settings: FirewallSettings,
  families: readonly Family[],
  envPath: string | undefined,
): Promise<OpenFirewall> {
  const { nsenter, backend, chosen, inProcess } = await resolveFirewallBinaries(settings, families, envPath);
  // In process, nsenter is needed only for `ip` (Istio's TPROXY routes and ::6).
  if (!nsenter && !inProcess) throw missing("nsenter");
  if ("missing" in chosen) throw missing(chosen.missing);
  const tools: Tools = chosen;
  const path = (bin: string) => {
    const p = which(bin, envPath);
    if (!p) throw missing(bin);
    return p;
  };
  const enter = () => {
    if (!nsenter) throw missing("nsenter");
    return [nsenter, `--net=${netns}`, "--"];
  };
  // Legacy iptables serialises on a lock file: the pod's namespace file where iptables honours
  // XTABLES_LOCKFILE (1.8.6 and later), else a bounded wait for the host's
  // (../iptables/xtables-lock.ts). nftables takes no lock.
  let lock: LockPlan = { waitArgs: settings.wait ? ["--wait"] : [] };
  if (tools.lockAtNetns) {
    const restore = tools.bins[`restore${families[0] ?? 4}`];
    lock = planXtablesLock(restore ? await restoreVersion(path(restore)) : undefined, netns, settings.wait);
  }
  const env = { ...Bun.env, XTABLES_LOCKFILE: lock.lockFile };
  return {
    driver: backend,
    backend: tools.label,
    wait: settings.wait,
    waitArgs: lock.waitArgs,
    concurrent: !tools.lockAtNetns,
    ...(tools.warning ? { warning: tools.warning } : {}),
    run: async (key, argv, stdin, signal) => {
      const bin = tools.bins[key];
      if (!bin) throw new Error(`backend ${backend.name} asked for a tool it did not choose: ${key}`);
      if (inProcess && key === "nft") {
        const r = await runNftInProcess(netns, argv, stdin, signal);
        if (r) return r;
      }
      return run([...enter(), path(bin), ...argv], stdin === undefined ? { env, signal } : { stdin, env, signal });
    },
    ip: (family, argv, signal) => run([...enter(), path("ip"), `-${family}`, ...argv], { env, signal }),
  };
}
