// The nftables backend, pure: every plan both backends are tested with renders exactly its
// golden nft script (testdata/nftables/), each iptables rule has exactly one nft rule, and no
// value can leave its place in the script.
import { describe, expect, test } from "bun:test";
import { nftablesBackend } from "../../internal/firewall/nftables/index.ts";
import { familyChains, portSet, renderScript, ruleText } from "../../internal/firewall/nftables/render.ts";
import { M, A, orderedRules } from "../../internal/plan/model.ts";
import { expectGolden } from "../support/golden.ts";
import { allCases } from "./cases.ts";

describe("nft script goldens", () => {
  const cases = allCases();
  test("there are cases for both meshes", () => {
    expect(cases.filter((c) => c.name.startsWith("linkerd-")).length).toBeGreaterThanOrEqual(5);
    expect(cases.filter((c) => c.name.startsWith("istio-")).length).toBeGreaterThan(20);
  });
  for (const c of cases) {
    test(c.name, () => {
      expectGolden(`testdata/nftables/${c.name}.nft`, nftablesBackend.render(c.plan));
    });
  }
  test("every plan rule is one nft rule, in its chain, in order", () => {
    for (const c of cases) {
      for (const fp of c.plan.families) {
        const chains = familyChains(fp);
        const total = chains.reduce((n, ch) => n + ch.rules.length, 0);
        expect(total, c.name).toBe(fp.rules.length);
        for (const ch of fp.chains) {
          const want = orderedRules(fp, ch.stage, ch.name).map((r) => ruleText(r.match, r.action, r.stage, fp.family));
          expect(chains.find((x) => x.name === `${ch.stage}_${ch.name}`)!.rules).toEqual(want);
        }
      }
    }
  });
  test("the script replaces meshcni's tables in one transaction and touches nothing else", () => {
    for (const c of cases) {
      const script = renderScript(c.plan);
      const tables = [...script.matchAll(/^(add table|delete table|table) (\S+) (\S+)/gm)].map(
        (m) => `${m[2]} ${m[3]}`,
      );
      expect(new Set(tables).size, c.name).toBe(c.plan.families.length);
      for (const t of tables) expect(["ip meshcni", "ip6 meshcni"]).toContain(t);
    }
  });
});

describe("values cannot escape their place", () => {
  test("ports are sorted and merged the way nft lists them", () => {
    expect(
      portSet([
        { from: 4191, to: 4191 },
        { from: 4190, to: 4190 },
      ]),
    ).toBe("4190-4191");
    expect(
      portSet([
        { from: 53, to: 53 },
        { from: 15008, to: 15008 },
      ]),
    ).toBe("{ 53, 15008 }");
    expect(
      portSet([
        { from: 100, to: 200 },
        { from: 150, to: 300 },
        { from: 7, to: 7 },
      ]),
    ).toBe("{ 7, 100-300 }");
    expect(() => portSet([{ from: 70000, to: 70000 }])).toThrow(/refusing port/);
  });
  const bad: [string, () => string][] = [
    ["interface with a quote", () => ruleText([M.in('eth0" accept; #')], A.ret, "nat", 4)],
    ["interface with a line break", () => ruleText([M.out("eth0\nflush ruleset")], A.ret, "nat", 4)],
    ["comment with a quote", () => ruleText([M.comment('x" drop comment "')], A.ret, "nat", 4)],
    ["comment with a brace", () => ruleText([M.comment("x } table ip x {")], A.ret, "nat", 4)],
    ["address that is not one", () => ruleText([M.dst("10.0.0.0/8 accept")], A.ret, "nat", 4)],
    ["IPv6 address in an IPv4 rule", () => ruleText([M.dst("fd00::/8")], A.ret, "nat", 4)],
    [
      "mapped IPv6 address with something after it",
      () => ruleText([M.dst("::ffff:10.0.0.1/128 accept")], A.ret, "nat", 6),
    ],
    ["negative uid", () => ruleText([M.uid(-1)], A.ret, "nat", 4)],
    ["fractional port", () => ruleText([], A.redirect(15001.5), "nat", 4)],
    ["chain that is not ours", () => ruleText([], A.jump("x; flush ruleset"), "nat", 4)],
  ];
  for (const [what, f] of bad) test(what, () => expect(f).toThrow(/refusing/));
  test("plain values pass", () => {
    expect(ruleText([M.in("k6t-eth0"), M.comment("proxy-init/ignore-subnet-10.0.0.0/8")], A.ret, "nat", 4)).toBe(
      'iifname "k6t-eth0" return comment "proxy-init/ignore-subnet-10.0.0.0/8"',
    );
    expect(ruleText([M.dst("::1/128", true), M.tcp], A.tproxy(15006, 1337), "mangle", 6)).toBe(
      "ip6 daddr != ::1 meta l4proto tcp tproxy to :15006 meta mark set 0x00000539 accept",
    );
    // IPv4-mapped IPv6, written (and listed back by nft) with its dotted tail.
    expect(ruleText([M.dst("::ffff:10.0.0.0/104")], A.ret, "nat", 6)).toBe("ip6 daddr ::ffff:10.0.0.0/104 return");
    expect(ruleText([M.dst("::ffff:10.0.0.1/128")], A.ret, "nat", 6)).toBe("ip6 daddr ::ffff:10.0.0.1 return");
  });
});
