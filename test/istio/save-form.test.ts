// Our Istio rules are written the way iptables-save prints them back, so CHECK compares text.
// For every golden case, both backends (legacy, nft) and both families: the fresh payload goes
// into a real network namespace with iptables-restore, iptables-save's output parses back to
// exactly our RuleSet (CHECK passes), ADD again reconciles to one copy, and DEL's cleanup leaves
// the namespace as it found it. Needs root.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { istioProfile } from "../../internal/mesh/istio/profile.ts";
import { openFirewall } from "../../internal/firewall/io/open.ts";
import { applyPlan } from "../../internal/firewall/apply.ts";
import { ruleSetOf } from "../../internal/firewall/iptables/from-plan.ts";
import { createLogger } from "../../internal/plugin/log.ts";
import type { Family } from "../../internal/plan/model.ts";
import { renderFresh } from "../../internal/firewall/iptables/restore.ts";
import { diffRuleSet, parseSave } from "../../internal/firewall/iptables/save.ts";
import { isRoot, Netns, uniq } from "../support/netns.ts";
import { listCases, readCase } from "./cases.ts";

const tool = (backend: string, family: Family, what: "save" | "restore") =>
  `${family === 6 ? "ip6tables" : "iptables"}-${backend}-${what}`;

/** Everything in the namespace's tables besides the empty built-in chains. */
function residue(ns: Netns, backend: "legacy" | "nft", family: Family): string[] {
  return ns
    .save(backend, family)
    .split("\n")
    .filter(
      (l) => l.startsWith("-A ") || (l.startsWith(":") && !/^:(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING) /.test(l)),
    );
}

const cases = listCases().filter((c) => !c.startsWith("bad-"));

for (const backend of ["legacy", "nft"] as const) {
  describe.skipIf(!isRoot())(`istio payloads round-trip through iptables-${backend}`, () => {
    let ns: Netns;
    beforeAll(() => {
      ns = Netns.create(`mci-${uniq()}`);
    });
    afterAll(() => ns?.delete());

    for (const name of cases) {
      test(name, async () => {
        const { input, pod, conf } = readCase(name);
        if (!istioProfile.decide(pod, conf).redirect) return;
        const redirect = istioProfile.plan({ conf, pod, podAddresses: input.podAddresses });

        // 1. The fresh payload as ADD applies it, then iptables-save parsed back: no difference.
        for (const rs of redirect.families.map(ruleSetOf)) {
          const r = ns.exec([tool(backend, rs.family, "restore"), "--noflush"], { stdin: renderFresh(rs) });
          expect(r.stderr, `${tool(backend, rs.family, "restore")}`).toBe("");
          expect(r.code).toBe(0);
          expect(diffRuleSet(rs, parseSave(ns.save(backend, rs.family)))).toEqual([]);
        }

        // 2. Through the plugin's apply path: ADD on top reconciles (one copy), CHECK passes.
        const settings = { mode: backend, wait: false, simulate: false } as const;
        const fw = await openFirewall(ns.path, settings, [4, 6], Bun.env.PATH);
        const log = createLogger("error", () => {});
        await applyPlan(fw, redirect, log, AbortSignal.timeout(10000));
        expect(await fw.driver.verify(fw, redirect, AbortSignal.timeout(10000))).toEqual([]);
        for (const cmd of redirect.ipCommands) {
          const show =
            cmd.argv[0] === "addr"
              ? ["addr", "show", "dev", "lo"]
              : [cmd.argv[0]!, "show", ...(cmd.argv[0] === "route" ? ["table", "133"] : [])];
          const out = ns.exec(["ip", `-${cmd.family}`, ...show]).stdout;
          expect(out, cmd.argv.join(" ")).toMatch(
            cmd.argv[0] === "addr"
              ? /inet6 ::6\/128/
              : cmd.argv[0] === "rule"
                ? /32765:\s+from all fwmark 0x539 lookup 133/
                : /local default dev lo/,
          );
          // exactly one rule, even after the second ADD
          if (cmd.argv[0] === "rule") expect(out.split("\n").filter((l) => l.includes("fwmark 0x539")).length).toBe(1);
        }

        // 3. DEL as the plugin does it, without the pod: nothing of ours is left.
        await fw.driver.remove(
          fw,
          {
            families: istioProfile.families(conf),
            ownedChains: istioProfile.ownedChains,
            ownsBuiltinRule: istioProfile.ownsBuiltinRule!,
          },
          AbortSignal.timeout(10000),
        );
        for (const cmd of istioProfile.cleanupIpCommands ?? [])
          await fw.ip(cmd.family, cmd.argv, AbortSignal.timeout(5000));
        for (const f of [4, 6] as const) expect(residue(ns, backend, f), `IPv${f} after DEL`).toEqual([]);
        expect(ns.exec(["ip", "-4", "rule"]).stdout).not.toContain("lookup 133");
        expect(ns.exec(["ip", "-6", "rule"]).stdout).not.toContain("lookup 133");
        expect(ns.exec(["ip", "-6", "addr", "show", "dev", "lo"]).stdout).not.toContain("::6/128");
        expect(ns.exec(["ip", "-4", "route", "show", "table", "133"]).stdout.trim()).toBe("");
      });
    }
  });
}
