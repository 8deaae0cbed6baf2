// What the agent reads from the plugin (a Report, checked strictly) and what it prints for it on
// stdout, where `kubectl logs` shows it: the plugin's own lines, then one summary line naming the
// pod. Everything the plugin sends may carry pod-controlled text (names, annotation values in
// error messages), so nothing is printed without escaping: no line breaks, no terminal escapes,
// no bidirectional overrides. Pure.
import * as v from "valibot";
import { escapeText, quoteValue } from "../../text/escape.ts";
import { COMMANDS, LOOKUP_SOURCES, OUTCOMES, type Report, REPORT_LIMITS as L } from "../../wire/protocol.ts";
import type { LogLevel } from "../../log/levels.ts";

export { COMMANDS, LOOKUP_SOURCES, OUTCOMES };

/** The largest report body the agent reads (its lines included). */
export const MAX_REPORT_BYTES = 1 << 20;

const text = (max: number) => v.pipe(v.string(), v.maxLength(max, `longer than ${max} characters`));
const count = (max: number) => v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(max));

/** Unknown keys are kept and ignored: a newer plugin may send more. */
export const ReportSchema = v.looseObject({
  v: v.literal(1),
  command: v.picklist(COMMANDS),
  containerId: v.optional(text(256)),
  pod: v.optional(v.looseObject({ namespace: text(L.name), name: text(L.name), uid: v.optional(text(L.uid)) })),
  outcome: v.picklist(OUTCOMES),
  reason: text(L.reason),
  code: v.optional(count(L.code)),
  rules: v.optional(count(L.rules)),
  backend: v.optional(text(64)),
  lookup: v.optional(v.picklist(LOOKUP_SOURCES)),
  durationMs: v.pipe(v.number(), v.finite(), v.minValue(0), v.maxValue(86_400_000)),
  lines: v.pipe(v.array(text(L.line)), v.maxLength(L.lines, `more than ${L.lines} lines`)),
  time: text(64),
  version: text(128),
});

export type ParsedReport = { ok: true; report: Report } | { ok: false; error: string };

export function parseReport(body: string): ParsedReport {
  let raw: unknown;
  try {
    raw = JSON.parse(body);
  } catch (e) {
    return { ok: false, error: `not JSON: ${(e as Error).message}` };
  }
  const r = v.safeParse(ReportSchema, raw);
  if (!r.success) {
    const issue = r.issues[0]!;
    const path = issue.path?.map((p) => String(p.key)).join(".");
    return { ok: false, error: `not a report: ${path ? `${path}: ` : ""}${issue.message}` };
  }
  return { ok: true, report: r.output as Report };
}

// ---- escaping: internal/text/escape.ts, shared with the plugin's logger -----------------------

export { escapeText, quoteValue };

// ---- what is printed --------------------------------------------------------------------------

export type Level = LogLevel;

export interface OutputLine {
  level: Level;
  text: string;
}

const PLUGIN_PREFIX = "meshcni:";

/** One of the plugin's lines: escaped, its `meshcni:` prefix kept (or added), its level read from it. */
export function pluginLine(raw: string): OutputLine {
  const line = escapeText(raw.replace(/\r?\n$/, ""));
  const text = line.startsWith(PLUGIN_PREFIX) ? line : `${PLUGIN_PREFIX} ${line}`;
  const level = /^meshcni: (debug|info|warn|error)\b/.exec(text)?.[1] as Level | undefined;
  return { level: level ?? "info", text };
}

function formatMs(ms: number): string {
  return ms < 10 ? `${Math.round(ms * 10) / 10}ms` : `${Math.round(ms)}ms`;
}

/** The summary line: command, pod, outcome and reason, rules, backend, lookup, duration, error code. */
export function summaryLine(r: Report, agentVersion: string): OutputLine {
  const fields: string[] = ["plugin", r.command];
  if (r.pod) fields.push(`pod=${quoteValue(`${r.pod.namespace}/${r.pod.name}`)}`);
  fields.push(`outcome=${r.outcome}`);
  if (r.code !== undefined) fields.push(`code=${r.code}`);
  if (r.rules !== undefined) fields.push(`rules=${r.rules}`);
  if (r.backend !== undefined) fields.push(`backend=${quoteValue(r.backend)}`);
  if (r.lookup !== undefined) fields.push(`lookup=${r.lookup}`);
  fields.push(`duration=${formatMs(r.durationMs)}`);
  if (r.pod?.uid !== undefined) fields.push(`uid=${quoteValue(r.pod.uid)}`);
  if (r.containerId !== undefined) fields.push(`container=${quoteValue(r.containerId)}`);
  if (r.version !== agentVersion) fields.push(`plugin_version=${quoteValue(r.version)}`);
  fields.push(`reason=${quoteValue(r.reason)}`);
  return { level: r.outcome === "failed" ? "error" : "info", text: fields.join(" ") };
}

/** Everything printed for one report: the plugin's lines, then the summary. */
export function renderReport(r: Report, agentVersion: string): OutputLine[] {
  return [...r.lines.map(pluginLine), summaryLine(r, agentVersion)];
}

/**
 * The fallback log the plugin wrote while the agent was down (`file` names it), between a line
 * saying where it comes from and one saying where it ends. Empty when there is nothing in it.
 */
export function renderFallbackLog(file: string, content: string): OutputLine[] {
  const lines = content.split("\n");
  if (lines.at(-1) === "") lines.pop();
  const kept = lines.filter((l) => l.trim() !== "");
  if (kept.length === 0) return [];
  return [
    {
      level: "info",
      text:
        `the plugin wrote ${kept.length} line(s) ` +
        `to ${quoteValue(file)} while the agent was not answering; they follow`,
    },
    ...kept.map(pluginLine),
    { level: "info", text: `end of ${quoteValue(file)}` },
  ];
}
