// Hostile requests to the node agent's socket, one from (seed, index): random and mutated methods,
// paths (traversal, percent-encoding, overlong names, bytes that are not UTF-8), headers (a huge
// Content-Length, chunked bodies, no length, oversized headers) and bodies (not JSON, deep
// nesting, huge arrays, every AddRequest and Report field of the wrong type, __proto__ and
// constructor keys), each with what the agent may answer. Pure.
import { caseSeed, createRng, type Rng } from "./prng.ts";

/** The pods the harness's cluster holds: this node's (meshed and not), another node's, none. */
export const NODE = "node-a";
export const OTHER_NODE = "node-b";
export const NS = "emojivoto";
export const HERE = "web-5b8b6f7c9d-x2x7q";
export const HERE_UID = "6f1f0c2a-3f4e-4b8e-9d0e-2f5a1c7b8e90";
export const ELSEWHERE = "web-elsewhere-7c9d";
export const ELSEWHERE_UID = "9a9a9a9a-3f4e-4b8e-9d0e-2f5a1c7b8e90";
export const MISSING = "web-missing-0";

export type Kind = "lookup" | "add" | "report" | "other";

export interface SocketCase {
  seed: number;
  index: number;
  kind: Kind;
  tags: string[];
  /** The request's bytes as they go into the socket. */
  bytes: Uint8Array;
  /** The same request for the handler itself (fetch's Request), when one can express it. */
  request?: { method: string; path: string; headers: [string, string][]; body?: string };
  /** The request is a whole, well-formed request of its endpoint: 200 or 204 may answer it. */
  valid: boolean;
  /** For lookups: which pod it names ("here", "elsewhere", "missing"). For ADDs: the pod of CNI_ARGS. */
  pod?: "here" | "elsewhere" | "missing";
  /** A well-formed ADD whose CNI_NETNS is a real network namespace (else one that is not there). */
  realNetns?: boolean;
  /** The request is not whole (a body shorter than its Content-Length): the client closes its side. */
  incomplete?: boolean;
  /** Valid once fetch's Request has normalised its method ("get" is GET there, not on the wire). */
  validForFetch?: boolean;
}

const enc = new TextEncoder();
const cat = (...parts: (string | Uint8Array)[]): Uint8Array => {
  const bufs = parts.map((p) => (typeof p === "string" ? enc.encode(p) : p));
  const out = new Uint8Array(bufs.reduce((n, b) => n + b.length, 0));
  let at = 0;
  for (const b of bufs) {
    out.set(b, at);
    at += b.length;
  }
  return out;
};

const GOOD_METHODS = { lookup: "GET", add: "POST", report: "POST" } as const;
const BAD_METHODS = [
  "PUT",
  "DELETE",
  "PATCH",
  "OPTIONS",
  "HEAD",
  "TRACE",
  "CONNECT",
  "get",
  "Post",
  "G\u00e9T",
  "GET\tX",
  "FOO",
  "",
  "POST POST",
];

interface Shape {
  method: string;
  path: string;
  headers: [string, string][];
  body?: string | Uint8Array;
  valid: boolean;
  tags: string[];
  pod?: SocketCase["pod"];
  realNetns?: boolean;
  incomplete?: boolean;
  validForFetch?: boolean;
  /** Raw bytes instead of the rendered request. */
  raw?: Uint8Array;
  /** No Content-Length header for the body (and no chunking). */
  noLength?: boolean;
  chunked?: boolean;
  lengthOverride?: string;
}

function lookupShape(rng: Rng, tags: string[]): Shape {
  const pick = rng.next();
  const ns = NS;
  let name = HERE;
  let pod: SocketCase["pod"] = "here";
  let valid = true;
  let query = "";
  if (pick < 0.2) {
    name = ELSEWHERE;
    pod = "elsewhere";
    tags.push("another-node");
  } else if (pick < 0.3) {
    name = MISSING;
    pod = "missing";
    tags.push("missing");
  }
  const r = rng.next();
  if (r < 0.35) {
    // As the plugin asks, with or without the runtime's UID.
    const other = "0d6c1c8e-0000-4000-8000-000000000001";
    if (rng.chance(0.5)) query = `?uid=${pod === "elsewhere" ? ELSEWHERE_UID : rng.chance(0.8) ? HERE_UID : other}`;
  } else {
    valid = false;
    tags.push("bad-path");
    const bad = rng.int(14);
    const path = [
      () => `/v1/pods/${ns}`,
      () => `/v1/pods/${ns}/${name}/extra`,
      () => `/v1/pods/../add`,
      () => `/v1/pods/${ns}/..%2F..%2Fadd`,
      () => `/v1/pods/%2e%2e/${name}`,
      () => `/v1/pods/${ns}/${"a".repeat(rng.pick([254, 300, 5000, 70_000]))}`,
      () => `/v1/pods/${"n".repeat(64)}/${name}`,
      () => `/v1/pods/${ns}/${name.toUpperCase()}`,
      () => `/v1/pods/${ns}/${name}%00`,
      () => `/v1/pods/${ns}/${name}?uid=a&uid=b`,
      () => `/v1/pods/${ns}/${name}?uid=${encodeURIComponent("x y/../z")}`,
      () => `/v1/pods/${ns}/${name}%2F..%2F${ELSEWHERE}`,
      () => `/v1/pods//${name}`,
      () => `/v1/pods/${ns}/web\u00e9`,
    ][bad]!();
    return { method: "GET", path, headers: [], valid: false, tags, pod };
  }
  return { method: "GET", path: `/v1/pods/${ns}/${name}${query}`, headers: [], valid, tags, pod };
}

