// A folder seen as a host's root file system (the host's / mounted read-only at --host-root,
// or a Debian sysroot when the image is built), for internal/hostcheck.
import { closeSync, fstatSync, lstatSync, openSync, readFileSync, readlinkSync, readSync } from "node:fs";
import { checkHostCanRun, type HostVerdict, type RootView } from "../hostcheck/check.ts";
import type { ReadAt } from "../hostcheck/elf.ts";

export function rootView(root: string): RootView {
  const at = (path: string) => (root === "/" ? path : `${root.replace(/\/+$/, "")}${path}`);
  return {
    entry(path) {
      let st;
      try {
        st = lstatSync(at(path));
      } catch {
        return undefined;
      }
      if (st.isSymbolicLink()) return { kind: "symlink", target: readlinkSync(at(path)), size: 0 };
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

/** Whether the host whose root is mounted at `root` can run `binary` (a file in this container). */
export function checkBinaryOnHost(root: string, binary: string, label = binary): HostVerdict {
  const fd = openSync(binary, "r");
  let size: number;
  try {
    size = fstatSync(fd).size;
  } finally {
    closeSync(fd);
  }
  return checkHostCanRun(rootView(root), fileReader(binary), size, label, root);
}
