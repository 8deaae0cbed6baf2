// A checker for Prometheus' text exposition format (version 0.0.4), strict enough to catch a
// malformed line: every sample after its family's HELP and TYPE, names and label values as the
// format allows, counters named _total, histogram series under their family.
import { expect } from "bun:test";

/** The families (name -> type) and the samples (name{labels} -> value) of an exposition. */
export function checkExposition(text: string): { families: Map<string, string>; samples: Map<string, number> } {
  const families = new Map<string, string>();
  const samples = new Map<string, number>();
  const helped = new Set<string>();
  expect(text.endsWith("\n")).toBe(true);
  for (const line of text.slice(0, -1).split("\n")) {
    const help = /^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) \S.*$/.exec(line);
    if (help) {
      expect(helped.has(help[1]!)).toBe(false);
      helped.add(help[1]!);
      continue;
    }
    const type = /^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$/.exec(line);
    if (type) {
      expect(helped.has(type[1]!)).toBe(true);
      families.set(type[1]!, type[2]!);
      continue;
    }
    const m =
      /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*",?)*\})? (-?[0-9.e+]+|\+Inf)$/.exec(
        line,
      );
    if (!m) throw new Error(`not an exposition line: ${JSON.stringify(line)}`);
    const family = m[1]!.replace(/_(bucket|sum|count)$/, (s) =>
      families.get(m[1]!.slice(0, -s.length)) === "histogram" ? "" : s,
    );
    expect(families.has(family)).toBe(true);
    if (families.get(family) === "counter") expect(m[1]!.endsWith("_total")).toBe(true);
    samples.set(`${m[1]}${m[2] ?? ""}`, Number(m[3]));
  }
  return { families, samples };
}
