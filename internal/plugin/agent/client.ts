// The plugin's side of the wire to the node agent (internal/wire/protocol.ts): a minimal
// HTTP/1.1 client over the agent's Unix socket, on Bun.connect. Light on purpose: it is on the
// plugin's hot path, and a warm ADD loads nothing else to reach the agent (no fetch, no TLS).
// One request per connection (`Connection: close`); the answer ends at its Content-Length, at the
// last chunk, or when the agent closes the connection.
import {
  AGENT_TIMEOUT_MS,
  type AgentError,
  MAX_ANSWER_BYTES,
  podLookupPath,
  REPORTS_PATH,
  type Report,
} from "../../wire/protocol.ts";

export interface AgentResponse {
  status: number;
  body: string;
}

const CRLFCRLF = [13, 10, 13, 10];

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

function indexOfSeq(buf: Uint8Array, seq: number[], from = 0): number {
  outer: for (let i = from; i + seq.length <= buf.length; i++) {
    for (let j = 0; j < seq.length; j++) if (buf[i + j] !== seq[j]) continue outer;
    return i;
  }
  return -1;
}

/** Decodes a chunked body; undefined while the last chunk has not arrived. */
function dechunk(body: Uint8Array): Uint8Array | undefined {
  const parts: Uint8Array[] = [];
  let at = 0;
  for (;;) {
    const eol = indexOfSeq(body, [13, 10], at);
    if (eol < 0) return undefined;
    const size = parseInt(new TextDecoder().decode(body.subarray(at, eol)).split(";")[0]!.trim(), 16);
    if (!Number.isFinite(size) || size < 0) throw new Error("malformed chunked answer");
    if (size === 0) return parts.reduce(concat, new Uint8Array(0));
    const start = eol + 2;
    if (body.length < start + size + 2) return undefined;
    parts.push(body.subarray(start, start + size));
    at = start + size + 2;
  }
}

/** The status of an HTTP/1.0 or 1.1 status line ("HTTP/1.1 200 OK"); undefined for anything else. */
export function statusOf(line: string): number | undefined {
  if (!line.startsWith("HTTP/1.") || (line[7] !== "0" && line[7] !== "1") || line[8] !== " ") return undefined;
  let status = 0;
  for (let i = 9; i < 12; i++) {
    const d = line.charCodeAt(i) - 48;
    if (!(d >= 0 && d <= 9)) return undefined;
    status = status * 10 + d;
  }
  return status;
}

/** The answer in `buf`, or undefined while it is incomplete (`ended`: the agent closed the connection). */
function parseAnswer(buf: Uint8Array, ended: boolean): AgentResponse | undefined {
  const head = indexOfSeq(buf, CRLFCRLF);
  if (head < 0) {
    if (ended) throw new Error("the agent closed the connection before its answer's headers");
    return undefined;
  }
  const lines = new TextDecoder().decode(buf.subarray(0, head)).split("\r\n");
  const status = statusOf(lines[0] ?? "");
  if (status === undefined) throw new Error("the agent's answer is not HTTP/1.1");
  let length: number | undefined;
  let chunked = false;
  for (let i = 1; i < lines.length; i++) {
    const l = lines[i]!;
    const colon = l.indexOf(":");
    const name = l.slice(0, colon).trim().toLowerCase();
    const value = l.slice(colon + 1).trim();
    if (name === "content-length") length = Number(value);
    else if (name === "transfer-encoding" && value.toLowerCase().includes("chunked")) chunked = true;
  }
  const rest = buf.subarray(head + 4);
  let body: Uint8Array | undefined;
  if (chunked) body = dechunk(rest);
  else if (length !== undefined && Number.isInteger(length) && length >= 0)
    body = rest.length >= length ? rest.subarray(0, length) : undefined;
  else body = ended ? rest : undefined;
  if (body === undefined) {
    if (ended) throw new Error("the agent closed the connection before the end of its answer");
    return undefined;
  }
  return { status, body: new TextDecoder().decode(body) };
}

