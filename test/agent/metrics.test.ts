// /metrics: the Prometheus text for a fixed series of reports and lookups (golden), checked to be
// well-formed exposition text: every sample after its family's HELP and TYPE, names and labels
// as the format allows, histogram buckets cumulative and ending at +Inf = count.
import { describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { countLookup, countReport, newCounters, renderMetrics } from "../../internal/agent/observe/metrics.ts";
import type { Report } from "../../internal/wire/protocol.ts";
import { parseReport } from "../../internal/agent/observe/report.ts";
import type { CacheStatus } from "../../internal/agent/types.ts";
import { expectGolden, repoPath } from "../support/golden.ts";
import { checkExposition } from "../support/prometheus.ts";

const reports: Report[] = readdirSync(repoPath("testdata/agent/reports"))
  .filter((n) => n.endsWith(".json"))
  .sort()
  .map((n) => {
    const r = parseReport(readFileSync(repoPath("testdata/agent/reports", n), "utf8"));
    if (!r.ok) throw new Error(r.error);
    return r.report;
  });

const CACHE: CacheStatus = {
  pods: { synced: true, resourceVersion: "4711", objects: 110, lists: 2, watchRestarts: 3, expired: 1 },
  namespaces: { synced: true, resourceVersion: "4702", objects: 1000, lists: 1, watchRestarts: 0, expired: 0 },
  lookups: { cache: 7, api: 1, failed: 0 },
};

describe("/metrics", () => {
  test("the text for a fixed series of reports and lookups", () => {
    const c = newCounters();
    for (const r of reports) countReport(c, r);
    countLookup(c, { ok: true, pod: {}, namespace: {}, source: "cache" });
    countLookup(c, { ok: true, pod: {}, namespace: {}, source: "api" });
    countLookup(c, { ok: false, status: 404, error: { code: 106, msg: "not found" } });
    countLookup(c, { ok: false, status: 503, error: { code: 11, msg: "unavailable" } });
    c.badRequests = 2;
    c.fallbackLogLines = 4;
    c.resyncs = 3;
    c.resyncRepairs = 1;
    const text = renderMetrics({
      counters: c,
      version: "0.1.0",
      node: "node-a",
      ready: true,
      cache: CACHE,
      repairs: 3,
      bypassing: 1,
      unverified: 4,
      refusals: 2,
    });
    expectGolden("testdata/agent/metrics.golden.txt", text);
    const { families, samples } = checkExposition(text);
    // The names the contract promises.
    for (const name of [
      "meshcni_plugin_requests_total",
      "meshcni_plugin_add_duration_seconds",
      "meshcni_agent_cached_pods",
      "meshcni_api_fallbacks_total",
      "meshcni_repairs_total",
    ]) {
      expect(families.has(name)).toBe(true);
    }
    expect(families.get("meshcni_plugin_add_duration_seconds")).toBe("histogram");
    // The values follow from the reports: 5 ADDs (meshed, failed, skipped twice, hostile failed).
    const adds = reports.filter((r) => r.command === "ADD");
    expect(samples.get("meshcni_plugin_add_duration_seconds_count")).toBe(adds.length);
    expect(samples.get('meshcni_plugin_requests_total{command="ADD",outcome="failed"}')).toBe(
      adds.filter((r) => r.outcome === "failed").length,
    );
    expect(samples.get("meshcni_api_fallbacks_total")).toBe(reports.filter((r) => r.lookup === "kubeconfig").length);
    expect(samples.get("meshcni_agent_cached_pods")).toBe(110);
    // Repair: acts, refused evictions, pods with evidence not acted on (yet), unverified pods.
    expect([families.get("meshcni_repair_refusals_total"), families.get("meshcni_agent_unverified_pods")]).toEqual([
      "counter",
      "gauge",
    ]);
    expect(
      [
        "meshcni_repairs_total",
        "meshcni_repair_refusals_total",
        "meshcni_agent_bypassing_pods",
        "meshcni_agent_unverified_pods",
      ].map((n) => samples.get(n)),
    ).toEqual([3, 2, 1, 4]);
    // Buckets are cumulative and end with +Inf = count.
    const buckets = [...samples]
      .filter(([k]) => k.startsWith("meshcni_plugin_add_duration_seconds_bucket"))
      .map(([, v]) => v);
    for (let i = 1; i < buckets.length; i++) expect(buckets[i]!).toBeGreaterThanOrEqual(buckets[i - 1]!);
    expect(buckets.at(-1)).toBe(adds.length);
    const sum = adds.reduce((a, r) => a + r.durationMs / 1000, 0);
    expect(samples.get("meshcni_plugin_add_duration_seconds_sum")).toBeCloseTo(sum, 5);
  });

  test("before any report, without a cache: every family is there, at zero", () => {
    const text = renderMetrics({ counters: newCounters(), version: "0.1.0", node: "", ready: false, repairs: 0 });
    const { samples } = checkExposition(text);
    expect(samples.get('meshcni_plugin_requests_total{command="ADD",outcome="meshed"}')).toBe(0);
    expect(samples.get("meshcni_agent_cached_pods")).toBe(0);
    expect(samples.get('meshcni_agent_cache_synced{resource="pods"}')).toBe(0);
    expect(samples.get("meshcni_installer_ready")).toBe(0);
    expect(samples.get("meshcni_repairs_total")).toBe(0);
    expect(samples.get("meshcni_agent_unverified_pods")).toBe(0);
    expect(samples.get("meshcni_repair_refusals_total")).toBe(0);
  });

  test("label values are escaped as the format says", () => {
    const text = renderMetrics({ counters: newCounters(), version: 'v"1\\2\n', node: "n", ready: true, repairs: 0 });
    expect(text).toContain('meshcni_agent_info{version="v\\"1\\\\2\\n",node="n"} 1');
    checkExposition(text);
  });
});
