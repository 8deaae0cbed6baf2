// Where the plugin's own loader and C library go on the host, and what the installed binary is
// told to load. Pure.
//
// The node binary is dynamically linked: as built, the kernel starts the host's glibc loader and
// that loader maps the host's libc.so.6, libm.so.6, libpthread.so.0 and libdl.so.2. A host
// without them (Alpine, Talos, NixOS) could not run it. So the agent installs, beside the binary
// in the host's CNI bin folder, a folder holding the loader and exactly the libraries the binary
// loads (the image's own, as the host check lists them), and writes the binary with its program
// interpreter and run path pointing there, as the host sees that folder (--dest-bin-dir). The
// same on every host: the host's C library is never loaded by the plugin.
//
// Layout, under the bin folder:
//   meshcni                       the node binary, rewritten (elf-rewrite.ts)
//   meshcni.d/<id>/               the loader (named as the interpreter's file) and the libraries
//                                 (named as the binary asks for them), <id> a digest of them
// `meshcni.d`: a runtime runs a plugin only by the `type` a conflist names, and no CNI plugin
// is called that; it is a folder, so even a conflist naming it could not run it (EACCES). The
// `.d` says whose it is to someone listing the folder. It lives in the bin folder because that
// folder is on every node, persistent, mounted read-write for the agent already, and on the
// mount the runtime executes plugins from (a noexec mount elsewhere could not map the loader).
// Each set of files gets its own <id> folder, so an upgrade never changes a file a starting
// plugin is loading: a loader of one glibc build and a libc.so.6 of another do not work together.
// The binary is written last; the folders it no longer names go once no plugin started from the
// previous binary can still be loading (STALE_FOLDER_GRACE_MS after the binary was written).
import { createHash } from "node:crypto";
import { ORIGIN } from "./hostcheck/elf-rewrite.ts";

export const PRIVATE_DIR = "meshcni.d";
/** A starting plugin maps its loader and libraries within milliseconds; this leaves it seconds. */
export const STALE_FOLDER_GRACE_MS = 10_000;
/** What the agent names a folder of files inside PRIVATE_DIR: a digest, hex. */
export const FOLDER_NAME = /^[0-9a-f]{16}$/;

export interface PrivateFile {
  /** The name in the folder: the interpreter's file name, or the library's name as DT_NEEDED says. */
  name: string;
  /** sha256 of its bytes, hex. */
  sha256: string;
}

/** The folder's name for these files: a digest of their names and bytes (order does not matter). */
export function planFolderName(files: readonly PrivateFile[]): string {
  const h = createHash("sha256");
  for (const f of [...files].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
    h.update(`${f.name}\0${f.sha256}\n`);
  }
  return h.digest("hex").slice(0, 16);
}

export interface LoaderPaths {
  /** The folder as the host sees it. */
  hostFolder: string;
  /** PT_INTERP: the loader, as the host sees it. */
  interpreter: string;
  /**
   * DT_RPATH: the folder as the host sees it; or, when that name holds a ':' (a run path's
   * separator) or a '$' (which the loader expands), the same folder relative to the binary's own
   * ($ORIGIN, which glibc's loader reads from /proc/self/exe).
   */
  runPath: string;
}

/** The paths the installed binary names, for a bin folder the host sees at `destBinDir`. */
export function planLoaderPaths(destBinDir: string, folder: string, interpreterName: string): LoaderPaths {
  const base = destBinDir.replace(/\/+$/, "");
  const hostFolder = `${base}/${PRIVATE_DIR}/${folder}`;
  return {
    hostFolder,
    interpreter: `${hostFolder}/${interpreterName}`,
    runPath: /[:$]/.test(hostFolder) ? `${ORIGIN}/${PRIVATE_DIR}/${folder}` : hostFolder,
  };
}

/**
 * The folders in PRIVATE_DIR that can go: the agent's own (FOLDER_NAME), other than `keep`, once
 * the binary naming `keep` has been in place for the grace period. Anything else there is not
 * meshcni's to remove.
 */
export function planStaleFolders(
  names: readonly string[],
  keep: string | undefined,
  binaryWrittenMs: number,
  nowMs: number,
): { remove: string[]; wait: string[] } {
  const stale = names.filter((n) => n !== keep && FOLDER_NAME.test(n)).sort();
  return nowMs - binaryWrittenMs >= STALE_FOLDER_GRACE_MS ? { remove: stale, wait: [] } : { remove: [], wait: stale };
}
