// Watching folders with inotify (node:fs watch): the agent sleeps until something changes.
import { type FSWatcher, watch } from "node:fs";
import type { Watch, WatchDir } from "../deps.ts";

/**
 * Calls `onChange(name)` for every change in `dir` (name may be null when the kernel does not
 * say), and `onError` when the watch ends (the folder went away, or inotify gave up).
 */
export const watchDir: WatchDir = (dir, onChange, onError): Watch => {
  let w: FSWatcher;
  try {
    w = watch(dir, { persistent: true }, (_event, name) => onChange(typeof name === "string" ? name : null));
  } catch (e) {
    throw new Error(`cannot watch ${dir}: ${(e as Error).message}`, { cause: e });
  }
  w.on("error", (e) => onError(new Error(`watching ${dir} stopped: ${e.message}`, { cause: e })));
  return { close: () => w.close() };
};
