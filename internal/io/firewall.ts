// iptables-restore, iptables-save and ip inside a pod's network namespace, through nsenter.
import { CniError } from "../cni/errors.ts";
import { Code } from "../cni/spec.ts";
import type { FirewallSettings } from "../mesh/profile.ts";
import { type Backend, chooseBinaries } from "../rules/backend.ts";
import type { Family } from "../rules/model.ts";
import { planXtablesLock } from "../rules/xtables-lock.ts";
import type { Firewall } from "../plugin/deps.ts";
import { run } from "./exec.ts";
import { fileIdentity, which } from "./which.ts";

export function missing(bin: string): CniError {
  return new CniError(Code.MissingBinary, `${bin} not found on the host`,
    `meshcni runs on the node and needs ${bin} in the container runtime's PATH or in /usr/sbin, /usr/bin, /sbin or /bin; install it on the node (Debian: apt-get install ${bin === "nsenter" ? "util-linux" : bin === "ip" ? "iproute2" : "iptables"})`);
}

/**
 * Which backend the host's own `iptables` command is: the same file as iptables-nft or as
 * iptables-legacy (Debian's alternatives, RHEL's and Alpine's symlinks all resolve to one).
 */
async function hostBackend(envPath: string | undefined): Promise<Backend | undefined> {
  const host = await fileIdentity(which("iptables", envPath));
  if (!host) return undefined;
  for (const b of ["nft", "legacy"] as const) {
    if (host === (await fileIdentity(which(`iptables-${b}`, envPath)))) return b;
  }
  return undefined;
}

/** Which binaries a firewall for these settings would use, or the name of the missing one. */
export async function resolveFirewallBinaries(settings: FirewallSettings, families: readonly Family[], envPath: string | undefined) {
  const has = (bin: string) => which(bin, envPath) !== undefined;
  const host = settings.mode === "auto" ? await hostBackend(envPath) : undefined;
  const nsenter = which("nsenter", envPath);
  const chosen = chooseBinaries(settings.mode, families, has, host);
  return { nsenter, chosen };
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
  netns: string, settings: FirewallSettings, families: readonly Family[], envPath: string | undefined,
): Promise<Firewall> {
  const { nsenter, chosen } = await resolveFirewallBinaries(settings, families, envPath);
  if (!nsenter) throw missing("nsenter");
  if ("missing" in chosen) throw missing(chosen.missing);
  const bins = chosen;
  const path = (bin: string) => which(bin, envPath)!;
  const enter = [nsenter, `--net=${netns}`, "--"];
  // Legacy iptables serialises on a lock file: the pod's namespace file where iptables honours
  // XTABLES_LOCKFILE (1.8.6 and later), else a bounded wait for the host's (rules/xtables-lock.ts).
  const lock = bins.backend === "nft"
    ? planXtablesLock("(nf_tables)", netns, settings.wait)
    : planXtablesLock(await restoreVersion(path(bins.restore[families[0] ?? 4])), netns, settings.wait);
  const env = { ...Bun.env, XTABLES_LOCKFILE: lock.lockFile };
  const wait = lock.waitArgs;
  const warning = bins.fallback
    ? `iptables-mode ${bins.fallback.from}: ${bins.fallback.missing} not found on the host; using the ${bins.backend} binaries instead (set iptables-mode to the backend the node has)`
    : undefined;
  return {
    backend: bins.backend,
    ...(warning ? { warning } : {}),
    restore: (family, payload, signal) =>
      run([...enter, path(bins.restore[family]), "--noflush", ...wait], { stdin: payload, env, signal }),
    save: (family, signal) => run([...enter, path(bins.save[family])], { env, signal }),
    ip: (family, argv, signal) => {
      const ip = which("ip", envPath);
      if (!ip) throw missing("ip");
      return run([...enter, ip, `-${family}`, ...argv], { env, signal });
    },
  };
}
