// A binary given a loader and C library of its own, for the ELF rewrite's tests and benchmark:
// the loader and the libraries the host check says it loads, copied from a root (this machine's
// /, or Debian's arm64 libc6 unpacked) into one folder, and the binary rewritten to use them.
import { chmodSync, copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { buildElfRewrite, type ElfRewrite } from "../../internal/agent/install/hostcheck/elf-rewrite.ts";
import { parseElf } from "../../internal/agent/install/hostcheck/elf.ts";
import { checkBinaryOnHost } from "../../internal/agent/install/io/host-root.ts";

export interface PrivateLoader {
  /** The loader's path as the rewritten binary names it (PT_INTERP). */
  interpreter: string;
  /** The folder of the loader and libraries as the binary names it (DT_RPATH). */
  runPath: string;
  /** The file names copied into the folder. */
  files: string[];
}

/**
 * Copies the loader and libraries `binary` loads in `sysroot` into `under` + `folder` (`under`
 * is a root the binary will run chrooted in, or "" for this machine), named as the binary and
 * the loader ask for them.
 */
export function stagePrivateLoader(binary: string, sysroot: string, folder: string, under = ""): PrivateLoader {
  const verdict = checkBinaryOnHost(sysroot, binary);
  if (verdict.ok !== true) throw new Error(`${binary} in ${sysroot}: ${JSON.stringify(verdict)}`);
  const bytes = readFileSync(binary);
  const loader = parseElf((o, n) => bytes.subarray(o, o + n), bytes.length).interpreter!;
  mkdirSync(join(under, folder), { recursive: true });
  const files: string[] = [];
  for (const f of verdict.files) {
    copyFileSync(join(sysroot, f.real), join(under, folder, basename(f.path)));
    files.push(basename(f.path));
  }
  return { interpreter: join(folder, basename(loader)), runPath: folder, files: files.sort() };
}

/** Writes `src` rewritten to use `loader` at `dest` (mode 0755); returns the rewrite. */
export function writeRewritten(src: string | Uint8Array, dest: string, loader: PrivateLoader): ElfRewrite {
  const input = typeof src === "string" ? readFileSync(src) : src;
  const r = buildElfRewrite(input, { interpreter: loader.interpreter, runPath: loader.runPath });
  writeFileSync(dest, r.bytes);
  chmodSync(dest, 0o755);
  return r;
}
