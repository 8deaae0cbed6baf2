import { describe, expect, test } from "bun:test";
import { BACKEND_NAMES, backendFor, backendOfMode, IPTABLES_MODES, kindNamed } from "./registry.ts";

const host = (bins: string[], hostIptables?: "nft" | "legacy") => ({
  has: (b: string) => bins.includes(b),
  hostIptables,
});
const IPT_NFT = ["iptables-nft-restore", "iptables-nft-save", "ip6tables-nft-restore", "ip6tables-nft-save"];
const IPT_LEGACY = IPT_NFT.map((b) => b.replace("-nft-", "-legacy-"));

describe("which backend a mode means", () => {
  test("nftables is native nftables, whatever the host has", async () => {
    expect((await backendFor("nftables", [4, 6], host([...IPT_NFT, "nft"]))).name).toBe("nftables");
    expect((await backendFor("nftables", [4], host([]))).tools("nftables", [4], host([]))).toEqual({ missing: "nft" });
  });
  test("legacy, nft and plain are iptables binaries", async () => {
    for (const m of ["legacy", "nft", "plain"]) expect((await backendFor(m, [4], host(["nft"]))).name).toBe("iptables");
  });
  test("auto: iptables when the node has a complete set, nftables when it has only nft", async () => {
    expect((await backendFor("auto", [4, 6], host([...IPT_NFT, "nft"], "nft"))).name).toBe("iptables");
    expect((await backendFor("auto", [4, 6], host([...IPT_LEGACY, "nft"], "legacy"))).name).toBe("iptables");
    expect((await backendFor("auto", [4, 6], host(["nft"]))).name).toBe("nftables");
    expect((await backendFor("", [4], host(["nft"]))).name).toBe("nftables");
    // IPv4 binaries only, IPv6 needed: not a complete set, so nft
    expect((await backendFor("auto", [4, 6], host(["iptables-nft-restore", "iptables-nft-save", "nft"]))).name).toBe(
      "nftables",
    );
    // neither: iptables, whose error names what is missing
    const none = await backendFor("auto", [4], host([]));
    expect(none.name).toBe("iptables");
    expect(none.tools("auto", [4], host([]))).toHaveProperty("missing");
  });
  test("the host's iptables backend is followed within iptables", async () => {
    const h = host([...IPT_NFT, ...IPT_LEGACY], "legacy");
    const t = (await backendFor("auto", [4], h)).tools("auto", [4], h);
    expect(t).toMatchObject({
      label: "legacy",
      bins: { restore4: "iptables-legacy-restore", save4: "iptables-legacy-save" },
      lockAtNetns: true,
    });
  });
  test("explain's names, and the offline choice for dry runs", async () => {
    expect((await kindNamed("nftables")?.load())?.name).toBe("nftables");
    expect((await kindNamed("iptables")?.load())?.name).toBe("iptables");
    expect(kindNamed("ebpf")).toBeUndefined();
    expect((await backendOfMode("nftables")).name).toBe("nftables");
    expect((await backendOfMode("auto")).name).toBe("iptables");
  });
  test("the one list: names, modes, and each backend's name is its registry name", async () => {
    expect(BACKEND_NAMES).toEqual(["iptables", "nftables"]);
    expect(IPTABLES_MODES).toEqual(["auto", "legacy", "nft", "plain", "nftables"]);
    for (const name of BACKEND_NAMES) expect((await kindNamed(name)!.load()).name).toBe(name);
  });
});
