// One Kubernetes client over fetch: any request, GET, LIST and WATCH, abortable, answers as data
// (internal/agent/stop.ts judges them), never as exceptions. Its credentials come from a
// function asked on every request:
// - the agent's in-pod service account (serviceAccountClient): the server from
//   KUBERNETES_SERVICE_HOST/PORT, the CA and the token from the service-account folder, each read
//   again whenever its file changes (kubelet rotates the token by swapping the folder's `..data`
//   link, so the file's identity changes);
// - a kubeconfig's (meshcnictl, internal/cli/io/api-client.ts): CA, client certificate, bearer
//   token or basic auth.
//
// A WATCH is one streaming GET: the body is read as it arrives and split into lines, each a JSON
// event ({"type": ..., "object": ...}) handed to the caller as soon as its line is complete.
import { readFileSync, statSync } from "node:fs";
import { renderServerUrl } from "./server-url.ts";

/** One GET's outcome. */
export type ApiAnswer =
  | { kind: "object"; object: unknown }
  | { kind: "status"; status: number; message?: string }
  | { kind: "unreachable"; reason: string };

export interface WatchEvent {
  type: string;
  object: unknown;
}

/** How a watch ended: the server closed it (normal: its timeout), it failed, or the server refused it. */
export type WatchEnd =
  | { kind: "closed"; events: number }
  | { kind: "failed"; events: number; reason: string }
  | { kind: "status"; status: number; message?: string };

/** What a request carries: headers (Authorization among them) and fetch's TLS options. */
export interface Credentials {
  headers: Record<string, string>;
  tls: Record<string, unknown>;
}

/** An HTTP answer whatever its status, or none. */
export type RawAnswer =
  | { kind: "answer"; status: number; body: string }
  | { kind: "unreachable"; reason: string; timedOut: boolean };

export interface KubeClient {
  server: string;
  /** Any request; the body, when given, is sent as JSON (`contentType` names its kind, e.g. a JSON patch). */
  request(
    method: string,
    path: string,
    timeoutMs: number,
    o?: { body?: unknown; contentType?: string; signal?: AbortSignal },
  ): Promise<RawAnswer>;
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

export function serviceAccountClient(o: {
  host: string;
  port: string;
  serviceAccountDir: string;
  userAgent?: string;
}): KubeClient {
  const token = changingFile(`${o.serviceAccountDir}/token`);
  const ca = changingFile(`${o.serviceAccountDir}/ca.crt`);
  return kubeClient(
    renderServerUrl(o.host, o.port),
    () => {
      try {
        return { headers: { Authorization: `Bearer ${token().trim()}` }, tls: { ca: ca() } };
      } catch (e) {
        return { reason: `cannot read the service account in ${o.serviceAccountDir}: ${(e as Error).message}` };
      }
    },
    o.userAgent ?? "meshcni-agent",
  );
}

export function kubeClient(
  server: string,
  creds: () => Credentials | { reason: string },
  userAgent: string,
): KubeClient {
  function credentials(extra: Record<string, string> = {}): Credentials | { reason: string } {
    const c = creds();
    if ("reason" in c) return c;
    return { headers: { Accept: "application/json", "User-Agent": userAgent, ...c.headers, ...extra }, tls: c.tls };
  }

  const messageOf = (parsed: unknown) => {
    const m = (parsed as { message?: unknown } | undefined)?.message;
    return typeof m === "string" ? m.slice(0, 300) : undefined;
  };

  async function request(
    method: string,
    path: string,
    timeoutMs: number,
    ro: { body?: unknown; contentType?: string; signal?: AbortSignal } = {},
  ): Promise<RawAnswer> {
    const c = credentials(ro.body !== undefined ? { "Content-Type": ro.contentType ?? "application/json" } : {});
    if ("reason" in c) return { kind: "unreachable", reason: c.reason, timedOut: false };
    const bound = AbortSignal.timeout(timeoutMs);
    try {
      const res = await fetch(`${server}${path}`, {
        method,
        headers: c.headers,
        signal: ro.signal ? AbortSignal.any([ro.signal, bound]) : bound,
        tls: c.tls,
        redirect: "error",
        ...(ro.body !== undefined ? { body: JSON.stringify(ro.body) } : {}),
      } as RequestInit);
      return { kind: "answer", status: res.status, body: await res.text() };
    } catch (e) {
      const err = e as Error;
      const timedOut = bound.aborted || err.name === "TimeoutError";
      return {
        kind: "unreachable",
        reason: timedOut ? `no answer within ${Math.round(timeoutMs)} ms` : err.message,
        timedOut,
      };
    }
  }

  async function get(path: string, timeoutMs: number, signal?: AbortSignal): Promise<ApiAnswer> {
    const a = await request("GET", path, timeoutMs, signal ? { signal } : {});
    if (a.kind === "unreachable") return { kind: "unreachable", reason: a.reason };
    let parsed: unknown;
    try {
      parsed = JSON.parse(a.body);
    } catch {
      parsed = undefined;
    }
    if (a.status === 200) {
      return parsed === undefined
        ? { kind: "unreachable", reason: `${path}: an answer that is not JSON` }
        : { kind: "object", object: parsed };
    }
    const message = messageOf(parsed);
    return { kind: "status", status: a.status, ...(message ? { message } : {}) };
  }

  async function watch(
    path: string,
    onEvent: (e: WatchEvent) => void,
    signal: AbortSignal,
    idleMs = 0,
  ): Promise<WatchEnd> {
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
      const res = await fetch(`${server}${path}`, {
        headers: c.headers,
        signal: all,
        tls: c.tls,
        redirect: "error",
      } as RequestInit);
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
      return {
        kind: "failed",
        events,
        reason: idled ? `nothing arrived on the watch for ${idleMs} ms` : (e as Error).message,
      };
    } finally {
      if (idle) clearTimeout(idle);
    }
  }

  return { server, request, get, list: get, watch };
}
