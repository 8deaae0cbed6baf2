// Whether the agent can apply a pod's rules itself, judged from what it finds at start: its
// effective capabilities (the CapEff line of /proc/self/status), whether a real setns(2) into a
// network namespace worked, and whether its image's libnftables answers. Pure: the readings come
// in (internal/agent/apply/io/probe.ts takes them).
//
// Applying inside a pod's network namespace takes two capabilities, and the DaemonSet gives
// exactly these two unless it is installed with --agent-applies=false:
// - CAP_SYS_ADMIN: setns(2) into a network namespace needs it in the user namespace that owns
//   the target namespace, which for pod namespaces is the host's (the agent runs in it too, as
//   pods do unless user namespaces are on); CAP_NET_ADMIN is checked against the target as well.
// - CAP_NET_ADMIN: every nf_tables netlink message (a listing too) and iptables' setsockopt
//   need it in the namespace whose rules change.
// Without either, the agent plans as before and the plugin applies with the host's userland.

/** Capability numbers (linux/capability.h). */
export const CAP_NET_ADMIN = 12;
export const CAP_SYS_ADMIN = 21;
export const NEEDED_CAPS = [
  { bit: CAP_NET_ADMIN, name: "CAP_NET_ADMIN" },
  { bit: CAP_SYS_ADMIN, name: "CAP_SYS_ADMIN" },
] as const;

/** The effective set from /proc/self/status ("CapEff:\t00000000a80425fb"); undefined when absent. */
export function parseCapEff(status: string): bigint | undefined {
  for (const line of status.split("\n")) {
    if (!line.startsWith("CapEff:")) continue;
    const hex = line.slice(7).trim();
    return /^[0-9a-f]{1,16}$/i.test(hex) ? BigInt(`0x${hex}`) : undefined;
  }
  return undefined;
}

/** The capabilities applying needs that `eff` lacks, by name. */
export function missingCaps(eff: bigint | undefined): string[] {
  if (eff === undefined) return NEEDED_CAPS.map((c) => c.name);
  return NEEDED_CAPS.filter((c) => (eff & (1n << BigInt(c.bit))) === 0n).map((c) => c.name);
}

/** What the agent found at start. */
export interface AbilityReadings {
  /** --agent-applies: false turns applying off whatever the agent could do. */
  enabled: boolean;
  capEff: bigint | undefined;
  /**
   * The setns(2) the agent tried: into `target` (a namespace in the netns folder, or its own when
   * there is none yet) and back; `error` when it failed (errno's name).
   */
  setns: { target: string; ok: boolean; error?: string } | undefined;
  /** libnftables loaded and listed the agent's own namespace's tables (in process). */
  nftLibrary: { ok: boolean; error?: string };
}

export interface Ability {
  /** The agent applies ADDs (and answers CHECKs) for namespaces in its netns folder. */
  applies: boolean;
  /** Why not, or how: one line for the log and /status. */
  reason: string;
  missingCapabilities: string[];
  nftInProcess: boolean;
}

export function judgeAbility(r: AbilityReadings): Ability {
  const missingCapabilities = missingCaps(r.capEff);
  const nftInProcess = r.nftLibrary.ok;
  const no = (reason: string): Ability => ({ applies: false, reason, missingCapabilities, nftInProcess });
  if (!r.enabled) return no("turned off (--agent-applies=false): the plugin applies each pod's rules itself");
  if (missingCapabilities.length > 0) {
    return no(
      `the agent lacks ${missingCapabilities.join(" and ")} (the DaemonSet gives both unless installed with ` +
        "--agent-applies=false): the plugin applies each pod's rules with the host's userland",
    );
  }
  if (!r.setns?.ok) {
    const how = r.setns ? (r.setns.error ?? `setns into ${r.setns.target} failed`) : "setns was not tried";
    return no(`${how}; a seccomp or LSM profile may forbid it: the plugin applies each pod's rules itself`);
  }
  return {
    applies: true,
    reason:
      `the agent applies pods' rules in their network namespaces (${NEEDED_CAPS.map((c) => c.name).join(", ")}, ` +
      `setns into ${r.setns.target} works; nftables ${nftInProcess ? "in process" : `not in process: ${r.nftLibrary.error ?? "no libnftables"}`})`,
    missingCapabilities,
    nftInProcess,
  };
}