/**
 * A request as text and its length in UTF-8 bytes; `close` asks the agent to close the
 * connection after its answer. The body is measured natively (Buffer.byteLength, not a character
 * loop; perf: see docs/benchmarks.md), and the text goes to the socket as it is: Bun encodes it
 * while writing.
 */
export function renderRequest(
  method: "GET" | "POST",
  path: string,
  body: string | undefined,
  close: boolean,
): { text: string; bytes: number } {
  const head =
    `${method} ${path} HTTP/1.1\r\nHost: meshcni-agent\r\nUser-Agent: meshcni\r\n` +
    `${close ? "Connection: close\r\n" : ""}`;
  const text =
    body === undefined
      ? `${head}\r\n`
      : `${head}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
  return { text, bytes: Buffer.byteLength(text) };
}

/**
 * Writes `req` to `s`: the text at once, the bytes a socket did not take (a request larger than
 * its buffer) kept for its drain. Returns what is left to write.
 */
function writeRequest(
  s: { write(b: string | Uint8Array): number },
  req: { text: string; bytes: number },
): Uint8Array | undefined {
  const n = s.write(req.text);
  if (n === req.bytes) return undefined;
  return new TextEncoder().encode(req.text).subarray(Math.max(0, n));
}

/**
 * Sends one more request on a connection kept open after its answer, and closes it without
 * waiting for this one's answer; false when it could not be written whole at once.
 */
export type FollowUp = (method: "GET" | "POST", path: string, body: string) => boolean;

/**
 * One request to the agent; rejects when the socket is absent, refuses, breaks, or gives no whole
 * answer within `timeoutMs`.
 */
export function agentRequest(
  socketPath: string,
  method: "GET" | "POST",
  path: string,
  body: string | undefined,
  timeoutMs: number,
  opts: { noAnswer?: boolean; keepOpen?: boolean } = {},
): Promise<AgentResponse & { followUp?: FollowUp; close?(): void }> {
  // withResolvers, not `new Promise(executor)`: the constructor is a JS builtin that a fresh
  // process compiles on its first use, slower to start than withResolvers (perf: see docs/benchmarks.md).
  const { promise, resolve, reject } = Promise.withResolvers<AgentResponse & { followUp?: FollowUp; close?(): void }>();
  const request = renderRequest(method, path, body, !opts.keepOpen);
  /** The request's bytes the socket has not taken yet; undefined before the first write. */
  let pending: Uint8Array | undefined;
  let received: Uint8Array = new Uint8Array(0);
  let done = false;
  let sock: { end(): void; write(b: string | Uint8Array): number } | undefined;
  let closed = false;
  const end = () => {
    try {
      sock?.end();
    } catch {
      // already closed
    }
  };
  const finish = (err: Error | undefined, res?: AgentResponse) => {
    if (done) return;
    done = true;
    clearTimeout(timer);
    if (err || !opts.keepOpen || !sock) {
      end();
      if (err) reject(err);
      else resolve(res!);
      return;
    }
    const s = sock;
    const followUp: FollowUp = (m, p, b) => {
      if (closed) return false;
      const req = renderRequest(m, p, b, true);
      let n = -1;
      try {
        n = s.write(req.text);
      } catch {
        // closed meanwhile
      }
      end();
      return n === req.bytes;
    };
    resolve({ ...res!, followUp, close: end });
  };
  const timer = setTimeout(() => finish(new Error(`the agent did not answer within ${timeoutMs} ms`)), timeoutMs);
  const flush = (s: { write(b: string | Uint8Array): number }) => {
    pending ??= writeRequest(s, request) ?? new Uint8Array(0);
    while (pending.length > 0) {
      const n = s.write(pending);
      if (n <= 0) return;
      pending = pending.subarray(n);
    }
    // Sent whole into the agent's socket: it reads it from there even after this process exits.
    if (opts.noAnswer) finish(undefined, { status: 0, body: "" });
  };
  const take = (ended: boolean) => {
    try {
      const res = parseAnswer(received, ended);
      if (res) finish(undefined, res);
    } catch (e) {
      finish(e as Error);
    }
  };
  Bun.connect({
    unix: socketPath,
    socket: {
      open(s) {
        sock = s;
        flush(s);
      },
      drain(s) {
        flush(s);
      },
      data(_s, chunk) {
        if (done) return;
        received = concat(received, chunk);
        if (received.length > MAX_ANSWER_BYTES)
          return finish(new Error(`the agent's answer is larger than ${MAX_ANSWER_BYTES} bytes`));
        take(false);
      },
      close() {
        closed = true;
        // After the answer (or a request sent without waiting for one) there is nothing to read:
        // no answer to parse, no error to make.
        if (done) return;
        take(true);
        finish(new Error("the agent closed the connection"));
      },
      error(_s, e) {
        finish(e);
      },
      connectError(_s, e) {
        finish(e);
      },
    },
  }).catch((e: Error) => finish(e));
  return promise;
}

