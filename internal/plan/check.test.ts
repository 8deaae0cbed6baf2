// checkPlan: a plan from the wire is rebuilt from values the model allows, or refused naming the
// first one it does not; nothing outside the model (an extra field, a quote, a newline) survives.
import { describe, expect, test } from "bun:test";
import { disagreements } from "../../test/support/regexp-agreement.ts";
import { checkPlan, IP_NUM, isIpNum } from "./check.ts";
import { A, M, type Plan, PlanBuilder } from "./model.ts";

function sample(): Plan {
  const b = new PlanBuilder(4);
  b.append("nat", "PREROUTING", [M.tcp], A.jump("PROXY_INBOUND"));
  b.append(
    "nat",
    "PROXY_INBOUND",
    [
      M.tcp,
      M.dports("tcp", [{ from: 4190, to: 4191 }], true),
      M.src("10.0.0.0/8", true),
      M.in("eth0"),
      M.comment("meshcni: inbound"),
    ],
    A.redirect(4143),
  );
  b.insert("nat", "OUTPUT", 1, [M.uid(2102), M.ctstate("ESTABLISHED"), M.mark(0x539, true), M.connmark(7)], A.ret);
  b.append("mangle", "PROXY_TPROXY", [M.tcp], A.tproxy(15006, 0x539));
  b.append("raw", "PREROUTING", [M.udp, M.sport("udp", 53)], A.ctZone(1));
  return {
    families: [b.build()],
    ipCommands: [{ family: 4, argv: ["route", "replace", "local", "default", "dev", "lo", "table", "133"] }],
  };
}

const wire = (p: unknown) => JSON.parse(JSON.stringify(p));

describe("checkPlan", () => {
  test("a plan built by the model passes unchanged", () => {
    expect(checkPlan(wire(sample()))).toEqual(wire(sample()));
  });

  test("fields outside the model are dropped, not passed on", () => {
    const p = wire(sample());
    p.families[0].rules[0].raw = "-A OUTPUT -j ACCEPT";
    p.families[0].rules[0].match[0].extra = "x";
    p.extra = 1;
    expect(checkPlan(p)).toEqual(wire(sample()));
  });

  const bad: [string, (p: any) => void, string][] = [
    [
      "a chain name with a space",
      (p) => (p.families[0].rules[1].chain = "PROXY INBOUND"),
      "families[0].rules[1].chain",
    ],
    ["a jump with a newline", (p) => (p.families[0].rules[0].action.chain = "X\n-A OUTPUT -j ACCEPT"), "action.chain"],
    ["a comment with a quote", (p) => (p.families[0].rules[1].match[4].text = 'x" -j ACCEPT "'), "match[4].text"],
    [
      "an address with more than an address",
      (p) => (p.families[0].rules[1].match[2].cidr = "10.0.0.0/8 -j ACCEPT"),
      "match[2].cidr",
    ],
    [
      "an IPv6 range in the IPv4 rules",
      (p) => (p.families[0].rules[1].match[2].cidr = "::1/128"),
      "IPv6 range in the IPv4 rules",
    ],
    [
      "a range not in its normalised form",
      (p) => (p.families[0].rules[1].match[2].cidr = "10.1.2.3/8"),
      "match[2].cidr",
    ],
    ["an interface with a space", (p) => (p.families[0].rules[1].match[3].name = "eth0 -j"), "match[3].name"],
    ["a port past 65535", (p) => (p.families[0].rules[1].match[1].ports[0].to = 70000), "ports[0].to"],
    [
      "a range that ends before it starts",
      (p) => (p.families[0].rules[1].match[1].ports[0] = { from: 9, to: 1 }),
      "ports[0]",
    ],
    ["a port as text", (p) => (p.families[0].rules[1].action.port = "4143"), "action.port"],
    ["an unknown match", (p) => p.families[0].rules[0].match.push({ m: "string", text: "x" }), "unknown match"],
    ["an unknown action", (p) => (p.families[0].rules[0].action = { a: "log" }), "unknown action"],
    ["an unknown stage", (p) => (p.families[0].rules[0].stage = "security"), "stage"],
    ["a family other than 4 or 6", (p) => (p.families[0].family = 5), "family"],
    ["the same family twice", (p) => p.families.push(p.families[0]), "twice"],
    ["an ip argument with a space", (p) => (p.ipCommands[0].argv[1] = "replace local"), "ipCommands[0].argv"],
    // `ip` runs as root with the host's files: only the commands the Istio profile writes.
    ["ip netns", (p) => (p.ipCommands[0].argv = ["netns", "add", "x"]), "ipCommands[0].argv"],
    [
      "ip -all netns exec",
      (p) => (p.ipCommands[0].argv = ["-all", "netns", "exec", "/bin/sh", "/var/run/meshcni/evil.sh"]),
      "ipCommands[0].argv",
    ],
    ["ip -batch", (p) => (p.ipCommands[0].argv = ["-batch", "/var/run/meshcni/cmds"]), "ipCommands[0].argv"],
    [
      "ip -n on another namespace",
      (p) => (p.ipCommands[0].argv = ["-n", "cni-0000", "link", "set", "eth0", "down"]),
      "ipCommands[0].argv",
    ],
    ["a table that is not a number", (p) => (p.ipCommands[0].argv[7] = "main"), "ipCommands[0].argv"],
    [
      "a rule in a built-in chain the plan may not use",
      (p) => (p.families[0].rules[0].chain = "INPUT"),
      "rules[0].chain",
    ],
    ["a rule in a chain the plan does not declare", (p) => (p.families[0].rules[1].chain = "OTHER"), "rules[1].chain"],
    ["a jump to an iptables target", (p) => (p.families[0].rules[0].action.chain = "NFQUEUE"), "rules[0].action.chain"],
    [
      "a jump to a chain of another stage",
      (p) => (p.families[0].rules[0].action.chain = "PROXY_TPROXY"),
      "rules[0].action.chain",
    ],
    [
      "a built-in chain declared as the plan's own",
      (p) => p.families[0].chains.push({ stage: "filter", name: "INPUT" }),
      "built-in",
    ],
    ["a negative position", (p) => (p.families[0].rules[2].insertAt = -1), "insertAt"],
    ["a flag that is not a boolean", (p) => (p.families[0].rules[1].match[1].not = "yes"), "not"],
    ["no ipCommands", (p) => delete p.ipCommands, "not a plan"],
    ["no family at all", (p) => (p.families = []), "no address family"],
  ];
  for (const [what, mutate, where] of bad) {
    test(`refuses ${what}`, () => {
      const p = wire(sample());
      mutate(p);
      expect(() => checkPlan(p)).toThrow(where);
    });
  }
});

test("isIpNum: the numbers of an ip command", () => {
  for (const ok of ["1", "133", "9999999999"]) expect(isIpNum(ok)).toBe(true);
  for (const bad of ["", "0", "01", "1a", " 1", "-1", "10000000000"]) expect(isIpNum(bad)).toBe(false);
});

test("isIpNum agrees with IP_NUM", () => {
  expect(
    disagreements(isIpNum, IP_NUM, {
      alphabet: ["0", "1", "9", "/", ":", "a", " ", "\n"],
      valid: "1234567890",
      bounds: [10],
      depth: 5,
    }),
  ).toEqual([]);
});
