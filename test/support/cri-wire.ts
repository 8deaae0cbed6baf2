// The wire under the CRI harness (test/support/cri.ts): protobuf's encoding for the few message
// shapes the CRI calls need, written by hand, and unary gRPC calls over HTTP/2 on a Unix socket
// with Node's http2 module. No code generation and no gRPC library: a field is its number from
// cri-api's runtime/v1 api.proto and one of protobuf's wire types.
import http2 from "node:http2";
import net from "node:net";

// ---- encoding ------------------------------------------------------------------------------

const enc = new TextEncoder();
const dec = new TextDecoder();

function varint(n: number | bigint): number[] {
  let v = BigInt(n);
  if (v < 0n) v &= (1n << 64n) - 1n; // negative int64 values take ten bytes, as in protobuf
  const out: number[] = [];
  while (v > 127n) {
    out.push(Number(v & 127n) | 128);
    v >>= 7n;
  }
  out.push(Number(v));
  return out;
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** A message: its fields, already encoded, in order. Absent fields are `undefined`. */
export function message(...fields: (Uint8Array | undefined)[]): Uint8Array {
  return concat(fields.filter((f): f is Uint8Array => f !== undefined));
}

function lengthDelimited(field: number, bytes: Uint8Array): Uint8Array {
  return concat([Uint8Array.from([...varint((field << 3) | 2), ...varint(bytes.length)]), bytes]);
}

/** A string field; proto3 leaves the empty string out. */
export function str(field: number, value: string | undefined): Uint8Array | undefined {
  return value ? lengthDelimited(field, enc.encode(value)) : undefined;
}

/** An embedded message field. */
export function sub(field: number, value: Uint8Array | undefined): Uint8Array | undefined {
  return value === undefined ? undefined : lengthDelimited(field, value);
}

/** A varint field (uint32, int64, bool, enum); proto3 leaves zero out. */
export function uint(field: number, value: number | boolean | undefined): Uint8Array | undefined {
  const n = typeof value === "boolean" ? Number(value) : value;
  return n ? Uint8Array.from([...varint(field << 3), ...varint(n)]) : undefined;
}

/** A map<string, string> field: one entry message (key = 1, value = 2) per pair. */
export function stringMap(field: number, map: Record<string, string> | undefined): Uint8Array | undefined {
  const entries = Object.entries(map ?? {});
  if (entries.length === 0) return undefined;
  return concat(entries.map(([k, v]) => lengthDelimited(field, message(str(1, k), str(2, v)))));
}

// ---- decoding ------------------------------------------------------------------------------

/** A decoded message: every occurrence of each field number, in order. */
export type Decoded = Map<number, (bigint | Uint8Array)[]>;

export function decode(buf: Uint8Array): Decoded {
  const out: Decoded = new Map();
  let at = 0;
  const readVarint = (): bigint => {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      if (at >= buf.length) throw new Error("protobuf: truncated varint");
      const b = buf[at++]!;
      v |= BigInt(b & 127) << shift;
      if ((b & 128) === 0) return v;
      shift += 7n;
    }
  };
  while (at < buf.length) {
    const key = Number(readVarint());
    const field = key >>> 3;
    let value: bigint | Uint8Array;
    switch (key & 7) {
      case 0:
        value = readVarint();
        break;
      case 1:
        value = buf.subarray(at, at + 8);
        at += 8;
        break;
      case 2: {
        const len = Number(readVarint());
        if (at + len > buf.length) throw new Error("protobuf: truncated field");
        value = buf.subarray(at, at + len);
        at += len;
        break;
      }
      case 5:
        value = buf.subarray(at, at + 4);
        at += 4;
        break;
      default:
        throw new Error(`protobuf: wire type ${key & 7} of field ${field} is not supported`);
    }
    const list = out.get(field);
    if (list) list.push(value);
    else out.set(field, [value]);
  }
  return out;
}

function bytesOf(m: Decoded, field: number): Uint8Array[] {
  return (m.get(field) ?? []).filter((v): v is Uint8Array => v instanceof Uint8Array);
}

