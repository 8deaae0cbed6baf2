// What the agent needs from the system, as interfaces; internal/agent/install/io/
// implements them with real files, watches and clocks.
import type { HostVerdict } from "./hostcheck/check.ts";
import type { ReadAt } from "./hostcheck/elf.ts";
import type { PluginAccount, PluginToken } from "./token.ts";
import type { Observed } from "./plan.ts";
import type { Logger } from "../../log/logger.ts";

export interface FileStat {
  size: number;
  mtimeMs: number;
  ino: number;
  mode: number;
}

export interface HostFs {
  /** Names in a folder; undefined when the folder does not exist. */
  list(dir: string): string[] | undefined;
  /** A regular file (symlinks followed); undefined when absent or not a regular file. */
  read(path: string): Observed | undefined;
  readText(path: string): string | undefined;
  stat(path: string): FileStat | undefined;
  /** sha256 (hex) of a file's bytes (as `patch` rewrites them, if given); undefined when absent. */
  hash(path: string, patch?: Patch): string | undefined;
  /** Reads ranges of a regular file (symlinks followed); undefined when absent. */
  reader(path: string): { read: ReadAt; size: number } | undefined;
  /** A folder there (symlinks followed). */
  isDir(path: string): boolean;
  /** Temp file in the same folder, fsync, rename: readers see the old bytes or the new ones. */
  writeAtomic(path: string, data: Uint8Array | string, mode: number): void;
  /**
   * Like writeAtomic, but only if the file still holds `expected` (decoded as UTF-8; null: it
   * is absent) at the instant it is replaced. False, with the file left as the host wrote it,
   * when it changed meanwhile.
   */
  replaceIfUnchanged(path: string, data: Uint8Array | string, mode: number, expected: string | null): boolean;
  /** Removes the file only if it still holds `expected`. */
  removeIfUnchanged(path: string, expected: string): "removed" | "absent" | "changed";
  /** Copies `src` to `dest` the same way, rewritten by `patch` on the way when given. */
  copyAtomic(src: string, dest: string, mode: number, patch?: Patch): void;
  /**
   * Puts the folder `parent/name` in place holding exactly `files` (copies of `source`, each
   * with its mode): filled and made durable under a temp name, then renamed there (swapped with
   * what held the name, which then goes). Readers see the old folder or the whole new one.
   */
  placeFolder(parent: string, name: string, files: readonly FolderFile[]): void;
  /** True when something was removed. */
  remove(path: string): boolean;
  /** Removes a folder and everything in it (links are removed, not followed); true when something was removed. */
  removeTree(path: string): boolean;
  ensureDir(dir: string): void;
  /**
   * Undoes what an interrupted write left in `dir`: removes its temp files and puts back, under
   * their names, host files it had taken aside (unless the host wrote the name again). Returns
   * the names it removed or put back.
   */
  recoverInterruptedWrites(dir: string): string[];
}

/** A file rewritten on the way: the source's first `keep` bytes, zeros up to `size`, then `writes` over them. */
export interface Patch {
  keep: number;
  size: number;
  writes: readonly { offset: number; bytes: Uint8Array }[];
}

export interface FolderFile {
  name: string;
  /** The file copied (a path here). */
  source: string;
  mode: number;
}

export interface Watch {
  close(): void;
}
/** Calls onChange(name) for each change in `dir`, onError when the watch ends. */
export type WatchDir = (dir: string, onChange: (name: string | null) => void, onError: (e: Error) => void) => Watch;

/** Whether the host whose root is mounted at `hostRoot` can run `binary` (internal/agent/install/hostcheck). */
export type CanRunOnHost = (hostRoot: string, binary: string) => HostVerdict;

/** What C library the host whose root is mounted at `hostRoot` has for `machine` (a name, "x86-64"), in words. */
export type ReadHostLibc = (hostRoot: string, machine: string) => string;

/** The plugin's token (internal/agent/install/io/token.ts requests and renews it). */
export interface PluginTokens {
  readonly account: PluginAccount;
  /** The token the plugin's kubeconfig carries now; undefined until one arrived. */
  current(): PluginToken | undefined;
  /** Why the last request failed, while requests fail. */
  problem(): string | undefined;
}

export interface InstallerDeps {
  fs: HostFs;
  log: Logger;
  /** Milliseconds, monotonic enough for back-off. */
  now(): number;
  /**
   * Checks a binary against a root: the host's (config.hostRoot; without it, or without
   * config.hostRoot, the host is not looked at), and the agent's own (config.libraryRoot), whose
   * loader and libraries go with the plugin. Without it the plugin is installed as it is.
   */
  canRun?: CanRunOnHost;
  /** Says what C library the host has (config.hostRoot), for the log and /status. */
  hostLibc?: ReadHostLibc;
  /** The token for the plugin's kubeconfig; without it no kubeconfig is written (--uninstall). */
  tokens?: PluginTokens;
  /** Epoch milliseconds (Date.now), for the token's expiry. */
  wallClock?: () => number;
}