const ENV_KEYS = ["CNI_COMMAND", "CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_ARGS", "CNI_PATH"] as const;
const WRONG = [5, null, true, [], {}, "", [1, 2], { a: 1 }, 1e308, -1];

function addBody(
  rng: Rng,
  tags: string[],
  netns: string,
  state: string,
  version: string,
): { body: unknown; valid: boolean; pod: SocketCase["pod"]; realNetns: boolean } {
  const r = rng.next();
  const pod: SocketCase["pod"] = r < 0.2 ? "elsewhere" : r < 0.3 ? "missing" : "here";
  const name = pod === "elsewhere" ? ELSEWHERE : pod === "missing" ? MISSING : HERE;
  const realNetns = rng.chance(0.3);
  const id = rng.pick(["3f2a9c1d7e5b", `forged${rng.int(1e6)}`, "a".repeat(256), "A.b_c-9"]);
  const env: Record<string, unknown> = {
    CNI_COMMAND: "ADD",
    CNI_CONTAINERID: id,
    CNI_NETNS: realNetns
      ? netns
      : rng.pick(["/var/run/netns/forged-x", "/proc/1/ns/net", "/etc/hostname", "/var/run/netns/../../etc"]),
    CNI_IFNAME: "eth0",
    CNI_PATH: "/opt/cni/bin",
    CNI_ARGS: `K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${name}`,
  };
  const stdin = JSON.stringify({
    cniVersion: "1.0.0",
    name: "k8s-pod-network",
    type: "meshcni",
    state_dir: state,
    prevResult: { cniVersion: "1.0.0", ips: [{ address: "10.244.1.12/24" }] },
  });
  const body: Record<string, unknown> = { v: 1, version, env, stdin };
  if (rng.chance(0.3)) body.startedMs = Date.now();
  tags.push(`add-${pod}`, realNetns ? "real-netns" : "forged-netns");
  const m = rng.next();
  if (m < 0.4) return { body, valid: true, pod, realNetns };
  tags.push("bad-add");
  const which = rng.int(9);
  if (which === 0) body.v = rng.pick(["1", 2, 0, null, true]);
  else if (which === 1) body.version = rng.pick(WRONG.filter((x) => typeof x !== "string"));
  else if (which === 2) body.env = rng.pick([null, [], "env", 5]);
  else if (which === 3) env[rng.pick(ENV_KEYS)] = rng.pick(WRONG.filter((x) => typeof x !== "string"));
  else if (which === 4) body.stdin = rng.pick([null, {}, [], 5]);
  else if (which === 5) body.startedMs = rng.pick(["1", -1, 1e20, null, Date.now() + 3_600_000]);
  else if (which === 6) return { body: rng.pick([[body], "add", 5, null]), valid: false, pod, realNetns };
  else if (which === 7) {
    tags.push("proto");
    return {
      body: JSON.parse(`{"__proto__":{"v":1,"version":"x","env":{},"stdin":"{}"},"constructor":{"prototype":{"v":1}}}`),
      valid: false,
      pod,
      realNetns,
    };
  } else delete body[rng.pick(["v", "version", "env", "stdin"])];
  return { body, valid: false, pod, realNetns };
}