export function getStr(m: Decoded, field: number): string {
  const v = bytesOf(m, field).at(-1);
  return v ? dec.decode(v) : "";
}

export function getUint(m: Decoded, field: number): number {
  const v = (m.get(field) ?? []).at(-1);
  return typeof v === "bigint" ? Number(v) : 0;
}

export function getMsg(m: Decoded, field: number): Decoded {
  const v = bytesOf(m, field).at(-1);
  return v ? decode(v) : new Map();
}

export function getMsgs(m: Decoded, field: number): Decoded[] {
  return bytesOf(m, field).map(decode);
}

export function getStringMap(m: Decoded, field: number): Record<string, string> {
  const out: Record<string, string> = {};
  for (const entry of getMsgs(m, field)) out[getStr(entry, 1)] = getStr(entry, 2);
  return out;
}

// ---- gRPC ----------------------------------------------------------------------------------

/** A call that ended with a gRPC status other than OK. */
export class GrpcError extends Error {
  constructor(
    readonly method: string,
    readonly code: number,
    readonly details: string,
  ) {
    super(`${method}: gRPC status ${code}: ${details}`);
  }
}

/** gRPC percent-encodes grpc-message; a malformed escape stays as it came. */
function grpcMessage(raw: unknown): string {
  const s = String(raw ?? "");
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

/** Unary gRPC calls on one HTTP/2 connection to a Unix socket. */
export class GrpcClient {
  private session: http2.ClientHttp2Session | undefined;

  constructor(readonly socket: string) {}

  private connect(): http2.ClientHttp2Session {
    if (this.session && !this.session.closed && !this.session.destroyed) return this.session;
    const s = http2.connect("http://localhost", { createConnection: () => net.connect(this.socket) });
    s.on("error", () => {}); // a failed call reports it; the next call connects again
    this.session = s;
    return s;
  }

  /** Calls `/service/method` with one request message; resolves with the response message. */
  call(path: string, request: Uint8Array, timeoutMs = 60_000): Promise<Uint8Array> {
    return new Promise((resolve, reject) => {
      const frame = new Uint8Array(5 + request.length);
      new DataView(frame.buffer).setUint32(1, request.length);
      frame.set(request, 5);
      let req: http2.ClientHttp2Stream;
      try {
        req = this.connect().request({
          ":method": "POST",
          ":path": path,
          "content-type": "application/grpc",
          te: "trailers",
          "grpc-timeout": `${Math.ceil(timeoutMs / 1000)}S`,
        });
      } catch (e) {
        reject(e);
        return;
      }
      const timer = setTimeout(() => {
        req.close(http2.constants.NGHTTP2_CANCEL);
        reject(new Error(`${path}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      const chunks: Buffer[] = [];
      // The status comes in the trailers, or in the headers of a "trailers-only" answer.
      let status: Record<string, unknown> = {};
      req.on("response", (h) => {
        if (h["grpc-status"] !== undefined) status = h;
      });
      req.on("trailers", (t) => {
        status = t;
      });
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("error", (e) => {
        clearTimeout(timer);
        reject(e);
      });
      req.on("end", () => {
        clearTimeout(timer);
        const code = Number(status["grpc-status"] ?? NaN);
        if (code !== 0) {
          reject(
            new GrpcError(
              path,
              Number.isNaN(code) ? -1 : code,
              Number.isNaN(code) ? "the answer carried no grpc-status" : grpcMessage(status["grpc-message"]),
            ),
          );
          return;
        }
        const body = Buffer.concat(chunks);
        if (body.length < 5) {
          reject(new Error(`${path}: an answer of ${body.length} bytes is no gRPC message`));
          return;
        }
        if (body[0] !== 0) {
          reject(new Error(`${path}: a compressed answer (none was asked for)`));
          return;
        }
        const len = body.readUInt32BE(1);
        resolve(new Uint8Array(body.subarray(5, 5 + len)));
      });
      req.end(frame);
    });
  }

  close(): void {
    this.session?.close();
    this.session = undefined;
  }
}
