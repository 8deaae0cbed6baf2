// The nftables backend's transaction without starting a process: the JavaScript thread enters
// the pod's network namespace (setns through bun:ffi), libnftables (the library `nft` itself is
// built on) parses the script and sends it as one netlink batch from a socket opened there, and
// the thread returns to its own namespace before anything else runs. Everything between the two
// setns calls is synchronous FFI: no await, no callback, so the event loop cannot run JavaScript
// (or open a socket) on this thread while it is in the pod's namespace. setns moves only the
// calling thread; the runtime's other threads (its HTTP client, GC helpers) never move. If the
// thread cannot return, the process exits at once rather than run on in the wrong namespace.
// Only libc's own calls are used to open files (node:fs would slow every plugin start).
import type { ExecResult } from "../backend.ts";
import { timedOut } from "./exec.ts";

const CLONE_NEWNET = 0x40000000;
const O_RDONLY_CLOEXEC = 0o2000000;
/** libnftables' NFT_CTX_OUTPUT_NUMERIC_PRIO: chain priorities as numbers, as `nft -y`. */
const OUTPUT_NUMERIC_PRIO = 1 << 8;

type Lib = {
  open(path: string): number;
  close(fd: number): void;
  setns(fd: number): number;
  gettid(): number;
  errno(): number;
  nft: {
    ctxNew(): unknown;
    free(ctx: unknown): void;
    bufferOutput(ctx: unknown): void;
    bufferError(ctx: unknown): void;
    setFlags(ctx: unknown, flags: number): void;
    getFlags(ctx: unknown): number;
    run(ctx: unknown, text: string): number;
    output(ctx: unknown): string;
    error(ctx: unknown): string;
  };
};

let lib: Lib | null | undefined;

/**
 * glibc's loader where the host keeps it. libnftables.so.1 is found the loader's way (the host's
 * ld.so.cache and library folders, after the plugin's own folder), so it is the host's build,
 * run against the plugin's C library: a glibc build loads (or fails to, cleanly, when it needs
 * a newer glibc than the plugin's), but a musl build would pull musl's libc into this process.
 * A host without glibc's loader is taken for one whose libraries are not glibc's.
 */
const GLIBC_LOADER = process.arch === "arm64" ? "/lib/ld-linux-aarch64.so.1" : "/lib64/ld-linux-x86-64.so.2";

async function load(): Promise<Lib | null> {
  if (lib !== undefined) return lib;
  if (!(await Bun.file(GLIBC_LOADER).exists())) {
    lib = null;
    return lib;
  }
  try {
    const { dlopen, FFIType: T, ptr } = await import("bun:ffi");
    const c = dlopen("libc.so.6", {
      open: { args: [T.ptr, T.i32], returns: T.i32 },
      close: { args: [T.i32], returns: T.i32 },
      setns: { args: [T.i32, T.i32], returns: T.i32 },
      gettid: { args: [], returns: T.i32 },
      __errno_location: { args: [], returns: T.ptr },
    }).symbols;
    const n = dlopen("libnftables.so.1", {
      nft_ctx_new: { args: [T.u32], returns: T.ptr },
      nft_ctx_free: { args: [T.ptr], returns: T.void },
      nft_ctx_buffer_output: { args: [T.ptr], returns: T.i32 },
      nft_ctx_buffer_error: { args: [T.ptr], returns: T.i32 },
      nft_ctx_output_get_flags: { args: [T.ptr], returns: T.u32 },
      nft_ctx_output_set_flags: { args: [T.ptr, T.u32], returns: T.void },
      nft_ctx_get_output_buffer: { args: [T.ptr], returns: T.cstring },
      nft_ctx_get_error_buffer: { args: [T.ptr], returns: T.cstring },
      nft_run_cmd_from_buffer: { args: [T.ptr, T.ptr], returns: T.i32 },
    }).symbols;
    const cstr = (s: string) => ptr(Buffer.from(`${s}\0`));
    const { read } = await import("bun:ffi");
    lib = {
      open: (path) => c.open(cstr(path), O_RDONLY_CLOEXEC),
      close: (fd) => void c.close(fd),
      setns: (fd) => c.setns(fd, CLONE_NEWNET),
      gettid: () => c.gettid(),
      errno: () => read.i32(c.__errno_location()!, 0),
      nft: {
        ctxNew: () => n.nft_ctx_new(0),
        free: (ctx) => n.nft_ctx_free(ctx as never),
        bufferOutput: (ctx) => void n.nft_ctx_buffer_output(ctx as never),
        bufferError: (ctx) => void n.nft_ctx_buffer_error(ctx as never),
        setFlags: (ctx, f) => n.nft_ctx_output_set_flags(ctx as never, f),
        getFlags: (ctx) => n.nft_ctx_output_get_flags(ctx as never),
        run: (ctx, text) => n.nft_run_cmd_from_buffer(ctx as never, cstr(text)),
        output: (ctx) => String(n.nft_ctx_get_output_buffer(ctx as never) ?? ""),
        error: (ctx) => String(n.nft_ctx_get_error_buffer(ctx as never) ?? ""),
      },
    };
  } catch {
    lib = null;
  }
  return lib;
}

