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

/** The version in `iptables-restore --version`'s output; parseIptablesVersion finds what it matches with a loop. */
export const IPTABLES_VERSION = /\bv(\d+)\.(\d+)(?:\.(\d+))?/;

const digit = (c: number) => c >= 48 && c <= 57;
const wordChar = (c: number) => digit(c) || (c >= 65 && c <= 90) || (c >= 97 && c <= 122) || c === 95;
/** Where the run of digits from `i` ends. */
function digitsTo(s: string, i: number): number {
  while (i < s.length && digit(s.charCodeAt(i))) i++;
  return i;
}

/**
 * "iptables-restore v1.8.9 (legacy)" → [1, 8, 9] and whether it is nf_tables; undefined if
 * unreadable. The first match of IPTABLES_VERSION, found with a loop: legacy iptables' meshed ADD
 * runs this in the plugin's fresh process, which compiles each RegExp on its first use
 * (xtables-lock.test.ts holds the two together).
 */
export function parseIptablesVersion(text: string): { version: IptablesVersion; nft: boolean } | undefined {
  for (let v = text.indexOf("v"); v !== -1; v = text.indexOf("v", v + 1)) {
    if (v > 0 && wordChar(text.charCodeAt(v - 1))) continue; // \b before the v
    const major = digitsTo(text, v + 1);
    if (major === v + 1 || text.charCodeAt(major) !== 46) continue;
    const minor = digitsTo(text, major + 1);
    if (minor === major + 1) continue;
    const patch = text.charCodeAt(minor) === 46 ? digitsTo(text, minor + 1) : minor;
    const version: IptablesVersion = [
      Number(text.slice(v + 1, major)),
      Number(text.slice(major + 1, minor)),
      patch > minor + 1 ? Number(text.slice(minor + 1, patch)) : 0,
    ];
    return { version, nft: text.includes("nf_tables") };
  }
  return undefined;
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
  // iptables-restore has no --wait before 1.6.2.
  if (parsed && !atLeast(parsed.version, [1, 6, 2])) return { waitArgs: [] };
  return { waitArgs: [`--wait=${XTABLES_WAIT_SECONDS}`] };
}
