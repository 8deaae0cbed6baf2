// Choosing the iptables binaries for a mode. Pure: the caller says which binaries exist and
// what the host's own `iptables` command is.
import type { Family } from "./model.ts";

/** Which iptables: the one built on nftables, the legacy one, or plain `iptables-restore`. */
export type Variant = "legacy" | "nft" | "plain";

export interface Binaries {
  variant: Variant;
  restore: Record<Family, string>;
  save: Record<Family, string>;
  /** Set when the configured mode's binaries were missing and these were taken instead. */
  fallback?: { from: Variant; missing: string };
}

/** linkerd-cni's order when the configured mode's binaries are missing on the node. */
const FALLBACK_ORDER: Variant[] = ["nft", "plain", "legacy"];

export function binariesFor(variant: Variant): Binaries {
  const suffix = variant === "plain" ? "" : `-${variant}`;
  return {
    variant,
    restore: { 4: `iptables${suffix}-restore`, 6: `ip6tables${suffix}-restore` },
    save: { 4: `iptables${suffix}-save`, 6: `ip6tables${suffix}-save` },
  };
}

function firstMissing(b: Binaries, families: readonly Family[], has: (bin: string) => boolean): string | undefined {
  for (const f of families) {
    for (const bin of [b.restore[f], b.save[f]]) if (!has(bin)) return bin;
  }
  return undefined;
}

function complete(b: Binaries, families: readonly Family[], has: (bin: string) => boolean): boolean {
  return firstMissing(b, families, has) === undefined;
}

/**
 * The binaries for `mode`. `auto` takes the variant the host's `iptables` already uses (so the
 * pod's rules sit where the host's tools show them), else the first complete set of nft,
 * legacy, plain. An explicit mode is used when the node has its binaries; else, as linkerd-cni
 * does, the first complete set of nft, plain, legacy, marked with `fallback` so the caller can
 * warn. Returns the missing binary's name when no set is complete.
 */
export function chooseBinaries(
  mode: "auto" | Variant,
  families: readonly Family[],
  has: (bin: string) => boolean,
  hostVariant: Variant | undefined,
): Binaries | { missing: string } {
  if (mode !== "auto") {
    const b = binariesFor(mode);
    const missing = firstMissing(b, families, has);
    if (missing === undefined) return b;
    for (const other of FALLBACK_ORDER) {
      const o = binariesFor(other);
      if (other !== mode && complete(o, families, has)) return { ...o, fallback: { from: mode, missing } };
    }
    return { missing };
  }
  const order: Variant[] = [...(hostVariant ? [hostVariant] : []), "nft", "legacy", "plain"];
  for (const variant of order) {
    const b = binariesFor(variant);
    if (complete(b, families, has)) return b;
  }
  return {
    missing: families.includes(6)
      ? "iptables-restore or ip6tables-restore (any of the nft, legacy or plain variants)"
      : "iptables-restore (any of iptables-nft-restore, iptables-legacy-restore, iptables-restore)",
  };
}
