// What the plugin tells the node agent about one command (protocol.ts's Report) and, when the
// agent does not take it, the same in lines for the fallback log. Pure.
import type { Command, Report } from "./protocol.ts";
import type { PodRecord } from "./state.ts";
import { parseK8sArgs } from "../cni/k8s-args.ts";
import { isPlainValue } from "../text/escape.ts";

/**
 * Why a DEL whose record says "skipped" runs nothing (plugin/records.ts, and plugin/io/report.ts's
 * DEL, which loads this module and not records.ts).
 */
export const skippedReason = (record: PodRecord) => `the pod got no rules at ADD (${record.reason})`;

/**
 * What DEL of a meshed pod does not do: remove its rules. The runtime destroys the pod's network
 * namespace right after DEL, and the rules with it (Linkerd's and Istio's CNI plugins do nothing
 * on DEL either); an ADD into a namespace that is kept replaces them.
 */
export const NO_REMOVAL = "the record goes; the rules go with the pod's network namespace";

/** What plugin/run.ts learns while it runs a command; cmd/plugin.ts turns it into a Report. */
export type Summary = Pick<Report, "outcome" | "reason" | "code" | "rules" | "backend" | "lookup" | "pod">;

/** `s` as a report carries it: a reason, and the pod CNI_ARGS names when the command found none. */
export function completeSummary(s: Summary, command: string, cniArgs: string | undefined): Summary {
  if (!s.reason) s.reason = `${command} succeeded`;
  if (!s.pod) {
    const pod = podOfArgs(cniArgs);
    if (pod) s.pod = pod;
  }
  return s;
}

/** The pod CNI_ARGS names, for a report that has none from the command itself. */
export function podOfArgs(cniArgs: string | undefined): Summary["pod"] {
  try {
    const k = parseK8sArgs(cniArgs);
    if (k.podName && k.podNamespace)
      return { namespace: k.podNamespace, name: k.podName, ...(k.podUid ? { uid: k.podUid } : {}) };
  } catch {
    // no pod
  }
  return undefined;
}

export function buildReport(o: {
  command: Command;
  containerId?: string | undefined;
  summary: Summary;
  lines: string[];
  started: Date;
  durationMs: number;
  version: string;
}): Report {
  const s = o.summary;
  // Loops, not flatMap/filter/map: on the plugin's hot path each callback builtin is compiled on
  // its first use in a fresh process (perf: see docs/benchmarks.md).
  const lines: string[] = [];
  for (const l of o.lines) for (const p of l.split("\n")) if (p !== "") lines.push(p.slice(0, 16_384));
  const r: Report = {
    v: 1,
    command: o.command,
    outcome: s.outcome,
    reason: s.reason,
    durationMs: Math.max(0, Math.round(o.durationMs * 1000) / 1000),
    lines: lines.length > 2000 ? lines.slice(-2000) : lines,
    time: o.started.toISOString(),
    version: o.version,
  };
  if (o.containerId !== undefined) r.containerId = o.containerId.slice(0, 256);
  if (s.pod) r.pod = s.pod;
  if (s.code !== undefined) r.code = s.code;
  if (s.rules !== undefined) r.rules = s.rules;
  if (s.backend !== undefined) r.backend = s.backend;
  if (s.lookup !== undefined) r.lookup = s.lookup;
  r.reason = r.reason.slice(0, 16_384);
  return r;
}

/** A value safe between spaces on one line: bare when escape.ts's isPlainValue allows, else as JSON. */
const field = (s: string) => (isPlainValue(s) ? s : JSON.stringify(s));

/** The report as fallback-log lines: the plugin's own lines, then one summary line, each "meshcni: ...". */
export function fallbackText(r: Report): string {
  const f = [
    `${r.outcome === "failed" ? "error" : "info"} ` +
      `${r.command}${r.containerId ? ` ${r.containerId.slice(0, 12)}` : ""}: summary`,
  ];
  if (r.pod) f.push(`pod=${field(`${r.pod.namespace}/${r.pod.name}`)}`);
  f.push(`outcome=${r.outcome}`);
  if (r.code !== undefined) f.push(`code=${r.code}`);
  if (r.rules !== undefined) f.push(`rules=${r.rules}`);
  if (r.backend !== undefined) f.push(`backend=${field(r.backend)}`);
  if (r.lookup !== undefined) f.push(`lookup=${r.lookup}`);
  f.push(`duration=${Math.round(r.durationMs)}ms`, `time=${r.time}`);
  if (r.pod?.uid !== undefined) f.push(`uid=${field(r.pod.uid)}`);
  if (r.containerId !== undefined) f.push(`container=${field(r.containerId)}`);
  f.push(`reason=${field(r.reason)}`);
  const lines = r.lines.map((l) => (l.startsWith("meshcni:") ? l : `meshcni: ${l}`));
  return `${[...lines, `meshcni: ${f.join(" ")}`].join("\n")}\n`;
}
