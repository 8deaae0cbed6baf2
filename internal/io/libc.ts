// The few file system calls the plugin needs that Bun has no API of its own for (rename, append,
// mkdir), straight from the C library through bun:ffi. node:fs would cost the plugin more to load
// than the rest of a skipped ADD (bench/plugin.ts); this module is imported only when a record or
// the fallback log is written.
import { dlopen, FFIType } from "bun:ffi";

const SYMBOLS = {
  rename: { args: [FFIType.cstring, FFIType.cstring], returns: FFIType.i32 },
  open: { args: [FFIType.cstring, FFIType.i32, FFIType.u32], returns: FFIType.i32 },
  write: { args: [FFIType.i32, FFIType.ptr, FFIType.u64], returns: FFIType.i64 },
  close: { args: [FFIType.i32], returns: FFIType.i32 },
  mkdir: { args: [FFIType.cstring, FFIType.u32], returns: FFIType.i32 },
} as const;

// Linux's values, the same on x86-64 and arm64.
const O_WRONLY = 0o1;
const O_CREAT = 0o100;
const O_APPEND = 0o2000;
const O_CLOEXEC = 0o2000000;

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

/** rename(2); throws when it fails. */
export function rename(from: string, to: string): void {
  if (libc().rename(cstr(from), cstr(to)) !== 0) throw new Error(`cannot rename ${from} to ${to}`);
}

/** mkdir(2) of one folder; an existing one is fine. */
export function mkdir(path: string, mode: number): void {
  libc().mkdir(cstr(path), mode);
}

/** Appends `text` with one write(2) on an O_APPEND descriptor (concurrent appends do not interleave). */
export function append(path: string, text: string, mode: number): void {
  const c = libc();
  const fd = c.open(cstr(path), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, mode);
  if (fd < 0) throw new Error(`cannot open ${path} for appending`);
  try {
    const bytes = Buffer.from(text);
    if (Number(c.write(fd, bytes, bytes.length)) !== bytes.length) throw new Error(`cannot append to ${path}`);
  } finally {
    c.close(fd);
  }
}
