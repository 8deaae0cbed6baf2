import { describe, expect, test } from "bun:test";
import { chooseBackend, modeOfLabel, type NamespaceTables, parseTableNames } from "./namespace-choice.ts";

const IPT_NFT = ["iptables-nft-restore", "iptables-nft-save", "ip6tables-nft-restore", "ip6tables-nft-save"];
const IPT_LEGACY = IPT_NFT.map((b) => b.replace("-nft-", "-legacy-"));
const image = (bins: string[], nftInProcess: boolean) => ({ has: (b: string) => bins.includes(b), nftInProcess });
const empty: NamespaceTables = { legacy: { 4: [], 6: [] } };
const legacyNat: NamespaceTables = { legacy: { 4: ["nat"], 6: [] } };
const label = (c: Awaited<ReturnType<typeof chooseBackend>>) =>
  "missing" in c ? `missing ${c.missing}` : c.tools.label;

describe("the agent's backend for a pod", () => {
  const full = image([...IPT_NFT, ...IPT_LEGACY, "nft", "ip"], true);
  test("auto: iptables-nft in a namespace without legacy tables, as the plugin's auto on an iptables-nft host", async () => {
    const c = await chooseBackend({ mode: "auto", families: [4, 6], userland: full, tables: () => empty });
    expect(label(c)).toBe("nft");
    expect("why" in c && c.why).toContain("no legacy iptables tables");
    // Native nftables (in process) only without iptables-nft, or when the mode says so.
    const noIptNft = await chooseBackend({
      mode: "auto",
      families: [4],
      userland: image(["nft"], true),
      tables: () => empty,
    });
    expect(label(noIptNft)).toBe("nftables in process");
    const explicit = await chooseBackend({ mode: "nftables", families: [4, 6], userland: full, tables: () => empty });
    expect(label(explicit)).toBe("nftables in process");
  });
  test("auto: iptables-legacy where the namespace already holds legacy tables (either family)", async () => {
    const c = await chooseBackend({ mode: "auto", families: [4, 6], userland: full, tables: () => legacyNat });
    expect(label(c)).toBe("legacy");
    expect("why" in c && c.why).toContain("legacy iptables tables (IPv4)");
    // An image without the legacy binaries: the plugin applies (no other variant beside legacy tables).
    const noLegacy = image([...IPT_NFT, "nft"], true);
    const m = await chooseBackend({ mode: "auto", families: [4], userland: noLegacy, tables: () => legacyNat });
    expect(label(m)).toBe("missing the iptables-legacy binaries");
  });
  test("auto without libnftables: iptables-nft, then nft, then legacy; nothing: missing", async () => {
    const t = () => empty;
    const pick = async (bins: string[]) =>
      label(await chooseBackend({ mode: "auto", families: [4, 6], userland: image(bins, false), tables: t }));
    expect(await pick([...IPT_NFT, ...IPT_LEGACY, "nft"])).toBe("nft");
    expect(await pick([...IPT_LEGACY, "nft"])).toBe("nftables");
    expect(await pick(IPT_LEGACY)).toBe("legacy");
    expect(await pick([])).toBe("missing iptables-restore, nft or libnftables");
  });
  test("auto reads the namespace only when it decides: an explicit mode or a recorded backend does not", async () => {
    let read = 0;
    const tables = () => {
      read++;
      return legacyNat;
    };
    expect(label(await chooseBackend({ mode: "nft", families: [4], userland: full, tables }))).toBe("nft");
    const rec = await chooseBackend({
      mode: "auto",
      families: [4],
      userland: full,
      tables,
      recorded: "nftables in process",
    });
    expect(label(rec)).toBe("nftables in process");
    expect("why" in rec && rec.why).toBe("auto: the container's record says nftables in process");
    expect(read).toBe(0);
  });
  test("explicit modes: the image's binaries of that variant, the plugin's fallback with a warning", async () => {
    expect(label(await chooseBackend({ mode: "nftables", families: [4], userland: full, tables: () => empty }))).toBe(
      "nftables in process",
    );
    const nftBin = await chooseBackend({
      mode: "nftables",
      families: [4],
      userland: image(["nft"], false),
      tables: () => empty,
    });
    expect(label(nftBin)).toBe("nftables");
    const fallback = await chooseBackend({
      mode: "legacy",
      families: [4],
      userland: image(IPT_NFT, true),
      tables: () => empty,
    });
    expect(label(fallback)).toBe("nft");
    expect("tools" in fallback && fallback.tools.warning).toContain("iptables-mode legacy");
    expect(
      label(await chooseBackend({ mode: "nftables", families: [4], userland: image([], false), tables: () => empty })),
    ).toBe("missing nft");
  });
  test("labels and /proc's table lists", () => {
    expect(modeOfLabel("nftables in process")).toBe("nftables");
    expect(modeOfLabel("legacy")).toBe("legacy");
    expect(modeOfLabel("something else")).toBeUndefined();
    expect(parseTableNames("nat\nfilter\n")).toEqual(["nat", "filter"]);
    expect(parseTableNames("")).toEqual([]);
  });
});
