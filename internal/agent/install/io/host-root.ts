// A folder seen as a host's root file system, for internal/agent/install/hostcheck: on a node, the host's
// HOST_CHECK_PATHS mounted read-only at the same paths under --host-root (the DaemonSet's
// mounts); when the image is built, a Debian sysroot.
import { closeSync, fstatSync, lstatSync, openSync, readFileSync, readlinkSync, readSync, statSync } from "node:fs";
import {
  checkHostCanRun,
  describeHostLibc,
  HOST_CHECK_PATHS,
  type HostVerdict,
  limitView,
  type RootView,
} from "../hostcheck/check.ts";
import type { ReadAt } from "../hostcheck/elf.ts";

/**
 * A mount of the host's /lib or /lib64 shows the folder it leads to, not the link the host has
 * (a merged /usr's `/lib64 -> usr/lib64`): the same folder as another mount means that link, and
 * the view shows it, so relative links inside resolve as on the host. First match wins.
 */
const ALIASES: Record<string, string[]> = {
  "/lib": ["usr/lib"],
  "/lib64": ["usr/lib64", "usr/lib", "lib"],
};

export function rootView(root: string): RootView {
  const at = (path: string) => (root === "/" ? path : `${root.replace(/\/+$/, "")}${path}`);
  const sameFolder = (a: string, b: string) => {
    const x = statSync(at(a), { throwIfNoEntry: false });
    const y = statSync(at(b), { throwIfNoEntry: false });
    return !!x && !!y && x.isDirectory() && x.dev === y.dev && x.ino === y.ino;
  };
  return {
    entry(path) {
      let st;
      try {
        st = lstatSync(at(path));
      } catch {
        return undefined;
      }
      if (st.isSymbolicLink()) return { kind: "symlink", target: readlinkSync(at(path)), size: 0 };
      const alias = st.isDirectory() ? ALIASES[path]?.find((to) => sameFolder(path, `/${to}`)) : undefined;
      if (alias) return { kind: "symlink", target: alias, size: 0 };
      return { kind: st.isFile() ? "file" : st.isDirectory() ? "dir" : "other", size: st.size };
    },
    reader: (path) => fileReader(at(path)),
    readFile(path) {
      try {
        return readFileSync(at(path));
      } catch {
        return undefined;
      }
    },
  };
}

/** Reads ranges of a file, opening it for each read (the checks read a handful of ranges). */
export function fileReader(file: string): ReadAt {
  return (offset, length) => {
    const fd = openSync(file, "r");
    try {
      const buf = new Uint8Array(length);
      const n = readSync(fd, buf, 0, length, offset);
      return buf.subarray(0, n);
    } finally {
      closeSync(fd);
    }
  };
}

/**
 * Whether the host whose paths are mounted under `root` can run `binary` (a file in this
 * container), looking only at `sees` (HOST_CHECK_PATHS: what the DaemonSet mounts).
 */
export function checkBinaryOnHost(
  root: string,
  binary: string,
  label = binary,
  sees: readonly string[] = HOST_CHECK_PATHS,
  loadedBy?: string,
): HostVerdict {
  const fd = openSync(binary, "r");
  let size: number;
  try {
    size = fstatSync(fd).size;
  } finally {
    closeSync(fd);
  }
  return checkHostCanRun(limitView(rootView(root), sees), fileReader(binary), size, label, root, loadedBy);
}

/** What C library the host whose paths are mounted under `root` has (internal/agent/install/hostcheck). */
export function readHostLibc(root: string, machine: string, sees: readonly string[] = HOST_CHECK_PATHS): string {
  return describeHostLibc(limitView(rootView(root), sees), machine);
}
