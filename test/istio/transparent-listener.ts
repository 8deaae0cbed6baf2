// A stand-in for Envoy's TPROXY inbound listener: a TCP listener with IP_TRANSPARENT (which the
// TPROXY target requires; Bun.listen cannot set it, so this goes through libc with bun:ffi).
// Runs inside the pod namespace (ip netns exec NS bun transparent-listener.ts TAG PORT) and
// answers every connection with its tag, its port and the original destination it recovered
// (getsockname: TPROXY keeps the address the client dialled). Prints "ready" once listening.
// Test tooling only; IPv4.
import { dlopen, FFIType, ptr } from "bun:ffi";
import { writeSync } from "node:fs";

const [tag = "proxy-inbound", portArg = "15006"] = Bun.argv.slice(2);
const port = Number(portArg);

const { symbols: c } = dlopen("libc.so.6", {
  socket: { args: [FFIType.i32, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  setsockopt: { args: [FFIType.i32, FFIType.i32, FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  bind: { args: [FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  listen: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  accept: { args: [FFIType.i32, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
  getsockname: { args: [FFIType.i32, FFIType.ptr, FFIType.ptr], returns: FFIType.i32 },
  write: { args: [FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i64 },
  close: { args: [FFIType.i32], returns: FFIType.i32 },
});

const AF_INET = 2;
const SOCK_STREAM = 1;
const SOL_SOCKET = 1;
const SO_REUSEADDR = 2;
const SOL_IP = 0;
const IP_TRANSPARENT = 19;

function fail(what: string): never {
  writeSync(2, `transparent-listener: ${what} failed\n`);
  process.exit(1);
}

const one = new Int32Array([1]);
const s = c.socket(AF_INET, SOCK_STREAM, 0);
if (s < 0) fail("socket");
if (c.setsockopt(s, SOL_SOCKET, SO_REUSEADDR, ptr(one), 4) !== 0) fail("SO_REUSEADDR");
if (c.setsockopt(s, SOL_IP, IP_TRANSPARENT, ptr(one), 4) !== 0) fail("IP_TRANSPARENT");
const addr = new Uint8Array(16); // sockaddr_in: family (host order), port (network order), 0.0.0.0
new DataView(addr.buffer).setUint16(0, AF_INET, true);
new DataView(addr.buffer).setUint16(2, port, false);
if (c.bind(s, ptr(addr), 16) !== 0) fail(`bind to port ${port}`);
if (c.listen(s, 64) !== 0) fail("listen");
writeSync(1, "ready\n");

const local = new Uint8Array(16);
const len = new Uint32Array([16]);
for (;;) {
  const fd = c.accept(s, null, null);
  if (fd < 0) continue;
  len[0] = 16;
  let dst = "?";
  if (c.getsockname(fd, ptr(local), ptr(len)) === 0) {
    dst = `${local[4]}.${local[5]}.${local[6]}.${local[7]}:${new DataView(local.buffer).getUint16(2, false)}`;
  }
  const reply = new TextEncoder().encode(`${tag} port=${port} dst=${dst}\n`);
  c.write(fd, ptr(reply), reply.length);
  c.close(fd);
}
