// The health port: /healthz and /readyz for the DaemonSet's probes, /metrics (Prometheus text
// format) and /status (JSON) for people and scrapers.
import type { Readiness } from "../install/installer.ts";

export interface HealthServer {
  port: number;
  stop(): void;
}

export interface HealthRoutes {
  check(): Readiness;
  /** The Prometheus text; absent: no /metrics. */
  metrics?(): string;
  /** The /status document; absent: no /status. */
  status?(): unknown;
}

const PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8";

export function serveHealth(port: number, routes: HealthRoutes): HealthServer {
  const endpoints = [
    "/healthz",
    "/readyz",
    ...(routes.metrics ? ["/metrics"] : []),
    ...(routes.status ? ["/status"] : []),
  ];
  const server = Bun.serve({
    port,
    // Both families: in an IPv6-only cluster the kubelet probes the pod's IPv6 address.
    hostname: "::",
    fetch(req) {
      const path = new URL(req.url).pathname;
      if (path === "/healthz") return new Response("ok\n");
      if (path === "/readyz") {
        let r: Readiness;
        try {
          r = routes.check();
        } catch (e) {
          r = { ready: false, problems: [(e as Error).message] };
        }
        return r.ready
          ? new Response("ready\n")
          : new Response(`not ready:\n${r.problems.map((p) => `- ${p}\n`).join("")}`, { status: 503 });
      }
      if (path === "/metrics" && routes.metrics)
        return new Response(routes.metrics(), { headers: { "Content-Type": PROMETHEUS_TEXT } });
      if (path === "/status" && routes.status) {
        return new Response(`${JSON.stringify(routes.status(), null, 2)}\n`, {
          headers: { "Content-Type": "application/json" },
        });
      }
      return new Response(`not found: try ${endpoints.join(", ")}\n`, { status: 404 });
    },
    error(e) {
      return new Response(`failed: ${e.message}\n`, { status: 500 });
    },
  });
  return { port: server.port ?? port, stop: () => void server.stop(true) };
}
