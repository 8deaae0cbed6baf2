// The installer's files: atomic writes and copies (temp file in the same folder, fsync, rename),
// so that a runtime, or a restart after kill -9, never sees a torn file.
import { randomBytes } from "node:crypto";
import {
  closeSync, fchmodSync, fsyncSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync,
  realpathSync, renameSync, statSync, unlinkSync, writeSync,
} from "node:fs";
import { basename, dirname } from "node:path";
import type { FileStat, HostFs } from "../installer/deps.ts";
import type { Observed } from "../installer/plan.ts";

/** Temp files end like this: no runtime reads them (not .conf/.conflist/.json) and start-up removes them. */
const TEMP_SUFFIX = ".meshcni-tmp";
const isTemp = (name: string) => name.startsWith(".") && name.endsWith(TEMP_SUFFIX);

const code = (e: unknown) => (e as NodeJS.ErrnoException).code;

function hint(e: unknown): string {
  switch (code(e)) {
    case "EROFS": return " (a read-only file system: mount the host folder writable)";
    case "EACCES": case "EPERM": return " (permission denied: the installer runs as root with the host folders mounted)";
    case "ENOSPC": return " (the disk is full)";
    default: return "";
  }
}

function wrap(what: string, path: string, e: unknown): Error {
  return new Error(`cannot ${what} ${path}: ${(e as Error).message}${hint(e)}`, { cause: e });
}

/** The file a path names; a symlinked config is written where the link points, keeping the link. */
function resolveTarget(path: string): string {
  try {
    if (lstatSync(path).isSymbolicLink()) return realpathSync(path);
  } catch {
    // absent, or a dangling link: write the path itself
  }
  return path;
}

function tempName(target: string): string {
  return `${dirname(target)}/.${basename(target)}.${randomBytes(4).toString("hex")}${TEMP_SUFFIX}`;
}

function commit(tmp: string, target: string, fill: (fd: number) => void, mode: number): void {
  let fd: number | undefined;
  try {
    fill((fd = openSync(tmp, "wx", mode)));
    fchmodSync(fd, mode);
    fsyncSync(fd);
    closeSync(fd);
    fd = undefined;
    renameSync(tmp, target);
  } catch (e) {
    if (fd !== undefined) closeSync(fd);
    try {
      unlinkSync(tmp);
    } catch {
      // never created
    }
    throw wrap("write", target, e);
  }
}

function statOf(path: string): FileStat | undefined {
  try {
    const s = statSync(path);
    return s.isFile() ? { size: s.size, mtimeMs: s.mtimeMs, ino: s.ino, mode: s.mode & 0o7777 } : undefined;
  } catch (e) {
    if (code(e) === "ENOENT" || code(e) === "ENOTDIR") return undefined;
    throw wrap("read", path, e);
  }
}

export function createHostFs(): HostFs {
  return {
    list(dir) {
      try {
        return readdirSync(dir);
      } catch (e) {
        if (code(e) === "ENOENT") return undefined;
        throw wrap("list", dir, e);
      }
    },
    read(path): Observed | undefined {
      const s = statOf(path);
      if (!s) return undefined;
      try {
        return { bytes: new Uint8Array(readFileSync(path)), mode: s.mode };
      } catch (e) {
        if (code(e) === "ENOENT") return undefined;
        throw wrap("read", path, e);
      }
    },
    readText(path) {
      const f = this.read(path);
      return f && new TextDecoder().decode(f.bytes);
    },
    stat: statOf,
    hash(path) {
      if (!statOf(path)) return undefined;
      const hasher = new Bun.CryptoHasher("sha256");
      const buf = new Uint8Array(1 << 20);
      const fd = openSync(path, "r");
      try {
        for (let n; (n = readSync(fd, buf, 0, buf.length, null)) > 0;) hasher.update(buf.subarray(0, n));
      } finally {
        closeSync(fd);
      }
      return hasher.digest("hex");
    },
    writeAtomic(path, data, mode) {
      const target = resolveTarget(path);
      const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
      commit(tempName(target), target, (fd) => {
        for (let off = 0; off < bytes.length;) off += writeSync(fd, bytes, off, bytes.length - off);
      }, mode);
    },
    copyAtomic(src, dest, mode) {
      let from: number;
      try {
        from = openSync(src, "r");
      } catch (e) {
        throw wrap("read", src, e);
      }
      try {
        const buf = new Uint8Array(1 << 20);
        commit(tempName(dest), dest, (fd) => {
          for (let n; (n = readSync(from, buf, 0, buf.length, null)) > 0;) {
            for (let off = 0; off < n;) off += writeSync(fd, buf, off, n - off);
          }
        }, mode);
      } finally {
        closeSync(from);
      }
    },
    remove(path) {
      try {
        unlinkSync(path);
        return true;
      } catch (e) {
        if (code(e) === "ENOENT") return false;
        throw wrap("remove", path, e);
      }
    },
    ensureDir(dir) {
      try {
        mkdirSync(dir, { recursive: true });
      } catch (e) {
        throw wrap("create", dir, e);
      }
    },
    removeTempFiles(dir) {
      const removed: string[] = [];
      for (const name of this.list(dir) ?? []) {
        if (!isTemp(name)) continue;
        if (this.remove(`${dir}/${name}`)) removed.push(name);
      }
      return removed;
    },
  };
}
