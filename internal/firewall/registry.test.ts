import { describe, expect, test } from "bun:test";
import { backendFor, backendNamed, backendOfMode } from "./registry.ts";

const host = (bins: string[], hostIptables?: "nft" | "legacy") => ({ has: (b: string) => bins.includes(b), hostIptables });
const IPT_NFT = ["iptables-nft-restore", "iptables-nft-save", "ip6tables-nft-restore", "ip6tables-nft-save"];
const IPT_LEGACY = IPT_NFT.map((b) => b.replace("-nft-", "-legacy-"));

describe("which backend a mode means", () => {
  test("nftables is native nftables, whatever the host has", () => {
    expect(backendFor("nftables", [4, 6], host([...IPT_NFT, "nft"])).name).toBe("nftables");
    expect(backendFor("nftables", [4], host([])).tools("nftables", [4], host([]))).toEqual({ missing: "nft" });
  });
  test("legacy, nft and plain are iptables binaries", () => {
    for (const m of ["legacy", "nft", "plain"]) expect(backendFor(m, [4], host(["nft"])).name).toBe("iptables");
  });
  test("auto: iptables when the node has a complete set, nftables when it has only nft", () => {
    expect(backendFor("auto", [4, 6], host([...IPT_NFT, "nft"], "nft")).name).toBe("iptables");
    expect(backendFor("auto", [4, 6], host([...IPT_LEGACY, "nft"], "legacy")).name).toBe("iptables");
    expect(backendFor("auto", [4, 6], host(["nft"])).name).toBe("nftables");
    expect(backendFor("", [4], host(["nft"])).name).toBe("nftables");
    // IPv4 binaries only, IPv6 needed: not a complete set, so nft
    expect(backendFor("auto", [4, 6], host(["iptables-nft-restore", "iptables-nft-save", "nft"])).name).toBe("nftables");
    // neither: iptables, whose error names what is missing
    const none = backendFor("auto", [4], host([]));
    expect(none.name).toBe("iptables");
    expect(none.tools("auto", [4], host([]))).toHaveProperty("missing");
  });
  test("the host's iptables backend is followed within iptables", () => {
    const t = backendFor("auto", [4], host([...IPT_NFT, ...IPT_LEGACY], "legacy")).tools("auto", [4], host([...IPT_NFT, ...IPT_LEGACY], "legacy"));
    expect(t).toMatchObject({ label: "legacy", bins: { restore4: "iptables-legacy-restore", save4: "iptables-legacy-save" }, lockAtNetns: true });
  });
  test("explain's names, and the offline choice for dry runs", () => {
    expect(backendNamed("nftables")?.name).toBe("nftables");
    expect(backendNamed("iptables")?.name).toBe("iptables");
    expect(backendNamed("ebpf")).toBeUndefined();
    expect(backendOfMode("nftables").name).toBe("nftables");
    expect(backendOfMode("auto").name).toBe("iptables");
  });
});
