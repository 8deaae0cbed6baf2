// The agent's writes to the API server with its in-pod service account (as internal/io/agent-api.ts
// reads): DELETE of a pod with its UID as a precondition, POST of an Event, PATCH of its node.
// Answers come back as data, never as exceptions.
import { readFileSync } from "node:fs";
import { renderServerUrl } from "../kubeconfig/render.ts";

export type WriteAnswer =
  | { ok: true; status: number; object: unknown }
  | { ok: false; status?: number; reason: string };

export interface AgentWriter {
  send(method: "DELETE" | "POST" | "PATCH", path: string, body: unknown, contentType: string, timeoutMs: number): Promise<WriteAnswer>;
}

export function serviceAccountWriter(o: { host: string; port: string; serviceAccountDir: string }): AgentWriter {
  const server = renderServerUrl(o.host, o.port);
  return {
    async send(method, path, body, contentType, timeoutMs) {
      let token: string;
      let ca: string;
      try {
        token = readFileSync(`${o.serviceAccountDir}/token`, "utf8").trim();
        ca = readFileSync(`${o.serviceAccountDir}/ca.crt`, "utf8");
      } catch (e) {
        return { ok: false, reason: `cannot read the service account in ${o.serviceAccountDir}: ${(e as Error).message}` };
      }
      try {
        const res = await fetch(`${server}${path}`, {
          method,
          headers: { Accept: "application/json", "Content-Type": contentType, Authorization: `Bearer ${token}`, "User-Agent": "meshcni-agent" },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(timeoutMs),
          tls: { ca },
          redirect: "error",
        } as RequestInit);
        const text = await res.text();
        let parsed: unknown;
        try {
          parsed = JSON.parse(text);
        } catch {
          parsed = undefined;
        }
        if (res.status >= 200 && res.status < 300) return { ok: true, status: res.status, object: parsed };
        const message = (parsed as { message?: unknown })?.message;
        return { ok: false, status: res.status, reason: `${method} ${path} answered ${res.status}${typeof message === "string" ? `: ${message.slice(0, 300)}` : ""}` };
      } catch (e) {
        return { ok: false, reason: `${method} ${path}: ${(e as Error).message}` };
      }
    },
  };
}