/** Whether libnftables can be loaded here (then `nft` and `nsenter` are not needed for nft). */
export async function nftLibraryAvailable(): Promise<boolean> {
  return (await load()) !== null;
}

export interface InProcessOptions {
  /** Called inside the pod's namespace, between the two setns calls (tests look at the threads). */
  observe?: (tid: number) => void;
  /** `nft -y`: priorities as numbers (CHECK's listing). */
  numericPriority?: boolean;
}

/**
 * Runs an nft script (or command, e.g. `list table ip meshcni`) in the network namespace at
 * `netns`, in this process. Undefined when libnftables is not available.
 */
export async function nftInProcess(
  netns: string,
  text: string,
  opts: InProcessOptions = {},
): Promise<ExecResult | undefined> {
  const l = await load();
  if (!l) return undefined;
  const home = l.open("/proc/thread-self/ns/net");
  if (home < 0)
    return { code: 1, stdout: "", stderr: `cannot open this thread's network namespace (errno ${l.errno()})` };
  const target = l.open(netns);
  if (target < 0) {
    l.close(home);
    return { code: 1, stdout: "", stderr: `cannot open ${netns} (errno ${l.errno()})` };
  }
  let result: ExecResult;
  // From here to the second setns: synchronous calls only.
  if (l.setns(target) !== 0) {
    result = { code: 1, stdout: "", stderr: `setns into ${netns} failed (errno ${l.errno()})` };
  } else {
    try {
      opts.observe?.(l.gettid());
      const ctx = l.nft.ctxNew();
      if (!ctx) {
        result = { code: 1, stdout: "", stderr: "nft_ctx_new failed" };
      } else {
        l.nft.bufferOutput(ctx);
        l.nft.bufferError(ctx);
        if (opts.numericPriority) l.nft.setFlags(ctx, l.nft.getFlags(ctx) | OUTPUT_NUMERIC_PRIO);
        const rc = l.nft.run(ctx, text);
        result = { code: rc === 0 ? 0 : 1, stdout: l.nft.output(ctx), stderr: l.nft.error(ctx) };
        l.nft.free(ctx);
      }
    } finally {
      if (l.setns(home) !== 0) {
        // Never go on in the pod's namespace.
        Bun.write(
          Bun.stderr,
          `meshcni: could not return to the host's network namespace (errno ${l.errno()}); exiting\n`,
        );
        process.exit(70);
      }
    }
  }
  l.close(target);
  l.close(home);
  return result;
}

/**
 * A backend's `nft` call made without a process where libnftables can: `nft -f -` (the
 * transaction) and `nft -y list …` (CHECK); undefined for any other call (the caller runs `nft`).
 * The call is synchronous and cannot be stopped once begun: the time bound is honoured before it,
 * as a process is never started after it (an ADD may make two: nftables/index.ts).
 */
export async function runNftInProcess(
  netns: string,
  argv: readonly string[],
  stdin: string | undefined,
  signal: AbortSignal,
): Promise<ExecResult | undefined> {
  if (signal.aborted) throw timedOut(["nft", ...argv]);
  if (argv[0] === "-f" && argv[1] === "-" && stdin !== undefined) return nftInProcess(netns, stdin);
  if (argv[0] === "-y") return nftInProcess(netns, argv.slice(1).join(" "), { numericPriority: true });
  return undefined;
}
