// The agent's counters and their Prometheus text rendering (/metrics on the health port). The
// counters change as reports and lookups arrive; rendering is a pure function of a snapshot of
// them and of the agent's and the cache's state.
import type { Report } from "../../wire/protocol.ts";
import { LOOKUP_SOURCES } from "./report.ts";
import type { CacheStatus, LookupResult } from "../types.ts";

/** Upper bounds (seconds) of the ADD duration histogram's buckets. */
export const ADD_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10] as const;

/** How the agent answered the plugin's pod lookups. */
export type LookupAnswer = "cache" | "api" | "not_found" | "unavailable";

export interface Counters {
  /** `COMMAND outcome` -> reports. */
  requests: Record<string, number>;
  /** CNI error code -> failed commands. */
  errors: Record<string, number>;
  /** Cumulative counts per ADD_BUCKETS bound, then the sum (seconds) and count. */
  addDuration: { buckets: number[]; sum: number; count: number };
  /** Where the plugin got the pod from, by report. */
  pluginLookups: Record<string, number>;
  /** The agent's answers on the socket. */
  agentLookups: Record<LookupAnswer, number>;
  badRequests: number;
  /** ADDs the agent planned for the plugin (POST /v1/add answered 200). */
  addsPlanned: number;
  /** Of those, ADDs whose rules the agent applied itself in the pod's namespace. */
  addsApplied: number;
  /** ADDs the agent left to the plugin (409: another version, a pod it cannot answer, ...). */
  addsDeclined: number;
  /** ADDs the agent declined because the state folder held its bound of records (--max-records). */
  recordsFull: number;
  /** DEL reports for a container the agent holds no record of: counted, not printed. */
  unrecordedDelReports: number;
  /** Lines printed from the plugin's fallback log. */
  fallbackLogLines: number;
  resyncs: number;
  /** Periodic resyncs that found the chain, binary or kubeconfig not current (an event missed). */
  resyncRepairs: number;
}

export function newCounters(): Counters {
  return {
    // The common series exist from the start, so a rate over them works before the first pod.
    requests: { "ADD meshed": 0, "ADD skipped": 0, "ADD failed": 0 },
    errors: {},
    addDuration: { buckets: ADD_BUCKETS.map(() => 0), sum: 0, count: 0 },
    pluginLookups: Object.fromEntries(LOOKUP_SOURCES.map((s) => [s, 0])),
    agentLookups: { cache: 0, api: 0, not_found: 0, unavailable: 0 },
    badRequests: 0,
    addsPlanned: 0,
    addsApplied: 0,
    addsDeclined: 0,
    recordsFull: 0,
    unrecordedDelReports: 0,
    fallbackLogLines: 0,
    resyncs: 0,
    resyncRepairs: 0,
  };
}

export function countReport(c: Counters, r: Report): void {
  const key = `${r.command} ${r.outcome}`;
  c.requests[key] = (c.requests[key] ?? 0) + 1;
  if (r.outcome === "failed" && r.code !== undefined) c.errors[String(r.code)] = (c.errors[String(r.code)] ?? 0) + 1;
  if (r.lookup !== undefined) c.pluginLookups[r.lookup] = (c.pluginLookups[r.lookup] ?? 0) + 1;
  if (r.command === "ADD") {
    const s = r.durationMs / 1000;
    const h = c.addDuration;
    ADD_BUCKETS.forEach((le, i) => {
      if (s <= le) h.buckets[i]!++;
    });
    h.sum += s;
    h.count++;
  }
}

export function countLookup(c: Counters, r: LookupResult): void {
  c.agentLookups[r.ok ? r.source : r.status === 404 ? "not_found" : "unavailable"]++;
}

export interface MetricsInput {
  counters: Counters;
  version: string;
  node: string;
  /** The chain, the binary and the kubeconfig are current. */
  ready: boolean;
  /** Undefined while the agent runs without a watch cache. */
  cache?: CacheStatus;
  /** Pods repair evicted or deleted. */
  repairs: number;
  /** Pods of the node with evidence of bypassing the mesh that repair has not evicted or deleted (yet). */
  bypassing?: number;
  /** Meshed pods of the node with no record of the ADD of their sandbox. */
  unverified?: number;
  /** Evictions a PodDisruptionBudget refused. */
  refusals?: number;
  /** Files in the records folder, as the agent holds them. */
  records?: number;
  /** Verification (internal/agent/verify/): undefined when the agent does not apply rules. */
  verify?: { runs: number; missing: number; rewritten: number; failures: number };
}