function reportBody(rng: Rng, tags: string[]): { body: unknown; valid: boolean } {
  const body: Record<string, unknown> = {
    v: 1,
    command: rng.pick(["ADD", "DEL", "CHECK", "GC", "STATUS"]),
    containerId: rng.pick(["3f2a9c1d7e5b", "never-recorded-1"]),
    pod: { namespace: NS, name: rng.pick([HERE, ELSEWHERE]), uid: HERE_UID },
    outcome: "ok",
    reason: "fuzz",
    durationMs: 1.5,
    lines: ["meshcni: info ADD 3f2a9c1d7e5b: fuzz"],
    time: new Date(0).toISOString(),
    version: "fuzz",
  };
  if (rng.chance(0.4)) return { body, valid: true };
  tags.push("bad-report");
  const keys = [
    "v",
    "command",
    "containerId",
    "pod",
    "outcome",
    "reason",
    "code",
    "rules",
    "backend",
    "lookup",
    "durationMs",
    "lines",
    "time",
    "version",
  ];
  const which = rng.int(6);
  if (which === 0)
    body[
      rng.pick(
        keys.filter(
          (k) =>
            k !== "containerId" && k !== "pod" && k !== "code" && k !== "rules" && k !== "backend" && k !== "lookup",
        ),
      )
    ] = undefined;
  else if (which === 1) {
    const k = rng.pick(keys);
    body[k] = rng.pick(WRONG.filter((x) => x !== null));
    // "" is text, which every text field takes.
    if (body[k] === "" && ["containerId", "reason", "backend", "time", "version"].includes(k))
      return { body, valid: true };
    // A number where a number is due, in its bounds, is a valid report; the rest is not.
    if (["code", "rules"].includes(k) && body[k] === 5) return { body, valid: true };
    if (k === "durationMs" && body[k] === 5) return { body, valid: true };
  } else if (which === 2) body.lines = Array.from({ length: rng.pick([2001, 100_000]) }, () => "x");
  else if (which === 3) body.reason = "r".repeat(rng.pick([16_385, 900_000]));
  else if (which === 4) {
    tags.push("proto");
    return {
      body: JSON.parse(`{"__proto__":{"v":1,"command":"ADD"},"constructor":{"prototype":{"polluted":true}}}`),
      valid: false,
    };
  } else body.command = rng.pick(["add", "REMOVE", "", "VERSION"]);
  return { body, valid: false };
}

/** Bodies that are not what any endpoint reads, whatever its parser. */
function junkBody(rng: Rng, tags: string[]): string | Uint8Array {
  const r = rng.int(7);
  tags.push(`junk-${r}`);
  if (r === 0) return "not json";
  if (r === 1) return `${"[".repeat(rng.pick([1000, 100_000, 500_000]))}${"]".repeat(10)}`;
  if (r === 2) return JSON.stringify(Array.from({ length: rng.pick([1000, 200_000]) }, (_, i) => i));
  if (r === 3) return new Uint8Array([0xff, 0xfe, 0x00, 0xc3, 0x28, 0x7b, 0x7d]);
  if (r === 4) return `{"v":1,"version":"x","env":{},"stdin":"${"\\u0000".repeat(10)}"`;
  if (r === 5) return "{}".repeat(rng.pick([10, 400_000]));
  return `{"v":1,"a":${"1".repeat(400)}}`;
}

function render(s: Shape, close: boolean): Uint8Array {
  const body = s.body === undefined ? undefined : typeof s.body === "string" ? enc.encode(s.body) : s.body;
  const head = [`${s.method} ${s.path} HTTP/1.1`, "Host: meshcni-agent", ...s.headers.map(([k, v]) => `${k}: ${v}`)];
  if (close) head.push("Connection: close");
  if (body !== undefined) {
    if (s.chunked) {
      head.push("Transfer-Encoding: chunked");
      const mid = body.length >> 1;
      return cat(
        head.join("\r\n"),
        "\r\n\r\n",
        `${mid.toString(16)}\r\n`,
        body.subarray(0, mid),
        `\r\n${(body.length - mid).toString(16)}\r\n`,
        body.subarray(mid),
        "\r\n0\r\n\r\n",
      );
    }
    if (!s.noLength) head.push(`Content-Length: ${s.lengthOverride ?? body.length}`);
    return cat(head.join("\r\n"), "\r\n\r\n", body);
  }
  return cat(head.join("\r\n"), "\r\n\r\n");
}

/**
 * Request `index` of a run seeded with `seed`. `netns` is a real network namespace the harness
 * made; `state` the agent's state folder (the entry names it, as the plugin's does); `version`
 * the agent's (a plugin of another version is declined, 409).
 */
