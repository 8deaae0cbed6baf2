// What a backend is: the part of meshcni that turns a backend-neutral plan
// (internal/plan/model.ts) into a pod network namespace's firewall. A backend lives in one
// folder under internal/firewall/ and is listed in internal/firewall/registry.ts; it renders the
// plan as text (dry runs, simulate, `meshcnictl explain --backend`), says which host binaries it
// needs, and applies (ADD), verifies (CHECK) and removes (DEL) through a Firewall, which runs
// those binaries inside the pod's namespace (internal/firewall/io/open.ts).
import type { Logger } from "../log/logger.ts";
import type { Family, Plan, Stage } from "../plan/model.ts";

export interface ExecResult {
  code: number;
  stdout: string;
  stderr: string;
}

/** The binaries a backend chose, by its own keys (e.g. "restore4"), and their environment. */
export interface Tools {
  /** For logs and errors, e.g. "nft", "legacy", "nftables". */
  label: string;
  bins: Record<string, string>;
  /** Point XTABLES_LOCKFILE at the pod's namespace file (legacy iptables' lock). */
  lockAtNetns?: boolean;
  /** Set when the configured mode's binaries are missing and others are used (logged). */
  warning?: string;
}

/** Host binaries, and which backend the host's own `iptables` command is. */
export interface HostView {
  has(bin: string): boolean;
  /** "nft" or "legacy" when `iptables` is the same file as iptables-nft or iptables-legacy. */
  hostIptables: "nft" | "legacy" | undefined;
  /** libnftables loads in this process: nft scripts run in process, no `nft` binary needed. */
  nftLibrary?: boolean;
}

/** One backend's binaries run inside one pod network namespace. */
export interface Firewall {
  readonly backend: string;
  /** use-wait-flag: iptables-restore waits for the xtables lock. */
  readonly wait: boolean;
  /**
   * iptables-restore's lock flags for this host's iptables (iptables/xtables-lock.ts): `--wait`
   * with use-wait-flag, a bounded `--wait=N` before 1.8.6; absent means `wait` alone decides.
   */
  readonly waitArgs?: readonly string[];
  /** Set when the configured iptables-mode's binaries are missing and another backend is used. */
  readonly warning?: string;
  /**
   * The families' transactions may run at the same time: the binaries take no lock that they
   * would share (iptables-nft; legacy iptables serialises IPv4 and IPv6 on one lock file).
   */
  readonly concurrent?: boolean;
  /** Runs the tool the backend chose under `key` with `argv` (stdin when given). */
  run(key: string, argv: readonly string[], stdin: string | undefined, signal: AbortSignal): Promise<ExecResult>;
  ip(family: Family, argv: readonly string[], signal: AbortSignal): Promise<ExecResult>;
}

/** What DEL knows without the pod: the profile's chains, and which families to look at. */
export interface Removal {
  families: readonly Family[];
  ownedChains: readonly { stage: Stage; name: string }[];
  /** The iptables backend's claim on rules in built-in chains (MeshProfile.ownsBuiltinRule). */
  ownsBuiltinRule?: (stage: Stage, chain: string, args: string) => boolean;
}

export interface Backend {
  /** Its name in the registry (registry.ts). */
  readonly name: string;
  /** The binaries for `mode` and `families`, or the name of what is missing. Pure. */
  tools(mode: string, families: readonly Family[], host: HostView): Tools | { missing: string };
  /** Everything the plan would apply, as text (dry-run file, simulate, explain). Pure. */
  render(plan: Plan): string;
  /** ADD: all of the plan's rules or none; applying twice leaves one copy. */
  apply(fw: Firewall, plan: Plan, log: Logger, signal: AbortSignal): Promise<void>;
  /** CHECK: the differences between the namespace and the plan; empty when exactly in place. */
  verify(fw: Firewall, plan: Plan, signal: AbortSignal): Promise<string[]>;
  /** DEL: removes everything of meshcni's; whether there was anything. */
  remove(fw: Firewall, what: Removal, signal: AbortSignal): Promise<boolean>;
}
