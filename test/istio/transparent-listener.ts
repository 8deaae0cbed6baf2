// A stand-in for Envoy's TPROXY inbound listener: a TCP listener with IP_TRANSPARENT (which the
// TPROXY target requires; Bun.listen cannot set it, so this goes through libc with bun:ffi).
// Runs inside the pod namespace (ip netns exec NS bun transparent-listener.ts TAG PORT [6]) and
// answers every connection with its tag, its port and the original destination it recovered
// (getsockname: TPROXY keeps the address the client dialled). Prints "ready" once listening.
// Test tooling only; IPv4, or IPv6 only (IPV6_V6ONLY) with a third argument 6.
import { dlopen, FFIType, ptr } from "bun:ffi";
import { writeSync } from "node:fs";

const [tag = "proxy-inbound", portArg = "15006", familyArg = "4"] = Bun.argv.slice(2);
const v6 = familyArg === "6";
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

const AF_INET6 = 10;
const SOL_IPV6 = 41;
const IPV6_V6ONLY = 26;
const IPV6_TRANSPARENT = 75;

const one = new Int32Array([1]);
const s = c.socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM, 0);
if (s < 0) fail("socket");
if (c.setsockopt(s, SOL_SOCKET, SO_REUSEADDR, ptr(one), 4) !== 0) fail("SO_REUSEADDR");
if (v6) {
  if (c.setsockopt(s, SOL_IPV6, IPV6_V6ONLY, ptr(one), 4) !== 0) fail("IPV6_V6ONLY");
  if (c.setsockopt(s, SOL_IPV6, IPV6_TRANSPARENT, ptr(one), 4) !== 0) fail("IPV6_TRANSPARENT");
} else if (c.setsockopt(s, SOL_IP, IP_TRANSPARENT, ptr(one), 4) !== 0) fail("IP_TRANSPARENT");
// sockaddr_in (16 bytes) or sockaddr_in6 (28): family (host order), port (network order), any address
const SA = v6 ? 28 : 16;
const addr = new Uint8Array(SA);
new DataView(addr.buffer).setUint16(0, v6 ? AF_INET6 : AF_INET, true);
new DataView(addr.buffer).setUint16(2, port, false);
if (c.bind(s, ptr(addr), SA) !== 0) fail(`bind to port ${port}`);
if (c.listen(s, 64) !== 0) fail("listen");
writeSync(1, "ready\n");

const local = new Uint8Array(SA);
const len = new Uint32Array([SA]);

function ipv6Text(b: Uint8Array): string {
  const groups: string[] = [];
  for (let i = 0; i < 16; i += 2) groups.push(((b[i]! << 8) | b[i + 1]!).toString(16));
  // the longest run of zero groups (two or more) becomes ::
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && groups[j] === "0") j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j === i ? i + 1 : j;
  }
  if (best < 0) return groups.join(":");
  return `${groups.slice(0, best).join(":")}::${groups.slice(best + bestLen).join(":")}`;
}
for (;;) {
  const fd = c.accept(s, null, null);
  if (fd < 0) continue;
  len[0] = SA;
  let dst = "?";
  if (c.getsockname(fd, ptr(local), ptr(len)) === 0) {
    const p = new DataView(local.buffer).getUint16(2, false);
    dst = v6 ? `[${ipv6Text(local.subarray(8, 24))}]:${p}` : `${local[4]}.${local[5]}.${local[6]}.${local[7]}:${p}`;
  }
  const reply = new TextEncoder().encode(`${tag} port=${port} dst=${dst}\n`);
  c.write(fd, ptr(reply), reply.length);
  c.close(fd);
}
