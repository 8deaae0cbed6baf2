// The nftables backend in real network namespaces, through the plugin's own apply path: for
// every plan (both meshes), ADD applies one nft transaction, `nft list` reads back exactly the
// plan (CHECK passes), ADD again leaves one copy, CHECK notices a change, a failing transaction
// leaves nothing, and DEL removes meshcni's tables and nothing else. Needs root.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { applyPlan } from "../../internal/firewall/apply.ts";
import { renderScript } from "../../internal/firewall/nftables/render.ts";
import { openFirewall } from "../../internal/firewall/io/open.ts";
import { createLogger } from "../../internal/plugin/log.ts";
import { isRoot, Netns, uniq } from "../support/netns.ts";
import { allCases } from "./cases.ts";

const settings = { mode: "nftables", wait: false, simulate: false } as const;
const log = createLogger("error", () => {});
const t = () => AbortSignal.timeout(10000);

for (const path of ["in process", "nft through nsenter"] as const)
  describe.skipIf(!isRoot())(`nftables backend in a real namespace (${path})`, () => {
    let ns: Netns;
    const saved = Bun.env.MESHCNI_NFT_INPROCESS;
    afterAll(() => {
      if (saved === undefined) delete Bun.env.MESHCNI_NFT_INPROCESS;
      else Bun.env.MESHCNI_NFT_INPROCESS = saved;
    });
    beforeAll(() => {
      if (path === "in process") delete Bun.env.MESHCNI_NFT_INPROCESS;
      else Bun.env.MESHCNI_NFT_INPROCESS = "0";
      ns = Netns.create(`mcn-${uniq()}`);
      // Someone else's table, which DEL must leave alone.
      expect(
        ns.exec(["nft", "add table inet other; add chain inet other c { type filter hook output priority 0; }"]).code,
      ).toBe(0);
    });
    afterAll(() => ns?.delete());

    for (const c of allCases()) {
      test(c.name, async () => {
        const fw = await openFirewall(ns.path, settings, [4, 6], Bun.env.PATH);
        expect(fw.driver.name).toBe("nftables");
        expect(fw.backend).toBe(path === "in process" ? "nftables in process" : "nftables");
        await applyPlan(fw, c.plan, log, t());
        expect(await fw.driver.verify(fw, c.plan, t())).toEqual([]);
        await applyPlan(fw, c.plan, log, t());
        expect(await fw.driver.verify(fw, c.plan, t())).toEqual([]);

        // CHECK sees a rule someone added, and a rule someone removed.
        const fam = c.plan.families[0]!.family === 6 ? "ip6" : "ip";
        expect(ns.exec(["nft", `add rule ${fam} meshcni nat_OUTPUT oifname "x" return`]).code).toBe(0);
        expect((await fw.driver.verify(fw, c.plan, t())).join("\n")).toContain(`unexpected 'oifname "x" return'`);
        expect(ns.exec(["nft", `flush chain ${fam} meshcni nat_OUTPUT`]).code).toBe(0);
        expect((await fw.driver.verify(fw, c.plan, t())).join("\n")).toMatch(/nat_OUTPUT: missing/);

        await fw.driver.remove(fw, { families: c.profile.families(c.conf), ownedChains: c.profile.ownedChains }, t());
        for (const cmd of c.profile.cleanupIpCommands ?? []) await fw.ip(cmd.family, cmd.argv, t());
        const left = ns.exec(["nft", "list", "tables"]).stdout;
        expect(left).not.toContain("meshcni");
        expect(left).toContain("table inet other");
        expect((await fw.driver.verify(fw, c.plan, t())).join("\n")).toMatch(/nft table ip6? meshcni is missing/);
      });
    }

    test("a new namespace gets its tables created, deleting nothing; an ADD over them replaces them", async () => {
      const c = allCases().find((x) => x.plan.families.length === 2)!;
      const fresh = Netns.create(`mcn-${uniq()}`);
      try {
        const fw = await openFirewall(fresh.path, settings, [4, 6], Bun.env.PATH);
        const sent: { script: string; code: number }[] = [];
        const recording = {
          ...fw,
          run: async (key: string, argv: readonly string[], stdin: string | undefined, signal: AbortSignal) => {
            const r = await fw.run(key, argv, stdin, signal);
            sent.push({ script: stdin ?? "", code: r.code });
            return r;
          },
        };
        const lines: string[] = [];
        const info = createLogger("info", (l) => lines.push(l));
        await fw.driver.apply(recording, c.plan, info, t());
        expect(sent.length).toBe(1);
        expect(sent[0]!.code).toBe(0);
        expect(sent[0]!.script).toStartWith("create table ip meshcni\n");
        expect(sent[0]!.script).not.toContain("delete");
        expect(await fw.driver.verify(fw, c.plan, t())).toEqual([]);
        expect(lines).toEqual([]);

        // Again over the tables: the create fails as a whole, the replacing transaction follows.
        await fw.driver.apply(recording, c.plan, info, t());
        expect(sent.map((s) => s.code === 0)).toEqual([true, false, true]);
        expect(sent[2]!.script).toContain("delete table ip meshcni\n");
        expect(lines.join("")).toContain("nft tables not created fresh");
        expect(await fw.driver.verify(fw, c.plan, t())).toEqual([]);
        expect(fresh.exec(["nft", "list", "tables"]).stdout.match(/meshcni/g)?.length).toBe(2);

        // A script the kernel refuses fails both ways, and the ADD fails with nothing applied.
        await fw.driver.remove(fw, { families: [4, 6], ownedChains: [] }, t());
        const refusing = {
          ...recording,
          run: (key: string, argv: readonly string[], stdin: string | undefined, signal: AbortSignal) =>
            recording.run(key, argv, `${stdin}add rule ip6 meshcni nat_OUTPUT tcp dport 70000 return\n`, signal),
        };
        sent.length = 0;
        await expect(fw.driver.apply(refusing, c.plan, info, t())).rejects.toThrow(/nft -f failed/);
        expect(sent.map((s) => s.code === 0)).toEqual([false, false]);
        expect(fresh.exec(["nft", "list", "tables"]).stdout).not.toContain("meshcni");
      } finally {
        fresh.delete();
      }
    });

    test("past the command's time bound, no transaction starts: a time-out error, nothing applied", async () => {
      const c = allCases().find((x) => x.plan.families.length === 2)!;
      const fresh = Netns.create(`mcn-${uniq()}`);
      try {
        const fw = await openFirewall(fresh.path, settings, [4, 6], Bun.env.PATH);
        await expect(fw.run("nft", ["-f", "-"], renderScript(c.plan), AbortSignal.abort())).rejects.toThrow(
          /timed out/,
        );
        await expect(fw.driver.apply(fw, c.plan, log, AbortSignal.abort())).rejects.toThrow(/timed out/);
        expect(fresh.exec(["nft", "list", "ruleset"]).stdout.trim()).toBe("");
      } finally {
        fresh.delete();
      }
    });

    test("a transaction that fails part-way applies nothing, even over an earlier ADD", async () => {
      const c = allCases().find((x) => x.plan.families.length === 2)!;
      const fw = await openFirewall(ns.path, settings, [4, 6], Bun.env.PATH);
      await applyPlan(fw, c.plan, log, t());
      const before = ns.exec(["nft", "list", "ruleset"]).stdout;
      // The same script with one bad statement at the very end.
      const broken = `${renderScript(c.plan)}add rule ip6 meshcni nat_OUTPUT tcp dport 70000 return\n`;
      const r = await fw.run("nft", ["-f", "-"], broken, t());
      expect(r.code).not.toBe(0);
      expect(ns.exec(["nft", "list", "ruleset"]).stdout).toBe(before);
      await fw.driver.remove(fw, { families: [4, 6], ownedChains: [] }, t());
      const fresh = Netns.create(`mcn-${uniq()}`);
      try {
        const fw2 = await openFirewall(fresh.path, settings, [4, 6], Bun.env.PATH);
        expect((await fw2.run("nft", ["-f", "-"], broken, t())).code).not.toBe(0);
        expect(fresh.exec(["nft", "list", "ruleset"]).stdout.trim()).toBe("");
      } finally {
        fresh.delete();
      }
    });
  });