export function buildSocketCase(
  seed: number,
  index: number,
  netns: string,
  state: string,
  version = "fuzz",
): SocketCase {
  const rng = createRng(caseSeed(seed ^ 0x50c3e7, index));
  const tags: string[] = [];
  const r = rng.next();
  const kind: Kind = r < 0.3 ? "lookup" : r < 0.6 ? "add" : r < 0.85 ? "report" : "other";
  tags.push(kind);
  let s: Shape;
  if (kind === "lookup") s = lookupShape(rng, tags);
  else if (kind === "add" || kind === "report") {
    const path = kind === "add" ? "/v1/add" : "/v1/reports";
    const b: { body: unknown; valid: boolean; pod?: SocketCase["pod"]; realNetns?: boolean } =
      kind === "add" ? addBody(rng, tags, netns, state, version) : reportBody(rng, tags);
    const text = JSON.stringify(b.body);
    s = { method: "POST", path, headers: [["Content-Type", "application/json"]], body: text, valid: b.valid, tags };
    if (b.pod) s.pod = b.pod;
    if (b.realNetns !== undefined) s.realNetns = b.realNetns;
    if (rng.chance(0.25)) {
      tags.push("junk-body");
      s.body = junkBody(rng, tags);
      s.valid = false;
    }
  } else {
    s = { method: "GET", path: "/", headers: [], valid: false, tags };
    const o = rng.int(10);
    tags.push(`other-${o}`);
    if (o === 0) s.path = rng.pick(["/", "/v1", "/v1/", "/v2/add", "/status", "/metrics", "/v1/add/", "/V1/ADD", "*"]);
    else if (o === 1) {
      // Absolute form (RFC 9112 3.2.2): a valid request for the path it names.
      s.path = `http://elsewhere.example/v1/pods/${NS}/${HERE}`;
      s.valid = true;
      s.pod = "here";
    } else if (o === 2) {
      // Not HTTP, or not whole: the client closes its side after it.
      s.incomplete = true;
      s.raw = rng.pick([
        enc.encode("\x00\xff\r\n\r\n"),
        enc.encode("GET\r\n\r\n"),
        enc.encode("GET /v1/add\r\n\r\n"),
        new Uint8Array(4096).fill(0x41),
        enc.encode("POST /v1/add HTTP/1.1\r\nContent-Length: -5\r\n\r\n"),
      ]);
    } else if (o === 3) s.headers = [["X-Big", "x".repeat(rng.pick([9000, 100_000]))]];
    else if (o === 4)
      s.headers = Array.from({ length: rng.pick([100, 2000]) }, (_, i) => [`X-H${i}`, "v"] as [string, string]);
    else if (o === 5)
      s.raw = cat("GET /v1/pods/", new Uint8Array([0xff, 0xc0]), `/x HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n`);
    else if (o === 6) s.path = `/v1/pods/${"%".repeat(3)}/${"%zz"}`;
    else s.method = rng.pick(BAD_METHODS);
  }
  // Mutations of the method and the framing, on any kind.
  if (kind !== "other" && rng.chance(0.12)) {
    tags.push("bad-method");
    s.method = rng.pick(BAD_METHODS);
    if (
      s.valid &&
      ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS"].includes(s.method.toUpperCase()) &&
      s.method.toUpperCase() === GOOD_METHODS[kind]
    )
      s.validForFetch = true;
    s.valid = false;
  }
  if (s.body !== undefined && rng.chance(0.25)) {
    const f = rng.int(5);
    if (f === 0) {
      tags.push("chunked");
      s.chunked = true;
    } else if (f === 1) {
      tags.push("huge-length");
      s.lengthOverride = rng.pick(["99999999999", "2000000", "1048577", "18446744073709551616"]);
      s.valid = false;
      s.incomplete = true;
    } else if (f === 2) {
      tags.push("short-length");
      const n = typeof s.body === "string" ? enc.encode(s.body).length : s.body.length;
      s.lengthOverride = String(n + rng.range(1, 50));
      s.valid = false;
      s.incomplete = true;
    } else if (f === 3) {
      tags.push("no-length");
      s.noLength = true;
      s.valid = false;
    } else {
      tags.push("bad-length");
      s.lengthOverride = rng.pick(["abc", "-1", "1, 2", "0x10", ""]);
      s.valid = false;
    }
  }
  if (
    kind === "add" &&
    typeof s.body === "string" &&
    s.body.length > 0 &&
    !s.chunked &&
    !s.noLength &&
    !s.lengthOverride
  ) {
    // a large stdin inside a well-formed request: past the bound is 413
    if (rng.chance(0.05)) {
      tags.push("huge-body");
      s.body = `{"v":1,"version":"x","env":{},"stdin":"${"a".repeat(rng.pick([1_048_000, 2_000_000]))}"}`;
      s.valid = false;
    }
  }
  const bytes = s.raw ?? render(s, true);
  const out: SocketCase = { seed, index, kind, tags, bytes, valid: s.valid };
  if (s.pod) out.pod = s.pod;
  if (s.realNetns !== undefined) out.realNetns = s.realNetns;
  if (s.incomplete) out.incomplete = true;
  if (s.validForFetch && s.valid === false && s.lengthOverride === undefined && !s.noLength) out.validForFetch = true;
  // fetch's Request takes only a method it knows (Bun's turns any other into GET).
  const known = ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"].includes(s.method.toUpperCase());
  if (!s.raw && known && s.lengthOverride === undefined && !s.noLength) {
    const body =
      s.body === undefined ? undefined : typeof s.body === "string" ? s.body : new TextDecoder().decode(s.body);
    out.request = { method: s.method, path: s.path, headers: s.headers, ...(body !== undefined ? { body } : {}) };
  }
  return out;
}
