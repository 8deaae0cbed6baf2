// The agent's way into a pod's network namespace: the JavaScript thread enters it with setns(2)
// (bun:ffi), does only synchronous work there, and returns before anything else runs on it.
// setns moves the calling thread alone: the runtime's other threads (fetch's HTTP thread, which
// carries the API watch; the file and GC helpers) never move, and between the two calls no
// JavaScript of the event loop runs, so the agent's socket, health server and API connections
// are never opened in a pod's namespace (test/agent/apply-netns.test.ts watches them).
//
// Three kinds of work happen inside:
// - libnftables' transaction (internal/firewall/io/nft-inprocess.ts, which switches the same way);
// - reading the namespace's own /proc/thread-self/net files (which legacy iptables tables exist);
// - starting a process: Bun.spawn vforks from the calling thread, so the child starts in the
//   pod's namespace (its /proc/PID/ns/net says so, test/agent/apply-netns.test.ts), with no
//   nsenter in between (one process start less than through nsenter).
// If the thread cannot return to its own namespace, the process exits at once rather than run on
// in a pod's.
import { readFileSync } from "node:fs";
import type { ExecResult } from "../backend.ts";
import { timedOut } from "./exec.ts";

const CLONE_NEWNET = 0x40000000;
const O_RDONLY_CLOEXEC = 0o2000000;

const ERRNO: Record<number, string> = {
  1: "EPERM",
  2: "ENOENT",
  9: "EBADF",
  13: "EACCES",
  22: "EINVAL",
  38: "ENOSYS",
};
export const errnoName = (n: number) => ERRNO[n] ?? `errno ${n}`;

type Libc = {
  open(path: string): number;
  close(fd: number): void;
  setns(fd: number): number;
  errno(): number;
};

let libc: Libc | undefined;

async function load(): Promise<Libc> {
  if (libc) return libc;
  const { dlopen, FFIType: T, ptr, read } = await import("bun:ffi");
  const c = dlopen("libc.so.6", {
    open: { args: [T.ptr, T.i32], returns: T.i32 },
    close: { args: [T.i32], returns: T.i32 },
    setns: { args: [T.i32, T.i32], returns: T.i32 },
    __errno_location: { args: [], returns: T.ptr },
  }).symbols;
  const cstr = (s: string) => ptr(Buffer.from(`${s}\0`));
  libc = {
    open: (path) => c.open(cstr(path), O_RDONLY_CLOEXEC),
    close: (fd) => void c.close(fd),
    setns: (fd) => c.setns(fd, CLONE_NEWNET),
    errno: () => read.i32(c.__errno_location()!, 0),
  };
  return libc;
}

/** Loads libc's functions (at start, so no ADD pays for it). */
export async function loadNetnsCalls(): Promise<void> {
  await load();
}

export class NetnsError extends Error {}

/**
 * Runs `fn` (synchronous) with this thread in the network namespace at `path`, and returns to
 * the thread's own namespace before returning or throwing. Throws NetnsError when the namespace
 * cannot be opened or entered.
 */
export function inNetns<T>(path: string, fn: () => T): T {
  const l = libc;
  if (!l) throw new NetnsError("loadNetnsCalls() was not awaited");
  const home = l.open("/proc/thread-self/ns/net");
  if (home < 0) throw new NetnsError(`cannot open this thread's network namespace (${errnoName(l.errno())})`);
  const target = l.open(path);
  if (target < 0) {
    const e = l.errno();
    l.close(home);
    throw new NetnsError(`cannot open ${path} (${errnoName(e)})`);
  }
  try {
    if (l.setns(target) !== 0) throw new NetnsError(`setns into ${path} failed (${errnoName(l.errno())})`);
    try {
      return fn();
    } finally {
      if (l.setns(home) !== 0) {
        process.stderr.write(
          `meshcni-installer: could not return to its own network namespace (${errnoName(l.errno())}); exiting\n`,
        );
        process.exit(70);
      }
    }
  } finally {
    l.close(target);
    l.close(home);
  }
}

/** Reads these /proc files as the namespace at `path` shows them ("" for one that is not there). */
export function readInNetns(path: string, files: readonly string[]): string[] {
  return inNetns(path, () =>
    files.map((f) => {
      try {
        return readFileSync(f, "utf8");
      } catch {
        return "";
      }
    }),
  );
}

export interface SpawnOptions {
  stdin?: string;
  env?: Record<string, string | undefined>;
  signal: AbortSignal;
}

/** Runs `argv` as a process that starts in the network namespace at `path`. */
export async function spawnInNetns(path: string, argv: readonly string[], o: SpawnOptions): Promise<ExecResult> {
  if (o.signal.aborted) throw timedOut(argv);
  const proc = inNetns(path, () =>
    Bun.spawn([...argv], {
      stdin: o.stdin !== undefined ? new Blob([o.stdin]) : "ignore",
      stdout: "pipe",
      stderr: "pipe",
      ...(o.env ? { env: o.env } : {}),
    }),
  );
  const kill = () => proc.kill("SIGKILL");
  o.signal.addEventListener("abort", kill, { once: true });
  try {
    const [stdout, stderr, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ]);
    if (o.signal.aborted) throw timedOut(argv);
    return { code, stdout, stderr };
  } finally {
    o.signal.removeEventListener("abort", kill);
  }
}

/** setns into `path` and straight back: whether this process may enter namespaces, or why not. */
export function trySetns(path: string): { ok: true } | { ok: false; error: string } {
  try {
    inNetns(path, () => undefined);
    return { ok: true };
  } catch (e) {
    return { ok: false, error: (e as Error).message };
  }
}