/** What the agent said about a pod. */
export type AgentAnswer =
  | { kind: "pod"; pod: unknown; namespace: unknown; source: "agent-cache" | "agent-api" }
  /** 404: the pod does not exist, or not with this UID; the plugin answers this CNI error. */
  | { kind: "gone"; error: AgentError }
  /** Anything else: the plugin falls back to its own kubeconfig. */
  | { kind: "unavailable"; why: string };

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);

export async function askAgent(
  socketPath: string,
  namespace: string,
  name: string,
  uid: string | undefined,
  timeoutMs = AGENT_TIMEOUT_MS,
): Promise<AgentAnswer> {
  let res: AgentResponse;
  try {
    res = await agentRequest(socketPath, "GET", podLookupPath(namespace, name, uid), undefined, timeoutMs);
  } catch (e) {
    return { kind: "unavailable", why: `the agent at ${socketPath} did not answer: ${(e as Error).message}` };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(res.body);
  } catch {
    parsed = undefined;
  }
  if (res.status === 200) {
    if (!isObject(parsed) || !isObject(parsed.pod))
      return { kind: "unavailable", why: "the agent's answer holds no pod" };
    const source = parsed.source === "api" ? "agent-api" : "agent-cache";
    return { kind: "pod", pod: parsed.pod, namespace: parsed.namespace, source };
  }
  const err = isObject(parsed) && typeof parsed.msg === "string" ? parsed : undefined;
  if (res.status === 404) {
    const error: AgentError = {
      code: 106,
      msg: typeof err?.msg === "string" ? err.msg : "pod not found",
      details:
        typeof err?.details === "string"
          ? err.details
          : `the agent has no pod ${namespace}/${name}${uid ? ` with UID ${uid}` : ""}`,
    };
    return { kind: "gone", error };
  }
  const what = err ? `${err.msg}${typeof err.details === "string" ? `: ${err.details}` : ""}` : res.body.slice(0, 200);
  return { kind: "unavailable", why: `the agent answered ${res.status} (${what})` };
}

/**
 * The plugin's bound on sending a report: its result is already on stdout, but the runtime waits
 * for the exit.
 */
export const REPORT_TIMEOUT_MS = 250;

/**
 * Sends one report; true once the whole request is in the agent's socket. The plugin does not wait
 * for the agent's 204 (a round trip through another process, costly on a busy node): a request
 * in an accepted connection's buffer is read by the agent even after the plugin has exited.
 * Without an agent (no socket, refused) or when the request cannot be written within the bound,
 * false: the caller writes the fallback log.
 */
export async function sendReport(socketPath: string, report: Report, timeoutMs = REPORT_TIMEOUT_MS): Promise<boolean> {
  try {
    await agentRequest(socketPath, "POST", REPORTS_PATH, JSON.stringify(report), timeoutMs, { noAnswer: true });
    return true;
  } catch {
    return false;
  }
}
