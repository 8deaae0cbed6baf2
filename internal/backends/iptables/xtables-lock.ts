// How iptables-restore waits for the xtables lock in a pod's namespace. Pure: the caller runs
// `iptables-restore --version` and passes its output.
//
// Legacy iptables serialises every write on one lock file for the whole host. From iptables
// 1.8.6 the file can be named (XTABLES_LOCKFILE); pointing it at the pod's namespace file scopes
// the lock to that pod, so a burst of pods never waits on each other. Older iptables ignores the
// variable and takes the host's lock, which other writers (kube-proxy, the host's own rules) hold
// too: there the plugin waits for it, for a bounded time, instead of failing at once.
// The nftables backend takes no lock.

/** How long an iptables older than 1.8.6 waits for the host's lock (`--wait=N`, from 1.6.2). */
export const XTABLES_WAIT_SECONDS = 5;

export type IptablesVersion = readonly [number, number, number];

/** "iptables-restore v1.8.9 (legacy)" → [1, 8, 9] and whether it is nf_tables; undefined if unreadable. */
export function parseIptablesVersion(text: string): { version: IptablesVersion; nft: boolean } | undefined {
  const m = /\bv(\d+)\.(\d+)(?:\.(\d+))?/.exec(text);
  if (!m) return undefined;
  return { version: [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)], nft: /nf_tables/.test(text) };
}

function atLeast(v: IptablesVersion, min: IptablesVersion): boolean {
  for (let i = 0; i < 3; i++) if (v[i] !== min[i]) return v[i]! > min[i]!;
  return true;
}

export interface LockPlan {
  /** XTABLES_LOCKFILE for iptables-restore, when it honours one. */
  lockFile?: string;
  /** Flags for iptables-restore. */
  waitArgs: string[];
}

/**
 * `versionText` is `iptables-restore --version`'s output (undefined when it could not be run);
 * `wait` is the entry's `use-wait-flag`. An unreadable version is treated as an old one.
 */
export function planXtablesLock(versionText: string | undefined, netnsPath: string, wait: boolean): LockPlan {
  const parsed = versionText === undefined ? undefined : parseIptablesVersion(versionText);
  if (parsed?.nft) return { waitArgs: wait ? ["--wait"] : [] };
  if (parsed && atLeast(parsed.version, [1, 8, 6])) return { lockFile: netnsPath, waitArgs: wait ? ["--wait"] : [] };
  if (parsed && !atLeast(parsed.version, [1, 6, 2])) return { waitArgs: [] }; // no --wait in iptables-restore before 1.6.2
  return { waitArgs: [`--wait=${XTABLES_WAIT_SECONDS}`] };
}
