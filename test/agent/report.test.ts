// What the agent prints for the plugin: each report's lines and its summary (goldens beside the
// reports in testdata/agent/reports/), the fallback log, and the escaping that keeps
// pod-controlled text from forging lines or driving a terminal.
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import {
  escapeText,
  parseReport,
  quoteValue,
  renderFallbackLog,
  renderReport,
} from "../../internal/agent/observe/report.ts";
import { expectGolden, repoPath } from "../support/golden.ts";

const DIR = "testdata/agent/reports";
const AGENT_VERSION = "0.1.0";
const render = (lines: { level: string; text: string }[]) =>
  lines.map((l) => `${l.level.padEnd(5)} ${l.text}\n`).join("");

describe("reports", () => {
  for (const name of readdirSync(repoPath(DIR)).filter((n) => n.endsWith(".json"))) {
    test(name, () => {
      const parsed = parseReport(readFileSync(repoPath(DIR, name), "utf8"));
      if (!parsed.ok) throw new Error(parsed.error);
      const out = render(renderReport(parsed.report, AGENT_VERSION));
      expectGolden(`${DIR}/${name.replace(/\.json$/, ".golden.txt")}`, out);
      // One printed line per plugin line, plus the summary: nothing the pod wrote splits a line.
      expect(out.split("\n").length - 1).toBe(parsed.report.lines.length + 1);
      // Nothing a terminal would act on, nothing that ends or reorders a line.
      expect(out.replace(/\n/g, "")).not.toMatch(
        /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200b]/,
      );
      // The summary names the pod and the outcome.
      const summary = out.trimEnd().split("\n").at(-1)!;
      expect(summary).toContain(`plugin ${parsed.report.command}`);
      expect(summary).toContain(`outcome=${parsed.report.outcome}`);
      if (parsed.report.pod && /^[a-z0-9.-]+$/.test(parsed.report.pod.name))
        expect(summary).toContain(`pod=${parsed.report.pod.namespace}/${parsed.report.pod.name}`);
      for (const l of out.trimEnd().split("\n").slice(0, -1)) expect(l.slice(6)).toStartWith("meshcni:");
    });
  }

  test("a failed ADD's summary is an error and carries the code and the whole reason", () => {
    const parsed = parseReport(readFileSync(repoPath(DIR, "failed-add.json"), "utf8"));
    if (!parsed.ok) throw new Error(parsed.error);
    const summary = renderReport(parsed.report, AGENT_VERSION).at(-1)!;
    expect(summary.level).toBe("error");
    expect(summary.text).toContain("code=11");
    expect(summary.text).toContain("connect ECONNREFUSED; the runtime will retry the pod");
  });

  test("what is not a report is refused with the reason", () => {
    const ok = JSON.parse(readFileSync(repoPath(DIR, "meshed-add.json"), "utf8"));
    const bad: [unknown, RegExp][] = [
      ["{", /not JSON/],
      [[], /not a report/],
      [{ ...ok, v: 2 }, /^not a report: v: /],
      [{ ...ok, command: "VERSION" }, /command/],
      [{ ...ok, outcome: "great" }, /outcome/],
      [{ ...ok, code: -1 }, /code/],
      [{ ...ok, durationMs: "fast" }, /durationMs/],
      [{ ...ok, lookup: "dns" }, /lookup/],
      [{ ...ok, lines: "one" }, /lines/],
      [{ ...ok, lines: [1] }, /lines\.0/],
      [{ ...ok, lines: Array(2001).fill("meshcni: x") }, /more than 2000 lines/],
      [{ ...ok, pod: { namespace: "a" } }, /pod\.name/],
      [{ ...ok, reason: "x".repeat(20_000) }, /reason: longer than 16384/],
    ];
    for (const [body, why] of bad) {
      const r = parseReport(typeof body === "string" ? body : JSON.stringify(body));
      expect(r.ok).toBe(false);
      if (!r.ok) expect(r.error).toMatch(why);
    }
    // Keys a newer plugin adds are ignored.
    expect(parseReport(JSON.stringify({ ...ok, newField: { x: 1 } })).ok).toBe(true);
  });
});

describe("escaping", () => {
  test("line breaks, terminal escapes, bidi overrides and invisible characters become visible escapes", () => {
    expect(escapeText("a\nb\r\tc")).toBe("a\\nb\\r\\tc");
    expect(escapeText("\u001b[31mred\u001b[0m")).toBe("\\x1b[31mred\\x1b[0m");
    expect(escapeText("\u009b31m")).toBe("\\x9b31m");
    expect(escapeText("\u202egnp.exe")).toBe("\\u202egnp.exe");
    expect(escapeText("a\u2028b\u2029c")).toBe("a\\u2028b\\u2029c");
    expect(escapeText("zero\u200bwidth\ufeff")).toBe("zero\\u200bwidth\\ufeff");
    expect(escapeText("lone \ud800 high, lone \udc00 low, pair \ud83d\ude00")).toBe(
      "lone \\ud800 high, lone \\udc00 low, pair \ud83d\ude00",
    );
    expect(escapeText("ünïcödé and 日本語 stay")).toBe("ünïcödé and 日本語 stay");
  });

  test("values are bare only when plainly safe; quoting cannot be closed from inside", () => {
    expect(quoteValue("emojivoto/web-1")).toBe("emojivoto/web-1");
    expect(quoteValue("")).toBe('""');
    expect(quoteValue("two words")).toBe('"two words"');
    expect(quoteValue('say "hi"')).toBe('"say \\"hi\\""');
    expect(quoteValue('end\\" outcome=meshed')).toBe('"end\\\\\\" outcome=meshed"');
    expect(quoteValue("a=b")).toBe('"a=b"');
  });
});

describe("the fallback log", () => {
  test("printed between a line naming the file and one ending it, every line escaped, the last one even half-written", () => {
    const content = readFileSync(repoPath("testdata/agent/fallback/plugin.log"), "utf8");
    expectGolden(
      "testdata/agent/fallback/plugin.log.golden.txt",
      render(renderFallbackLog("/var/run/meshcni/plugin.log", content)),
    );
  });

  test("an empty or blank file prints nothing", () => {
    expect(renderFallbackLog("/x/plugin.log", "")).toEqual([]);
    expect(renderFallbackLog("/x/plugin.log", "\n\n")).toEqual([]);
  });
});
