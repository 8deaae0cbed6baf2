// Run by test/agent/apply-seccomp.test.ts in a private mount namespace (unshare -m), so that a
// mount that succeeds changes nothing outside: tries what the agent's own seccomp filter denies,
// before (argv[2] "before") or after installing it, and prints one JSON document.
import { dlopen, FFIType as T, ptr, read } from "bun:ffi";
import { mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { restrictSelf } from "../../../internal/agent/apply/io/seccomp.ts";

const c = dlopen("libc.so.6", {
  mount: { args: [T.ptr, T.ptr, T.ptr, T.u64, T.ptr], returns: T.i32 },
  unshare: { args: [T.i32], returns: T.i32 },
  setns: { args: [T.i32, T.i32], returns: T.i32 },
  open: { args: [T.ptr, T.i32], returns: T.i32 },
  __errno_location: { args: [], returns: T.ptr },
}).symbols;
const cstr = (s: string) => ptr(Buffer.from(`${s}\0`));
const errno = () => read.i32(c.__errno_location()!, 0);
const call = (f: () => number) => (f() === 0 ? "ok" : `errno ${errno()}`);

// A thread started before the filter (TSYNC must reach it).
const worker = new Worker(new URL("./worker.ts", import.meta.url).href);
await new Promise((r) => {
  worker.onmessage = r;
  worker.postMessage("hello");
});
const installed = process.argv[2] === "before" ? "not installed" : ((await restrictSelf()) ?? "installed");
const dir = mkdtempSync("/tmp/meshcni-seccomp-");
const net = c.open(cstr("/proc/self/ns/net"), 0o2000000);
const mnt = c.open(cstr("/proc/self/ns/mnt"), 0o2000000);
const child = Bun.spawnSync(["unshare", "-m", "true"], { stderr: "pipe" });
const workerMount = await new Promise((r) => {
  worker.onmessage = (e) => r(e.data);
  worker.postMessage(dir);
});
const server = Bun.serve({ port: 0, fetch: () => new Response("fine") });
const fetched = await (await fetch(`http://127.0.0.1:${server.port}/`)).text();
server.stop(true);
const filters = readdirSync("/proc/self/task").map((t) => {
  const s = readFileSync(`/proc/self/task/${t}/status`, "utf8");
  return Number(/Seccomp_filters:\s+(\d+)/.exec(s)?.[1] ?? -1);
});
console.log(
  JSON.stringify({
    dir,
    installed,
    mount: call(() => c.mount(cstr("none"), cstr(dir), cstr("tmpfs"), 0n, null)),
    unshare: call(() => c.unshare(0x00020000)),
    setnsNet: call(() => c.setns(net, 0x40000000)),
    setnsAny: call(() => c.setns(net, 0)),
    setnsMnt: call(() => c.setns(mnt, 0x00020000)),
    childUnshare: child.exitCode === 0 ? "ok" : `exit ${child.exitCode}`,
    workerMount,
    spawn: Bun.spawnSync(["true"]).exitCode,
    fetched,
    threads: filters.length,
    minFilters: Math.min(...filters),
  }),
);
process.exit(0);
