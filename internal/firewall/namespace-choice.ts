// Which backend the agent applies a pod's rules with, and with which of its own image's tools.
// Pure: what the image has, what the agent's libnftables can do and what the pod's namespace
// already holds come in.
//
// The agent does not see the host's binaries (the DaemonSet mounts none of /usr/sbin), so
// `auto` cannot follow the host's `iptables` command as the plugin's does. It decides from the
// kernel as the pod's namespace shows it, and from the configured mode:
// 1. legacy iptables tables already in the pod's namespace (ip_tables_names or ip6_tables_names
//    there lists a table): iptables-legacy, so meshcni's rules sit beside them in the same
//    tables and hooks instead of racing them from nf_tables;
// 2. else iptables-nft, as the plugin's own `auto` takes on a host whose `iptables` is
//    iptables-nft: the rules Linkerd's and Istio's CNI write, where `iptables-save` shows them
//    (the contract: `auto` picks native nftables only where there are no iptables binaries);
// 3. else nftables, applied in process through libnftables when it loaded at start, then the
//    `nft` binary, then iptables-legacy, whichever the image has.
// `iptables-mode: nftables` chooses native nftables (in process where it can) explicitly.
// An explicit mode is the plugin's rule: that backend, with the image's binaries of it (and, as
// linkerd-cni does, another iptables variant with a warning when the image lacks the one named).
// CHECK takes the backend the container's record names, so it looks where ADD put the rules.
import type { Backend, HostView, Tools } from "./backend.ts";
import { kindNamed, kindOfMode } from "./registry.ts";
import type { Family } from "../plan/model.ts";

/** What the agent's own image offers. */
export interface Userland {
  has(bin: string): boolean;
  /** libnftables loaded at start (and MESHCNI_NFT_INPROCESS is not 0). */
  nftInProcess: boolean;
}

/** The legacy iptables tables the pod's namespace holds, per family (from /proc/thread-self/net). */
export interface NamespaceTables {
  legacy: Partial<Record<Family, string[]>>;
}

export type Choice =
  | { backend: Backend; tools: Tools; why: string }
  /** The image lacks what this pod needs: the plugin applies it with the host's userland. */
  | { missing: string; why: string };

/** The mode a record's backend label stands for ("nftables in process" -> nftables). */
export function modeOfLabel(label: string | undefined): string | undefined {
  if (label === "nftables in process" || label === "nftables") return "nftables";
  if (label === "nft" || label === "legacy" || label === "plain") return label;
  return undefined;
}

/** The table names a /proc/net/ip_tables_names file lists. */
export function parseTableNames(text: string): string[] {
  return text
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l !== "");
}

/** An iptables variant exactly: no fallback to another one. */
function strictIptables(iptables: Backend, variant: string, families: readonly Family[], host: HostView) {
  const t = iptables.tools(variant, families, host);
  if ("missing" in t) return t;
  return t.label === variant ? t : { missing: `the iptables-${variant} binaries` };
}

export async function chooseBackend(o: {
  mode: string;
  families: readonly Family[];
  userland: Userland;
  /** Read only for `auto` without a recorded backend (the caller passes a reader). */
  tables: () => NamespaceTables;
  /** The backend label of the container's record (CHECK). */
  recorded?: string;
}): Promise<Choice> {
  const host: HostView = { has: o.userland.has, hostIptables: undefined, nftLibrary: o.userland.nftInProcess };
  const mode = o.mode === "auto" || o.mode === "" ? (modeOfLabel(o.recorded) ?? "auto") : o.mode;
  if (mode !== "auto") {
    const backend = await kindOfMode(mode).load();
    const tools = backend.tools(mode, o.families, host);
    if ("missing" in tools) return { missing: tools.missing, why: `iptables-mode ${mode}` };
    const why = mode === o.mode ? `iptables-mode ${mode}` : `auto: the container's record says ${o.recorded}`;
    return { backend, tools, why };
  }
  const [iptables, nftables] = await Promise.all([kindNamed("iptables")!.load(), kindNamed("nftables")!.load()]);
  const legacy = o.tables().legacy;
  const held = o.families.filter((f) => (legacy[f] ?? []).length > 0);
  if (held.length > 0) {
    const tools = strictIptables(iptables, "legacy", o.families, host);
    const why = `auto: the pod's namespace holds legacy iptables tables (IPv${held.join("+IPv")})`;
    return "missing" in tools ? { missing: tools.missing, why } : { backend: iptables, tools, why };
  }
  const ipt = strictIptables(iptables, "nft", o.families, host);
  if (!("missing" in ipt)) {
    return {
      backend: iptables,
      tools: ipt,
      why: "auto: no legacy iptables tables in the pod's namespace; iptables-nft",
    };
  }
  const nft = nftables.tools("nftables", o.families, host);
  if (!("missing" in nft))
    return { backend: nftables, tools: nft, why: `auto: no iptables-nft in the agent; ${nft.label}` };
  const legacyTools = strictIptables(iptables, "legacy", o.families, host);
  if (!("missing" in legacyTools)) {
    return {
      backend: iptables,
      tools: legacyTools,
      why: "auto: neither iptables-nft nor nftables in the agent; legacy",
    };
  }
  return { missing: "iptables-restore, nft or libnftables", why: "auto: the agent's image has no firewall userland" };
}
