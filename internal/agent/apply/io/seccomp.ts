// Puts the agent's own seccomp filter (seccomp-filter.ts) on every thread of this process, and so
// on every process it starts from now on: prctl(PR_SET_NO_NEW_PRIVS) (the DaemonSet's
// allowPrivilegeEscalation: false has set it already), then seccomp(SECCOMP_SET_MODE_FILTER,
// SECCOMP_FILTER_FLAG_TSYNC). A filter can only be added, never removed or loosened.
import { buildSeccompFilter, seccompArch } from "../seccomp-filter.ts";

const PR_SET_NO_NEW_PRIVS = 38;
const SECCOMP_SET_MODE_FILTER = 1;
const SECCOMP_FILTER_FLAG_TSYNC = 1;
const SYS_SECCOMP = { x86_64: 317, aarch64: 277 } as const;

/** Installs the filter; undefined when done, else why not. */
export async function restrictSelf(): Promise<string | undefined> {
  const arch = seccompArch(process.arch);
  if (!arch) return `no seccomp filter for ${process.arch}`;
  const { dlopen, FFIType: T, ptr, read } = await import("bun:ffi");
  const c = dlopen("libc.so.6", {
    prctl: { args: [T.i32, T.u64, T.u64, T.u64, T.u64], returns: T.i32 },
    syscall: { args: [T.i64, T.u64, T.u64, T.ptr], returns: T.i64 },
    __errno_location: { args: [], returns: T.ptr },
  }).symbols;
  const errno = () => read.i32(c.__errno_location()!, 0);
  if (c.prctl(PR_SET_NO_NEW_PRIVS, 1n, 0n, 0n, 0n) !== 0) return `PR_SET_NO_NEW_PRIVS failed (errno ${errno()})`;
  const filter = buildSeccompFilter(arch);
  // struct sock_fprog: unsigned short len; (padding); struct sock_filter *filter.
  const fprog = new Uint8Array(16);
  const view = new DataView(fprog.buffer);
  view.setUint16(0, filter.length / 8, true);
  view.setBigUint64(8, BigInt(ptr(filter)), true);
  const r = Number(
    c.syscall(
      BigInt(SYS_SECCOMP[arch]),
      BigInt(SECCOMP_SET_MODE_FILTER),
      BigInt(SECCOMP_FILTER_FLAG_TSYNC),
      ptr(fprog),
    ),
  );
  // Kept alive until here: the kernel copies the program during the call.
  void filter.length;
  if (r === 0) return undefined;
  if (r > 0) return `thread ${r} could not take the filter`;
  return `seccomp(SECCOMP_SET_MODE_FILTER) failed (errno ${errno()})`;
}
