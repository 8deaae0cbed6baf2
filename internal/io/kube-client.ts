// The agent's Kubernetes client: GET, LIST and WATCH over fetch with the in-pod service account
// (the server from KUBERNETES_SERVICE_HOST/PORT, the CA and the token from the service-account
// folder). The token is read again whenever its file changes (kubelet rotates it by swapping the
// folder's `..data` link, so the file's identity changes), the CA likewise. Answers come back as
// data (internal/agent/stop.ts judges them), never as exceptions; every call is abortable.
//
// A WATCH is one streaming GET: the body is read as it arrives and split into lines, each a JSON
// event ({"type": ..., "object": ...}) handed to the caller as soon as its line is complete.
import { readFileSync, statSync } from "node:fs";
import type { ApiAnswer } from "../agent/stop.ts";
import { renderServerUrl } from "../kubeconfig/render.ts";

export interface WatchEvent {
  type: string;
  object: unknown;
}

/** How a watch ended: the server closed it (normal: its timeout), it failed, or the server refused it. */
export type WatchEnd =
  | { kind: "closed"; events: number }
  | { kind: "failed"; events: number; reason: string }
  | { kind: "status"; status: number; message?: string };

export interface KubeClient {
  server: string;
  /** One object, or a list (a collection path with its query). */
  get(path: string, timeoutMs: number, signal?: AbortSignal): Promise<ApiAnswer>;
  /** A list; the same request as get, named for the reader. */
  list(path: string, timeoutMs: number, signal?: AbortSignal): Promise<ApiAnswer>;
  /**
   * Streams a watch (`path` with its query, `watch=1` included) until the server closes it, the
   * connection fails, `signal` aborts, or no byte arrives for `idleMs` (a half-dead connection).
   */
  watch(path: string, onEvent: (e: WatchEvent) => void, signal: AbortSignal, idleMs?: number): Promise<WatchEnd>;
}

/** Reads a file again only when it changed (another inode, size or modification time). */
function changingFile(path: string): () => string {
  let key = "";
  let text = "";
  return () => {
    const st = statSync(path, { bigint: true });
    const k = `${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}`;
    if (k !== key) {
      text = readFileSync(path, "utf8");
      key = k;
    }
    return text;
  };
}

export function serviceAccountClient(o: { host: string; port: string; serviceAccountDir: string; userAgent?: string }): KubeClient {
  const server = renderServerUrl(o.host, o.port);
  const token = changingFile(`${o.serviceAccountDir}/token`);
  const ca = changingFile(`${o.serviceAccountDir}/ca.crt`);
  const userAgent = o.userAgent ?? "meshcni-agent";

  function credentials(): { headers: Record<string, string>; ca: string } | { reason: string } {
    try {
      return {
        headers: { Accept: "application/json", Authorization: `Bearer ${token().trim()}`, "User-Agent": userAgent },
        ca: ca(),
      };
    } catch (e) {
      return { reason: `cannot read the service account in ${o.serviceAccountDir}: ${(e as Error).message}` };
    }
  }

  const messageOf = (parsed: unknown) => {
    const m = (parsed as { message?: unknown } | undefined)?.message;
    return typeof m === "string" ? m.slice(0, 300) : undefined;
  };

  async function get(path: string, timeoutMs: number, signal?: AbortSignal): Promise<ApiAnswer> {
    const c = credentials();
    if ("reason" in c) return { kind: "unreachable", reason: c.reason };
    const bound = AbortSignal.timeout(timeoutMs);
    let res: Response;
    let body: string;
    try {
      res = await fetch(`${server}${path}`, {
        headers: c.headers,
        signal: signal ? AbortSignal.any([signal, bound]) : bound,
        tls: { ca: c.ca },
        redirect: "error",
      } as RequestInit);
      body = await res.text();
    } catch (e) {
      const err = e as Error;
      const timedOut = bound.aborted || err.name === "TimeoutError";
      return { kind: "unreachable", reason: timedOut ? `no answer within ${Math.round(timeoutMs)} ms` : err.message };
    }
    let parsed: unknown;
    try {
      parsed = JSON.parse(body);
    } catch {
      parsed = undefined;
    }
    if (res.status === 200) {
      return parsed === undefined ? { kind: "unreachable", reason: `${path}: an answer that is not JSON` } : { kind: "object", object: parsed };
    }
    const message = messageOf(parsed);
    return { kind: "status", status: res.status, ...(message ? { message } : {}) };
  }

  async function watch(path: string, onEvent: (e: WatchEvent) => void, signal: AbortSignal, idleMs = 0): Promise<WatchEnd> {
    let events = 0;
    const c = credentials();
    if ("reason" in c) return { kind: "failed", events, reason: c.reason };
    const stop = new AbortController();
    const all = AbortSignal.any([signal, stop.signal]);
    let idle: ReturnType<typeof setTimeout> | undefined;
    let idled = false;
    const arm = () => {
      if (idleMs <= 0) return;
      if (idle) clearTimeout(idle);
      idle = setTimeout(() => {
        idled = true;
        stop.abort();
      }, idleMs);
    };
    try {
      arm();
      const res = await fetch(`${server}${path}`, { headers: c.headers, signal: all, tls: { ca: c.ca }, redirect: "error" } as RequestInit);
      if (res.status !== 200) {
        let parsed: unknown;
        try {
          parsed = JSON.parse(await res.text());
        } catch {
          parsed = undefined;
        }
        const message = messageOf(parsed);
        return { kind: "status", status: res.status, ...(message ? { message } : {}) };
      }
      if (!res.body) return { kind: "closed", events };
      const decoder = new TextDecoder();
      let buffered = "";
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        arm();
        buffered += decoder.decode(chunk, { stream: true });
        let nl: number;
        while ((nl = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, nl).trim();
          buffered = buffered.slice(nl + 1);
          if (!line) continue;
          let e: WatchEvent;
          try {
            e = JSON.parse(line);
          } catch {
            return { kind: "failed", events, reason: `a watch event that is not JSON: ${line.slice(0, 100)}` };
          }
          if (typeof e !== "object" || e === null || typeof e.type !== "string") {
            return { kind: "failed", events, reason: `a watch event without a type: ${line.slice(0, 100)}` };
          }
          events++;
          onEvent(e);
          if (all.aborted) return { kind: "closed", events };
        }
      }
      if (buffered.trim()) return { kind: "failed", events, reason: "the watch ended in the middle of an event" };
      return { kind: "closed", events };
    } catch (e) {
      if (signal.aborted) return { kind: "closed", events };
      return { kind: "failed", events, reason: idled ? `nothing arrived on the watch for ${idleMs} ms` : (e as Error).message };
    } finally {
      if (idle) clearTimeout(idle);
    }
  }

  return { server, get, list: get, watch };
}
