// The quick variant of `bun run fuzz`: a few thousand seeded cases through the plugin's real code
// path (in-process, dry run, real stand-in API server) and a slice through dist/meshcni, judged by
// the independent oracle; every other ADD case also as a warm ADD the node agent plans (its socket
// handler and planner over a real Unix socket, the plugin's side of the wire taking the answer),
// judged by the same oracle and compared with the plugin alone. FUZZ_SEED=N replays another seed.
// Plus checks that the fuzzer itself can fail: it is reproducible, it reaches every stage, and its
// oracle catches tampered outcomes and tampered agent answers.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { buildCase, type FuzzCase } from "./fuzz/generate.ts";
import { type FuzzHarness, type RunResult, startFuzzHarness } from "./fuzz/harness.ts";
import { judge } from "./fuzz/oracle.ts";
import { startAgentFuzz } from "./fuzz/agent-fuzz.ts";
import { judgeAgent, nftablesVariant, renderFailure, renderSummary, runFuzz } from "./fuzz/run-fuzz.ts";

const SEED = Number(Bun.env.FUZZ_SEED ?? 20261121);
const CASES = Number(Bun.env.FUZZ_CASES ?? 4000);

let h: FuzzHarness;
beforeAll(async () => {
  h = await startFuzzHarness();
});
afterAll(() => h?.close());

const RUN = `${CASES} seeded cases (seed ${SEED}), every 80th also through dist/meshcni, every other ADD also agent-planned`;
test(`${RUN}: no finding`, async () => {
  const report = await runFuzz({ seed: SEED, cases: CASES, binaryEvery: 80, maxFailures: 20, agentEvery: 2 }, h);
  console.log(renderSummary(report));
  for (const f of report.failures) console.log(renderFailure(f));
  expect(report.failures.map((f) => `${f.index}: ${f.problems[0]}`)).toEqual([]);
  expect(report.binaryCases).toBe(Math.ceil(CASES / 80));
  // Most cases also ran on the nftables backend, with the same expectation.
  expect(report.nftablesCases).toBeGreaterThan(CASES * 0.5);
  // The cases reach every stage: rules, the decode/version/config/environment errors, the API's.
  const n = (k: string) => report.outcomes.get(k) ?? 0;
  expect(n("ok with rules")).toBeGreaterThan(CASES * 0.05);
  for (const k of ["ok", "code 1", "code 4", "code 6", "code 7", "code 11", "code 106", "code 107"])
    expect(n(k)).toBeGreaterThan(0);
  // The agent planned most ADDs (rules, no rules, the plugin's errors), and declined what is the plugin's.
  const a = (k: string) =>
    [...report.agentOutcomes].filter(([key]) => key.startsWith(k)).reduce((sum, [, v]) => sum + v, 0);
  expect(report.agentCases).toBeGreaterThan(CASES * 0.2);
  const kinds = [
    "planned: ok with rules",
    "planned: ok",
    "planned: code 4",
    "planned: code 7",
    "planned: code 106",
    "declined: ",
    "413",
  ];
  for (const k of kinds) {
    expect({ k, n: a(k) }).toEqual({ k, n: expect.any(Number) });
    expect({ k, reached: a(k) > 0 }).toEqual({ k, reached: true });
  }
  expect(a("planned: ok with rules")).toBeGreaterThan(CASES * 0.015);
}, 180_000);

test("a case is a pure function of (seed, index)", () => {
  for (const i of [0, 1, 999, 123_456]) {
    const a = buildCase(SEED, i);
    const b = buildCase(SEED, i);
    expect(JSON.stringify(a)).toBe(JSON.stringify(b));
    expect(JSON.stringify(buildCase(SEED + 1, i))).not.toBe(JSON.stringify(a));
  }
});

