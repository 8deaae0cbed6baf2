// /healthz and /readyz over HTTP for the DaemonSet's probes.
import type { Readiness } from "../installer/installer.ts";

export interface HealthServer {
  port: number;
  stop(): void;
}

export function serveHealth(port: number, check: () => Readiness): HealthServer {
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
          r = check();
        } catch (e) {
          r = { ready: false, problems: [(e as Error).message] };
        }
        return r.ready
          ? new Response("ready\n")
          : new Response(`not ready:\n${r.problems.map((p) => `- ${p}\n`).join("")}`, { status: 503 });
      }
      return new Response("not found: try /healthz or /readyz\n", { status: 404 });
    },
  });
  return { port: server.port ?? port, stop: () => void server.stop(true) };
}