/** Label values: backslash, double quote and line feed escaped, as the text format requires. */
function label(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

function num(n: number): string {
  if (Number.isInteger(n)) return String(n);
  return String(Number(n.toFixed(6)));
}

type Sample = [labels: Record<string, string>, value: number];

function family(
  name: string,
  type: "counter" | "gauge" | "histogram",
  help: string,
  samples: Sample[],
  suffix = "",
): string[] {
  const head = [`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`];
  return [...head, ...samples.map(([labels, value]) => `${name}${suffix}${renderLabels(labels)} ${num(value)}`)];
}

function renderLabels(labels: Record<string, string>): string {
  const entries = Object.entries(labels);
  return entries.length === 0 ? "" : `{${entries.map(([k, val]) => `${k}="${label(val)}"`).join(",")}}`;
}

const sorted = (o: Record<string, number>) => Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));

/** The Prometheus text exposition format (version 0.0.4), families in a fixed order. */
export function renderMetrics(m: MetricsInput): string {
  const c = m.counters;
  const h = c.addDuration;
  const resources = [
    ["pods", m.cache?.pods],
    ["namespaces", m.cache?.namespaces],
  ] as const;
  const lines = [
    ...family("meshcni_agent_info", "gauge", "The agent's version and node.", [
      [{ version: m.version, node: m.node }, 1],
    ]),
    ...family(
      "meshcni_plugin_requests_total",
      "counter",
      "Plugin commands reported to the agent, by command and outcome.",
      sorted(c.requests).map(([k, val]) => {
        const [command, outcome] = k.split(" ") as [string, string];
        return [{ command, outcome }, val];
      }),
    ),
    ...family(
      "meshcni_plugin_errors_total",
      "counter",
      "Plugin commands that answered a CNI error, by error code.",
      sorted(c.errors).map(([code, val]) => [{ code }, val]),
    ),
    "# HELP meshcni_plugin_add_duration_seconds How long the plugin's ADD took, as it reported.",
    "# TYPE meshcni_plugin_add_duration_seconds histogram",
    ...ADD_BUCKETS.map((le, i) => `meshcni_plugin_add_duration_seconds_bucket{le="${le}"} ${h.buckets[i]}`),
    `meshcni_plugin_add_duration_seconds_bucket{le="+Inf"} ${h.count}`,
    `meshcni_plugin_add_duration_seconds_sum ${num(h.sum)}`,
    `meshcni_plugin_add_duration_seconds_count ${h.count}`,
    ...family(
      "meshcni_plugin_lookups_total",
      "counter",
      "Where the plugin got the pod from (agent-cache, agent-api, kubeconfig, none), by report.",
      LOOKUP_SOURCES.map((source) => [{ source }, c.pluginLookups[source] ?? 0]),
    ),
    ...family(
      "meshcni_api_fallbacks_total",
      "counter",
      "Reports whose pod came from the plugin's own kubeconfig GET (the agent did not answer).",
      [[{}, c.pluginLookups.kubeconfig ?? 0]],
    ),
    ...family(
      "meshcni_agent_lookups_total",
      "counter",
      "The agent's answers to the plugin's pod lookups: from the cache, from its own GET, not found, unavailable.",
      (["cache", "api", "not_found", "unavailable"] as const).map((answer) => [{ answer }, c.agentLookups[answer]]),
    ),
    ...family(
      "meshcni_agent_bad_requests_total",
      "counter",
      "Requests on the agent's socket it could not use (answered 400, 405 or 413).",
      [[{}, c.badRequests]],
    ),
    ...family(
      "meshcni_agent_adds_planned_total",
      "counter",
      "ADDs the agent planned for the plugin (the plugin only applied the rules).",
      [[{}, c.addsPlanned]],
    ),
    ...family(
      "meshcni_agent_adds_applied_total",
      "counter",
      "Planned ADDs whose rules the agent applied itself in the pod's network namespace (the plugin started no process).",
      [[{}, c.addsApplied]],
    ),
    ...family(
      "meshcni_agent_adds_declined_total",
      "counter",
      "ADDs the agent left to the plugin (a pod it could not answer, a Service or the pod's addresses needed).",
      [[{}, c.addsDeclined]],
    ),
    ...family(
      "meshcni_agent_records",
      "gauge",
      "Files in the state folder's records folder (records and files that are not), as the agent holds them.",
      [[{}, m.records ?? 0]],
    ),
    ...family(
      "meshcni_agent_records_full_total",
      "counter",
      "ADDs the agent left to the plugin because the state folder held its bound of records (--max-records).",
      [[{}, c.recordsFull]],
    ),
    ...family(
      "meshcni_agent_unrecorded_del_reports_total",
      "counter",
      "DEL reports for a container the agent holds no record of " +
        "(counted here, not printed, not in meshcni_plugin_requests_total).",
      [[{}, c.unrecordedDelReports]],
    ),
    ...family(
      "meshcni_agent_fallback_log_lines_total",
      "counter",
      "Lines printed from the plugin's fallback log (written while the agent was not answering).",
      [[{}, c.fallbackLogLines]],
    ),
    ...family("meshcni_agent_cached_pods", "gauge", "Pods of this node in the agent's watch cache.", [
      [{}, m.cache?.pods.objects ?? 0],
    ]),
    ...family("meshcni_agent_cached_namespaces", "gauge", "Namespaces in the agent's watch cache.", [
      [{}, m.cache?.namespaces.objects ?? 0],
    ]),
    ...family(
      "meshcni_agent_cache_synced",
      "gauge",
      "1 while the list+watch of a resource is in sync.",
      resources.map(([resource, w]) => [{ resource }, w?.synced ? 1 : 0]),
    ),
    ...family(
      "meshcni_agent_cache_lists_total",
      "counter",
      "Full lists of a resource (the first, and relists).",
      resources.map(([resource, w]) => [{ resource }, w?.lists ?? 0]),
    ),
    ...family(
      "meshcni_agent_cache_relists_total",
      "counter",
      "Relists forced by a 410 Gone (an expired resourceVersion).",
      resources.map(([resource, w]) => [{ resource }, w?.expired ?? 0]),
    ),
    ...family(
      "meshcni_agent_cache_watch_restarts_total",
      "counter",
      "Watches started again after the first.",
      resources.map(([resource, w]) => [{ resource }, w?.watchRestarts ?? 0]),
    ),
    ...family(
      "meshcni_installer_ready",
      "gauge",
      "1 while the chain, the plugin binary and its kubeconfig are all current.",
      [[{}, m.ready ? 1 : 0]],
    ),
    ...family(
      "meshcni_installer_resyncs_total",
      "counter",
      "Periodic resyncs of the chain, the binary and the kubeconfig.",
      [[{}, c.resyncs]],
    ),
    ...family(
      "meshcni_installer_resync_repairs_total",
      "counter",
      "Periodic resyncs that found something to put right (a change no watch event announced).",
      [[{}, c.resyncRepairs]],
    ),
    ...family(
      "meshcni_repairs_total",
      "counter",
      "Pods the agent evicted, deleted or wrote the rules of in place, on evidence of bypassing the mesh " +
        "(their mesh validator's latest run found no redirect, or their rules missing in their namespace).",
      [[{}, m.repairs]],
    ),
    ...family(
      "meshcni_repair_refusals_total",
      "counter",
      "Evictions of bypassing pods that the API server refused (429: " +
        "a PodDisruptionBudget); each is tried again later.",
      [[{}, m.refusals ?? 0]],
    ),
    ...family(
      "meshcni_agent_bypassing_pods",
      "gauge",
      "Pods of this node with evidence of bypassing the mesh (their mesh validator's latest run found no " +
        "redirect, or their rules missing in their namespace) not evicted, deleted or rewritten (yet): " +
        "--repair off, grace period, rate limit, a refused eviction.",
      [[{}, m.bypassing ?? 0]],
    ),
    ...family(
      "meshcni_agent_unverified_pods",
      "gauge",
      "Meshed pods of this node with no record of the ADD of their sandbox (reported, never removed for that).",
      [[{}, m.unverified ?? 0]],
    ),
    ...family(
      "meshcni_verify_runs_total",
      "counter",
      "Checks of a meshed pod's rules in its network namespace (the backend's CHECK, run by the agent).",
      [[{}, m.verify?.runs ?? 0]],
    ),
    ...family(
      "meshcni_verify_missing_total",
      "counter",
      "Checks that found a meshed pod's rules missing or altered in its network namespace.",
      [[{}, m.verify?.missing ?? 0]],
    ),
    ...family(
      "meshcni_verify_rewrites_total",
      "counter",
      "Pods whose rules the agent wrote back in their network namespace (--repair in-place).",
      [[{}, m.verify?.rewritten ?? 0]],
    ),
    ...family(
      "meshcni_verify_write_failures_total",
      "counter",
      "Writes of a pod's rules back in its network namespace that failed.",
      [[{}, m.verify?.failures ?? 0]],
    ),
  ];
  return `${lines.join("\n")}\n`;
}