describe("the oracle catches what it is there to catch", () => {
  /** The first strong (non-havoc) ADD case of a mesh that gets rules, and its honest outcome. */
  async function redirected(mesh: "linkerd" | "istio"): Promise<{ c: FuzzCase; r: RunResult }> {
    for (let i = 0; ; i++) {
      const c = buildCase(SEED, i);
      if (c.mesh !== mesh || c.expect.weak || !c.expect.rules || c.expect.codes.length > 0) continue;
      h.serve(c);
      const r = await h.runInProcess(c);
      h.release(c);
      expect(judge(c, r)).toEqual([]);
      return { c, r };
    }
  }

  const tamper = (r: RunResult, change: Partial<RunResult>): RunResult => ({ ...r, ...change });
  /** Adds a rule at the end of the first nat table. */
  const addToNat = (p: string, rule: string) => {
    const at = p.indexOf("\nCOMMIT", p.indexOf("*nat"));
    return `${p.slice(0, at)}\n${rule}${p.slice(at)}`;
  };
  const otherPort = (p: string) => p.replace(/--to-ports (\d+)/, (_, n) => `--to-ports ${(Number(n) + 1) % 65536}`);

  test("Linkerd: an extra rule, another redirect port, a lost rule, the other family, an option in a value", async () => {
    const { c, r } = await redirected("linkerd");
    const p = r.payload!;
    const cases: [string, string][] = [
      ["extra rule", addToNat(p, "-A OUTPUT -j ACCEPT")],
      ["other port", otherPort(p)],
      [
        "lost rule",
        p
          .split("\n")
          .filter((l) => !l.includes("redirect-all-outgoing"))
          .join("\n"),
      ],
      ["accept instead of return", p.replace(/(ignore-loopback" )-j RETURN/, "$1-j ACCEPT")],
      ["option as value", p.replace(/-o lo/, "-o -j")],
      ["stray line", addToNat(p, "ACCEPT")],
      ["other family", p.replace(/-o lo -m comment/, "-s fd00::/8 -m comment")],
    ];
    for (const [what, payload] of cases) {
      expect({ what, problems: judge(c, tamper(r, { payload })).length > 0 }).toEqual({ what, problems: true });
    }
  });

  test("Istio: a capture target that is not configured, a missing exclusion", async () => {
    const { c, r } = await redirected("istio");
    const p = r.payload!;
    expect(judge(c, tamper(r, { payload: otherPort(p) })).length).toBeGreaterThan(0);
    expect(
      judge(c, tamper(r, { payload: addToNat(p, "-A ISTIO_OUTPUT -d 203.0.113.0/24 -j RETURN") })).length,
    ).toBeGreaterThan(0);
    expect(judge(c, tamper(r, { payload: addToNat(p, "-A ISTIO_OUTPUT -o eth9 -j RETURN") })).length).toBeGreaterThan(
      0,
    );
    expect(
      judge(
        c,
        tamper(r, {
          payload: p
            .split("\n")
            .filter((l) => !l.includes("--uid-owner"))
            .join("\n"),
        }),
      ).length,
    ).toBeGreaterThan(0);
  });

  test("nftables: the same case on the other backend passes, and tampered scripts do not", async () => {
    for (const mesh of ["linkerd", "istio"] as const) {
      const { c } = await redirected(mesh);
      const v = nftablesVariant(c)!;
      expect(v).toBeDefined();
      h.serve(v);
      const r = await h.runInProcess(v);
      h.release(v);
      expect(r.payload!.startsWith("# nft -f - (IPv4")).toBe(true);
      expect(judge(v, r)).toEqual([]);
      const p = r.payload!;
      const tampered: [string, string][] = [
        [
          "extra rule",
          mesh === "linkerd"
            ? p.replace(/(\tchain nat_OUTPUT \{\n\t\t[^\n]+\n)/, "$1\t\taccept\n")
            : p.replace(/(\tchain nat_ISTIO_OUTPUT \{\n)/, "$1\t\ttcp dport 65000 return\n"),
        ],
        ["other port", p.replace(/redirect to :(\d+)/, (_, n) => `redirect to :${(Number(n) + 1) % 65536}`)],
        ["lost rule", p.replace(/\n[^\n]*redirect to :[^\n]*/, "")],
        ["a statement in a name", p.replace(/oifname "lo"/, 'oifname "lo" accept')],
        ["a quote inside a name", p.replace(/oifname "lo"/, 'oifname "l"o"')],
        ["a statement after the comment", p.replace(/(\t\t[^\n]*?)$/m, "$1 accept")],
        ["another table", p.replace("add table ip meshcni\n", "add table ip meshcni\nflush ruleset\n")],
        ["a base chain at another priority", p.replace("priority -100;", "priority -200;")],
        ["an address of the other family", p.replace(/(\t\t)(meta l4proto tcp redirect)/, "$1ip6 daddr ::1 $2")],
      ];
      for (const [what, payload] of tampered) {
        expect({ mesh, what, changed: payload !== p }).toEqual({ mesh, what, changed: true });
        expect({ mesh, what, problems: judge(v, tamper(r, { payload })).length > 0 }).toEqual({
          mesh,
          what,
          problems: true,
        });
      }
    }
  });

  test("crashes, stack traces, undocumented codes, writes on rejection, hangs", async () => {
    const { c, r } = await redirected("linkerd");
    const error = JSON.stringify({ cniVersion: JSON.parse(r.stdout).cniVersion, code: 100, msg: "internal error" });
    expect(judge(c, tamper(r, { stdout: `${r.stdout}\n    at add (run.ts:1:1)` })).length).toBeGreaterThan(0);
    expect(judge(c, tamper(r, { exitCode: 1, stdout: error, payload: undefined })).length).toBeGreaterThan(0);
    expect(judge(c, tamper(r, { exitCode: 1, stdout: error.replace("100", "7") })).length).toBeGreaterThan(0);
    expect(judge(c, tamper(r, { exitCode: null, crash: "SIGSEGV" })).length).toBeGreaterThan(0);
    expect(judge(c, tamper(r, { exitCode: null, timedOut: true })).length).toBeGreaterThan(0);
    expect(judge(c, tamper(r, { stdout: JSON.stringify({ cniVersion: "0.4.0" }) })).length).toBeGreaterThan(0);
  });
});

describe("the agent-planned judging catches what it is there to catch", () => {
  /** The first strong ADD case the agent plans with rules. */
  function meshedCase(): FuzzCase {
    for (let i = 0; ; i++) {
      const c = buildCase(SEED, i);
      const e = c.expect;
      const strong = !e.weak && e.codes.length === 0;
      if (c.env.CNI_COMMAND === "ADD" && strong && e.rules && e.rules.mesh === "linkerd") return c;
    }
  }

  async function tampered(change: (answer: any) => void): Promise<string[]> {
    const c = meshedCase();
    h.serve(c);
    const alone = await h.runInProcess(c);
    h.release(c);
    const agent = startAgentFuzz(h.kubeconfig, {
      tamper: (body) => {
        const a = JSON.parse(body);
        change(a);
        return JSON.stringify(a);
      },
    });
    try {
      const run = (await agent.run(c))!;
      const { own, versus } = judgeAgent(c, run, alone);
      return [...own, ...versus];
    } finally {
      agent.close();
    }
  }

  test("an honest answer passes", async () => {
    expect(await tampered(() => {})).toEqual([]);
  });

  test("another redirect port, a lost rule, no rules, another exit, an error code 100", async () => {
    const port = (a: any) => {
      const next = (_: string, p: string) => `"a":"redirect","port":${(Number(p) + 1) % 65536}`;
      const text = JSON.stringify(a.apply.plan).replace(/"a":"redirect","port":(\d+)/, next);
      a.apply.plan = JSON.parse(text);
    };
    const lost = (a: any) => a.apply.plan.families[0].rules.pop();
    const none = (a: any) => {
      delete a.apply;
      a.summary.outcome = "skipped";
    };
    const failed = (a: any) => {
      delete a.apply;
      a.exitCode = 1;
      a.stdout = JSON.stringify({ cniVersion: "1.0.0", code: 100, msg: "internal" });
      a.summary = { ...a.summary, outcome: "failed", code: 100 };
    };
    const changes = [
      ["port", port],
      ["lost rule", lost],
      ["no rules", none],
      ["code 100", failed],
    ] as const;
    for (const [what, change] of changes) {
      expect({ what, caught: (await tampered(change)).length > 0 }).toEqual({ what, caught: true });
    }
  });
});
