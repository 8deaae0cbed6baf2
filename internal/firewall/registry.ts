// The backends: the one list of their names, of the `iptables-mode` values that choose each, and
// of what each can do. A new backend is a folder beside this file and one line in BACKENDS;
// everything else (the config's modes, the agent's answer, `meshcnictl explain --backend`) derives
// from it. Light on purpose: a backend's code loads only when a command has rules to render,
// apply, check or remove.
import type { Family } from "../plan/model.ts";
import type { Backend, HostView } from "./backend.ts";

export interface BackendKind {
  readonly name: string;
  /** The `iptables-mode` values that choose this backend (`auto` chooses among all). */
  readonly modes: readonly string[];
  /** One transaction covers every address family, so DEL removes them all in one step. */
  readonly familiesAtOnce: boolean;
  load(): Promise<Backend>;
}

/** In the order `auto` tries them: the first whose binaries the host has. */
export const BACKENDS = [
  {
    name: "iptables",
    modes: ["legacy", "nft", "plain"],
    familiesAtOnce: false,
    load: async () => (await import("./iptables/index.ts")).iptablesBackend,
  },
  {
    name: "nftables",
    modes: ["nftables"],
    familiesAtOnce: true,
    load: async () => (await import("./nftables/index.ts")).nftablesBackend,
  },
] as const satisfies readonly BackendKind[];

export type BackendName = (typeof BACKENDS)[number]["name"];
export type IptablesMode = "auto" | (typeof BACKENDS)[number]["modes"][number];

export const BACKEND_NAMES: readonly BackendName[] = BACKENDS.map((b) => b.name);
export const IPTABLES_MODES: readonly IptablesMode[] = ["auto", ...BACKENDS.flatMap((b) => b.modes)];

/** What a mesh profile asks of the firewall (its `iptables-mode`, `use-wait-flag`, `simulate`). */
export interface FirewallSettings {
  mode: IptablesMode;
  wait: boolean;
  simulate: boolean;
}

export const kindNamed = (name: string): BackendKind | undefined => BACKENDS.find((b) => b.name === name);

/** The backend a mode names; `auto` (and anything unknown) without looking at the host: the first. */
export const kindOfMode = (mode: string): BackendKind =>
  BACKENDS.find((b) => (b.modes as readonly string[]).includes(mode)) ?? BACKENDS[0];

/**
 * The backend for an `iptables-mode` on this host: the one the mode names, or for `auto` the first
 * whose binaries the host has (the iptables backend takes the variant the host's own `iptables`
 * is); with none complete, the first, which says what is missing.
 */
export async function backendFor(mode: string, families: readonly Family[], host: HostView): Promise<Backend> {
  if (mode !== "auto" && mode !== "") return kindOfMode(mode).load();
  const all = await Promise.all(BACKENDS.map((b) => b.load()));
  return all.find((b) => !("missing" in b.tools("auto", families, host))) ?? all[0]!;
}

/** Without looking at the host (dry runs, simulate, explain): the backend the mode names. */
export const backendOfMode = (mode: string): Promise<Backend> => kindOfMode(mode).load();
