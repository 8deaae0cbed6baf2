// The backends, and which one a mode means. A new backend is a folder here and one line below.
import type { Family } from "../plan/model.ts";
import { iptablesBackend } from "./iptables/index.ts";
import { nftablesBackend } from "./nftables/index.ts";
import type { Backend, BackendName, HostView } from "./backend.ts";

export const BACKENDS: Record<BackendName, Backend> = {
  iptables: iptablesBackend,
  nftables: nftablesBackend,
};

/**
 * The backend for an `iptables-mode`: `nftables` is native nftables; `legacy`, `nft` and
 * `plain` are iptables binaries; `auto` is the iptables backend the host's own tools use, unless
 * the node has no complete set of iptables binaries but has `nft`, then nftables.
 */
export function backendFor(mode: string, families: readonly Family[], host: HostView): Backend {
  if (mode === "nftables") return nftablesBackend;
  if (mode !== "auto" && mode !== "") return iptablesBackend;
  const ipt = iptablesBackend.tools("auto", families, host);
  if ("missing" in ipt && (host.has("nft") || host.nftLibrary)) return nftablesBackend;
  return iptablesBackend;
}

/** Without looking at the host (dry runs, simulate): nftables for `nftables`, else iptables. */
export function backendOfMode(mode: string): Backend {
  return mode === "nftables" ? nftablesBackend : iptablesBackend;
}

/** The backend `meshcnictl explain --backend NAME` renders with. */
export function backendNamed(name: string): Backend | undefined {
  return (BACKENDS as Record<string, Backend>)[name];
}

export type { Backend, BackendName, Firewall, HostView, Removal, Tools } from "./backend.ts";
