// Choosing the iptables binaries for a mode. Pure: the caller says which binaries exist and
// what the host's own `iptables` command is.
import type { Family } from "./model.ts";

export type Backend = "legacy" | "nft" | "plain";

export interface Binaries {
  backend: Backend;
  restore: Record<Family, string>;
  save: Record<Family, string>;
}

export function binariesFor(backend: Backend): Binaries {
  const suffix = backend === "plain" ? "" : `-${backend}`;
  return {
    backend,
    restore: { 4: `iptables${suffix}-restore`, 6: `ip6tables${suffix}-restore` },
    save: { 4: `iptables${suffix}-save`, 6: `ip6tables${suffix}-save` },
  };
}

function complete(b: Binaries, families: readonly Family[], has: (bin: string) => boolean): boolean {
  return families.every((f) => has(b.restore[f]) && has(b.save[f]));
}

/**
 * The binaries for `mode`. `auto` takes the backend the host's `iptables` already uses (so the
 * pod's rules sit where the host's tools show them), else the first complete set of nft,
 * legacy, plain. An explicit mode is used as it is. Returns the missing binary's name when the
 * chosen set is incomplete.
 */
export function chooseBinaries(
  mode: "auto" | Backend,
  families: readonly Family[],
  has: (bin: string) => boolean,
  hostBackend: Backend | undefined,
): Binaries | { missing: string } {
  if (mode !== "auto") {
    const b = binariesFor(mode);
    for (const f of families) {
      for (const bin of [b.restore[f], b.save[f]]) if (!has(bin)) return { missing: bin };
    }
    return b;
  }
  const order: Backend[] = [...(hostBackend ? [hostBackend] : []), "nft", "legacy", "plain"];
  for (const backend of order) {
    const b = binariesFor(backend);
    if (complete(b, families, has)) return b;
  }
  return { missing: families.includes(6) ? "iptables-restore or ip6tables-restore (any of the nft, legacy or plain variants)" : "iptables-restore (any of iptables-nft-restore, iptables-legacy-restore, iptables-restore)" };
}
