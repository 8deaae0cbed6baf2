// What the agent needs from the system, as interfaces; internal/agent/install/io/
// implements them with real files, watches and clocks.
import type { HostVerdict } from "./hostcheck/check.ts";
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
  /** sha256 (hex) of a file's bytes; undefined when absent. */
  hash(path: string): string | undefined;
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
  /** Copies `src` to `dest` the same way. */
  copyAtomic(src: string, dest: string, mode: number): void;
  /** True when something was removed. */
  remove(path: string): boolean;
  ensureDir(dir: string): void;
  /**
   * Undoes what an interrupted write left in `dir`: removes its temp files and puts back, under
   * their names, host files it had taken aside (unless the host wrote the name again). Returns
   * the names it removed or put back.
   */
  recoverInterruptedWrites(dir: string): string[];
}

export interface Watch {
  close(): void;
}
/** Calls onChange(name) for each change in `dir`, onError when the watch ends. */
export type WatchDir = (dir: string, onChange: (name: string | null) => void, onError: (e: Error) => void) => Watch;

/** Whether the host whose root is mounted at `hostRoot` can run `binary` (internal/agent/install/hostcheck). */
export type CanRunOnHost = (hostRoot: string, binary: string) => HostVerdict;

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
  /** Without it (or without config.hostRoot), the plugin is installed unchecked. */
  canRun?: CanRunOnHost;
  /** The token for the plugin's kubeconfig; without it no kubeconfig is written (--uninstall). */
  tokens?: PluginTokens;
  /** Epoch milliseconds (Date.now), for the token's expiry. */
  wallClock?: () => number;
}
