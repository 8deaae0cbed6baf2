// The agent's files: atomic writes and copies (temp file in the same folder, fsync, rename),
// so that a runtime, or a restart after kill -9, never sees a torn file.
import { dlopen, FFIType } from "bun:ffi";
import { randomBytes } from "node:crypto";
import {
  closeSync,
  existsSync,
  fchmodSync,
  fsyncSync,
  linkSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { basename, dirname, join, normalize } from "node:path";
import type { FileStat, FolderFile, HostFs, Patch } from "../deps.ts";
import { fileReader } from "./host-root.ts";
import type { Observed } from "../plan.ts";

/** Temp files end like this: no runtime reads them (not .conf/.conflist/.json) and start-up removes them. */
const TEMP_SUFFIX = ".meshcni-tmp";
const isTemp = (name: string) => name.startsWith(".") && name.endsWith(TEMP_SUFFIX);
/** A host file taken aside by removeIfUnchanged; put back at start-up if a kill -9 left it there. */
const HELD_SUFFIX = ".meshcni-held";
const heldName = (path: string) =>
  `${dirname(path)}/.${basename(path)}.${randomBytes(4).toString("hex")}${HELD_SUFFIX}`;
const heldOriginal = (name: string) => /^\.(.+)\.[0-9a-f]{8}\.meshcni-held$/.exec(name)?.[1];

const RENAME_EXCHANGE = 2;
let exchange: ((a: string, b: string) => boolean) | null | undefined;

/** renameat2(RENAME_EXCHANGE) from libc: swaps two names atomically; null where it cannot be loaded. */
function loadExchange(): ((a: string, b: string) => boolean) | null {
  if (exchange !== undefined) return exchange;
  try {
    const libc = dlopen("libc.so.6", {
      renameat2: {
        args: [FFIType.i32, FFIType.cstring, FFIType.i32, FFIType.cstring, FFIType.u32],
        returns: FFIType.i32,
      },
    });
    const AT_FDCWD = -100;
    exchange = (a, b) =>
      libc.symbols.renameat2(AT_FDCWD, Buffer.from(`${a}\0`), AT_FDCWD, Buffer.from(`${b}\0`), RENAME_EXCHANGE) === 0;
  } catch {
    exchange = null;
  }
  return exchange;
}

const textOf = (path: string) => new TextDecoder().decode(readFileSync(path));
const sameBytes = (path: string, bytes: Uint8Array) => Buffer.compare(readFileSync(path), bytes) === 0;

const code = (e: unknown) => (e as NodeJS.ErrnoException).code;

function hint(e: unknown): string {
  switch (code(e)) {
    case "EROFS":
      return " (a read-only file system: mount the host folder writable)";
    case "EACCES":
    case "EPERM":
      return " (permission denied: the agent runs as root with the host folders mounted)";
    case "ENOSPC":
      return " (the disk is full)";
    default:
      return "";
  }
}

function wrap(what: string, path: string, e: unknown): Error {
  return new Error(`cannot ${what} ${path}: ${(e as Error).message}${hint(e)}`, { cause: e });
}

/** A host folder mounted into the agent's container: `host` as the host sees it, `container` here. */
export interface HostFolder {
  host: string;
  container: string;
}

const under = (path: string, dir: string) => path === dir || path.startsWith(dir.endsWith("/") ? dir : `${dir}/`);

/**
 * Where a symbolic link at `linkPath` (a path in this container) leads, read as the host reads
 * it: an absolute target, or a relative one taken from the link's folder as the host sees it,
 * names a host path, found here through the folder it lies in. Undefined when the link leaves
 * every mounted host folder (meshcni cannot reach that file). With no folder holding the link
 * (no mapping known), the link is read in this container's view. Pure.
 */
export function hostLinkTarget(linkPath: string, target: string, folders: readonly HostFolder[]): string | undefined {
  const mount = folders.find((f) => under(linkPath, f.container));
  if (!mount) return target.startsWith("/") ? normalize(target) : normalize(join(dirname(linkPath), target));
  const onHost = target.startsWith("/")
    ? normalize(target)
    : normalize(join(dirname(mount.host + linkPath.slice(mount.container.length)), target));
  const home = [...folders].sort((a, b) => b.host.length - a.host.length).find((f) => under(onHost, f.host));
  return home && normalize(home.container + onHost.slice(home.host.length));
}

/**
 * The file a path names; a symlinked config is read and written where the link points, as the
 * host resolves it (hostLinkTarget), keeping the link. Absent or dangling: the path the chain
 * of links ends at.
 */
function resolveTarget(path: string, folders: readonly HostFolder[]): string {
  let cur = path;
  for (let hops = 0; hops < 40; hops++) {
    let target: string;
    try {
      if (!lstatSync(cur).isSymbolicLink()) return cur;
      target = readlinkSync(cur);
    } catch {
      return cur;
    }
    const next = hostLinkTarget(cur, target, folders);
    if (next === undefined) {
      throw new Error(
        `${path} is a symbolic link to ${target}, outside the host folders meshcni has mounted ` +
          `(${folders.map((f) => f.host).join(", ")}); meshcni cannot read or write it from its container: ` +
          "put the file itself in the folder, or link it within the folder",
      );
    }
    cur = next;
  }
  throw new Error(`${path}: too many levels of symbolic links`);
}

/** A new file at `path`, a copy of `f.source`, with `f.mode`, made durable. */
function fillFile(path: string, f: FolderFile): void {
  const fd = openSync(path, "wx", f.mode);
  try {
    streamPatched(f.source, undefined, (b) => writeAll(fd, b));
    fchmodSync(fd, f.mode);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function tempName(target: string): string {
  return `${dirname(target)}/.${basename(target)}.${randomBytes(4).toString("hex")}${TEMP_SUFFIX}`;
}

/**
 * fsync of a folder: makes the renames, links and unlinks in it durable, so a crash of the node
 * right after a write cannot bring back the old name (or lose the new one) at boot. Folders
 * whose file system cannot sync one (EINVAL) are left as they are.
 */
export function syncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, "r");
    fsyncSync(fd);
  } catch (e) {
    if (code(e) !== "EINVAL" && code(e) !== "ENOENT") throw wrap("sync", dir, e);
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/**
 * Fills a temp file, makes it durable, puts it in place with `place` (a rename by default) and
 * syncs the folder.
 */
function commit(
  tmp: string,
  target: string,
  fill: (fd: number) => void,
  mode: number,
  sync: (dir: string) => void,
  place = (t: string) => {
    renameSync(t, target);
    return true;
  },
): boolean {
  let fd: number | undefined;
  try {
    fill((fd = openSync(tmp, "wx", mode)));
    fchmodSync(fd, mode);
    fsyncSync(fd);
    closeSync(fd);
    fd = undefined;
    const placed = place(tmp);
    sync(dirname(target));
    return placed;
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

const BLOCK = 1 << 20;

/**
 * The bytes of `src` as `patch` rewrites them (all of them without one), block by block, to
 * `each`: never more than one block in memory, whatever the file's size.
 */
function streamPatched(src: string, patch: Patch | undefined, each: (block: Uint8Array) => void): void {
  const fd = openSync(src, "r");
  try {
    const buf = new Uint8Array(BLOCK);
    if (!patch) {
      for (let n; (n = readSync(fd, buf, 0, buf.length, null)) > 0; ) each(buf.subarray(0, n));
      return;
    }
    for (let at = 0; at < patch.size; ) {
      const block = buf.subarray(0, Math.min(BLOCK, patch.size - at));
      block.fill(0);
      const fromSource = Math.max(0, Math.min(block.length, patch.keep - at));
      for (let got = 0; got < fromSource; ) {
        const n = readSync(fd, block, got, fromSource - got, at + got);
        if (n === 0) throw new Error(`${src} ended at ${at + got} bytes, before the ${patch.keep} the rewrite keeps`);
        got += n;
      }
      for (const w of patch.writes) {
        const from = Math.max(at, w.offset);
        const to = Math.min(at + block.length, w.offset + w.bytes.length);
        if (from < to) block.set(w.bytes.subarray(from - w.offset, to - w.offset), from - at);
      }
      each(block);
      at += block.length;
    }
  } finally {
    closeSync(fd);
  }
}

function writeAll(fd: number, bytes: Uint8Array): void {
  for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
}

/** Removes a tree without following links; true when something was there. */
function removeTree(path: string): boolean {
  if (lstatSync(path, { throwIfNoEntry: false }) === undefined) return false;
  rmSync(path, { recursive: true, force: true });
  return true;
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

/**
 * `folders`: the host folders mounted here (--dest-net-dir at --host-net-dir), so that a link
 * the host wrote is followed as the host follows it, not into this container's own files.
 */
export function createHostFs(folders: readonly HostFolder[] = [], sync: (dir: string) => void = syncDir): HostFs {
  const resolve = (path: string) => {
    try {
      return resolveTarget(path, folders);
    } catch (e) {
      throw wrap("follow", path, e);
    }
  };
  return {
    list(dir) {
      try {
        return readdirSync(dir);
      } catch (e) {
        if (code(e) === "ENOENT") return undefined;
        throw wrap("list", dir, e);
      }
    },
    read(link): Observed | undefined {
      const path = resolve(link);
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
    stat: (path) => statOf(resolve(path)),
    hash(link, patch) {
      const path = resolve(link);
      if (!statOf(path)) return undefined;
      const hasher = new Bun.CryptoHasher("sha256");
      try {
        streamPatched(path, patch, (b) => hasher.update(b));
      } catch (e) {
        throw wrap("read", path, e);
      }
      return hasher.digest("hex");
    },
    reader(link) {
      const path = resolve(link);
      const s = statOf(path);
      return s && { read: fileReader(path), size: s.size };
    },
    isDir(path) {
      try {
        return statSync(path).isDirectory();
      } catch {
        return false;
      }
    },
    writeAtomic(path, data, mode) {
      const target = resolve(path);
      const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
      commit(
        tempName(target),
        target,
        (fd) => {
          for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
        },
        mode,
        sync,
      );
    },
    replaceIfUnchanged(path, data, mode, expected) {
      const target = resolve(path);
      const bytes = typeof data === "string" ? new TextEncoder().encode(data) : data;
      return commit(
        tempName(target),
        target,
        (fd) => {
          for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
        },
        mode,
        sync,
        (tmp) => {
          if (expected === null) {
            // Only while there is still no file: a link fails when the name exists.
            try {
              linkSync(tmp, target);
            } catch (e) {
              if (code(e) !== "EEXIST") throw e;
              unlinkSync(tmp);
              return false;
            }
            unlinkSync(tmp);
            return true;
          }
          const swap = loadExchange();
          if (swap?.(tmp, target)) {
            // The temp name now holds what was the file: is it what the plan was made from?
            if (textOf(tmp) === expected) {
              unlinkSync(tmp);
              return true;
            }
            // The host wrote the file meanwhile: give its write back. If the host wrote yet again
            // in these microseconds, that newest write is the one that stays.
            if (swap(tmp, target) && !sameBytes(tmp, bytes)) renameSync(tmp, target);
            else unlinkSync(tmp);
            return false;
          }
          // No RENAME_EXCHANGE (or the file went away): compare right before renaming.
          if (!existsSync(target) || textOf(target) !== expected) {
            unlinkSync(tmp);
            return false;
          }
          renameSync(tmp, target);
          return true;
        },
      );
    },
    removeIfUnchanged(path, expected) {
      const held = heldName(path);
      try {
        renameSync(path, held);
      } catch (e) {
        if (code(e) === "ENOENT") return "absent";
        throw wrap("remove", path, e);
      }
      if (textOf(held) === expected) {
        unlinkSync(held);
        sync(dirname(path));
        return "removed";
      }
      // Not what the plan was made from: back it goes, unless the host wrote the name again meanwhile.
      try {
        linkSync(held, path);
      } catch (e) {
        if (code(e) !== "EEXIST") throw wrap("restore", path, e);
      }
      unlinkSync(held);
      sync(dirname(path));
      return "changed";
    },
    copyAtomic(src, dest, mode, patch) {
      if (!statOf(src)) throw wrap("read", src, Object.assign(new Error("no such file"), { code: "ENOENT" }));
      commit(tempName(dest), dest, (fd) => streamPatched(src, patch, (b) => writeAll(fd, b)), mode, sync);
    },
    placeFolder(parent, name, files) {
      const target = `${parent}/${name}`;
      const tmp = tempName(target);
      try {
        mkdirSync(tmp, { mode: 0o755 });
        for (const f of files) fillFile(`${tmp}/${f.name}`, f);
        sync(tmp);
        if (lstatSync(target, { throwIfNoEntry: false }) === undefined) renameSync(tmp, target);
        else {
          // Swapped in one step where the kernel can; else the old folder is renamed aside first
          // (a moment without the name, only ever for a folder that was not what it should be).
          const swap = loadExchange();
          if (!swap?.(tmp, target)) {
            renameSync(target, tempName(target));
            renameSync(tmp, target);
          }
        }
        sync(parent);
      } catch (e) {
        throw wrap("write", target, e);
      } finally {
        // The temp name, if the folder never took the name, or the old folder after a swap.
        removeTree(tmp);
      }
      for (const name of this.list(parent) ?? []) {
        if (isTemp(name) && name.startsWith(`.${basename(target)}.`)) removeTree(`${parent}/${name}`);
      }
    },
    remove(path) {
      try {
        unlinkSync(path);
        sync(dirname(path));
        return true;
      } catch (e) {
        if (code(e) === "ENOENT") return false;
        throw wrap("remove", path, e);
      }
    },
    removeTree(path) {
      try {
        if (!removeTree(path)) return false;
      } catch (e) {
        throw wrap("remove", path, e);
      }
      sync(dirname(path));
      return true;
    },
    ensureDir(dir) {
      try {
        mkdirSync(dir, { recursive: true });
      } catch (e) {
        throw wrap("create", dir, e);
      }
    },
    recoverInterruptedWrites(dir) {
      const removed: string[] = [];
      for (const name of this.list(dir) ?? []) {
        const original = heldOriginal(name);
        // A host file taken aside when a kill -9 came: back under its name, unless the host wrote it again.
        if (original !== undefined && !existsSync(`${dir}/${original}`)) {
          renameSync(`${dir}/${name}`, `${dir}/${original}`);
          removed.push(name);
          continue;
        }
        if (!isTemp(name) && original === undefined) continue;
        // A temp name may hold a folder (placeFolder's, or the old one it swapped out).
        if (this.isDir(`${dir}/${name}`) ? this.removeTree(`${dir}/${name}`) : this.remove(`${dir}/${name}`))
          removed.push(name);
      }
      if (removed.length > 0) sync(dir);
      return removed;
    },
  };
}
