// The few file system calls the plugin needs that Bun has no API of its own for (rename, append,
// mkdir, and the *at() calls that never follow a symbolic link), straight from the C library
// through bun:ffi. node:fs would cost the plugin more to load than the rest of a skipped ADD
// (perf: see docs/benchmarks.md); this module is imported only when a record or the fallback log
// is written.
import { dlopen, FFIType, read } from "bun:ffi";

// The *at() forms only (AT_FDCWD for a path): each symbol bound costs the plugin its wrapper's
// compile when the library is opened.
const SYMBOLS = {
  openat: { args: [FFIType.i32, FFIType.cstring, FFIType.i32, FFIType.u32], returns: FFIType.i32 },
  renameat: { args: [FFIType.i32, FFIType.cstring, FFIType.i32, FFIType.cstring], returns: FFIType.i32 },
  unlinkat: { args: [FFIType.i32, FFIType.cstring, FFIType.i32], returns: FFIType.i32 },
  mkdirat: { args: [FFIType.i32, FFIType.cstring, FFIType.u32], returns: FFIType.i32 },
  write: { args: [FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i64 },
  close: { args: [FFIType.i32], returns: FFIType.i32 },
  // glibc's and musl's name for errno's address.
  __errno_location: { args: [], returns: FFIType.ptr },
} as const;

// Linux's values, the same on x86-64 and arm64 (O_DIRECTORY and O_NOFOLLOW are not: arm64's are
// 0o40000 and 0o100000).
const O_RDONLY = 0;
const O_WRONLY = 0o1;
const O_CREAT = 0o100;
const O_EXCL = 0o200;
const O_APPEND = 0o2000;
const O_CLOEXEC = 0o2000000;
const ARM = process.arch === "arm64";
const AT_FDCWD = -100;
const O_DIRECTORY = ARM ? 0o40000 : 0o200000;
const O_NOFOLLOW = ARM ? 0o100000 : 0o400000;

/** The errno values the callers tell apart, by name (Linux's numbers). */
const ERRNO: Record<number, string> = {
  2: "ENOENT",
  13: "EACCES",
  17: "EEXIST",
  20: "ENOTDIR",
  36: "ENAMETOOLONG",
  40: "ELOOP",
};

type Lib = ReturnType<typeof dlopen<typeof SYMBOLS>>["symbols"];
let lib: Lib | undefined;

function libc(): Lib {
  if (lib) return lib;
  const arch = process.arch === "arm64" ? "aarch64" : "x86_64";
  const errors: string[] = [];
  // glibc, then musl (the -musl build), then whatever the loader calls libc.
  for (const name of ["libc.so.6", `libc.musl-${arch}.so.1`, "libc.so"]) {
    try {
      lib = dlopen(name, SYMBOLS).symbols;
      return lib;
    } catch (e) {
      errors.push(`${name}: ${(e as Error).message}`);
    }
  }
  throw new Error(`cannot load the C library (${errors.join("; ")})`);
}

/** Opens the C library ahead of use (ADD does it while it waits for the agent's answer); never throws. */
export function preload(): void {
  try {
    libc();
  } catch {
    // the call that needs it will say why
  }
}

const cstr = (s: string) => Buffer.from(`${s}\0`);

/** The error of the call that just failed: `code` is errno's name ("ELOOP", ...) when it is one of ERRNO's. */
function failed(what: string): Error & { code?: string } {
  const errno = read.i32(libc().__errno_location()!, 0);
  const code = ERRNO[errno];
  const e = new Error(`${what}: ${code ?? `errno ${errno}`}${code === "ELOOP" ? " (a symbolic link)" : ""}`);
  return Object.assign(e, code ? { code } : {});
}

/** rename(2); throws when it fails. */
export function rename(from: string, to: string): void {
  if (libc().renameat(AT_FDCWD, cstr(from), AT_FDCWD, cstr(to)) !== 0) throw failed(`cannot rename ${from} to ${to}`);
}

/** mkdir(2) of one folder; an existing one is fine. */
export function mkdir(path: string, mode: number): void {
  libc().mkdirat(AT_FDCWD, cstr(path), mode);
}

/** Writes all of `bytes` to `fd`; throws when a write(2) fails. */
function writeAll(c: Lib, fd: number, bytes: Buffer, what: string): void {
  for (let off = 0; off < bytes.length; ) {
    const n = Number(c.write(fd, off === 0 ? bytes : bytes.subarray(off), bytes.length - off));
    if (n <= 0) throw failed(what);
    off += n;
  }
}

/**
 * Appends `text` with one write(2) on an O_APPEND descriptor (concurrent appends do not
 * interleave). O_NOFOLLOW: a symbolic link at `path` is not written through (ELOOP).
 */
export function append(path: string, text: string, mode: number): void {
  const c = libc();
  const fd = c.openat(AT_FDCWD, cstr(path), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw failed(`cannot open ${path} for appending`);
  try {
    const bytes = Buffer.from(text);
    if (Number(c.write(fd, bytes, bytes.length)) !== bytes.length) throw failed(`cannot append to ${path}`);
  } finally {
    c.close(fd);
  }
}

/**
 * A folder's descriptor, for the *At calls below; its last component is never a symbolic link
 * (O_NOFOLLOW: ELOOP when it is one), the ones before it are followed. Close it with closeFd.
 */
export function openDir(path: string): number {
  const fd = libc().openat(AT_FDCWD, cstr(path), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) throw failed(`cannot open the folder ${path}`);
  return fd;
}

export function closeFd(fd: number): void {
  libc().close(fd);
}

/**
 * Creates `name` in the folder `dir` and writes `text` to it: a new file only (O_CREAT|O_EXCL,
 * EEXIST when anything is there, a link included) that is never a link (O_NOFOLLOW).
 */
export function writeNewAt(dir: number, name: string, text: string, mode: number): void {
  const c = libc();
  const fd = c.openat(dir, cstr(name), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw failed(`cannot create ${name}`);
  try {
    writeAll(c, fd, Buffer.from(text), `cannot write ${name}`);
  } finally {
    c.close(fd);
  }
}

/** renameat(2) within the folder `dir`: replaces whatever is at `to` (a link itself, not its target). */
export function renameAt(dir: number, from: string, to: string): void {
  if (libc().renameat(dir, cstr(from), dir, cstr(to)) !== 0) throw failed(`cannot rename ${from} to ${to}`);
}

/** unlinkat(2) of `name` in the folder `dir` (a link itself, not its target); false when nothing was there. */
export function unlinkAt(dir: number, name: string): boolean {
  if (libc().unlinkat(dir, cstr(name), 0) === 0) return true;
  const e = failed(`cannot remove ${name}`);
  if (e.code === "ENOENT") return false;
  throw e;
}
