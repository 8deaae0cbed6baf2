// The agent's records in memory: every record file of STATE_DIR/containers, read once at start
// and then kept current by
// - the agent's own writes (an ADD it planned),
// - the plugin's reports (an ADD or DEL report names its container: that one file is read again),
// - an inotify watch of the folder (the plugin writes and removes records itself: when it falls
//   back to its kubeconfig, on DEL, on GC), each event re-reading the one file it names,
// - a rescan at each periodic resync (inotify can drop events when its queue overflows), which
//   reads again only the files whose inode, size or modification time changed.
// /status, repair and the records' bound read it instead of the folder.
//
// It also remembers, for a while, the containers whose record went away: a DEL's report arrives
// after the plugin removed the record, and the agent prints the report only for a container it
// held a record of.
import { type FSWatcher, lstatSync, mkdirSync, readdirSync, watch } from "node:fs";
import { basename } from "node:path";
import { type PodRecord, RECORDS_SUBDIR, recordPath } from "../../wire/state.ts";
import type { RecordsRead } from "../../wire/state.ts";
import { isRecordName, readRecordFile } from "./files.ts";
import { safeContainerId } from "../../wire/state.ts";

/** How long a removed record's container is still known (its DEL's report follows at once). */
export const REMOVED_KEPT_MS = 10 * 60_000;
/** The most removed containers remembered; the oldest are forgotten first. */
export const REMOVED_KEPT_MAX = 4096;

interface Entry {
  record: PodRecord | "unreadable";
  /** inode:size:mtime when read from the folder, "" for a record the agent wrote itself. */
  key: string;
}

export interface RecordIndexOptions {
  now?: () => number;
  /** Said once per failure of the watch (it is started again at the next rescan). */
  onWatchError?: (e: Error) => void;
  /** false: no inotify watch (tests that drive the index by hand). */
  watch?: boolean;
}

export class RecordIndex {
  readonly dir: string;
  private readonly byName = new Map<string, Entry>();
  private readonly removed = new Map<string, number>();
  private snapshot: RecordsRead | undefined;
  private watcher: FSWatcher | undefined;
  /** While the records folder does not exist: a watch of the state folder for its creation. */
  private parentWatcher: FSWatcher | undefined;
  /** The watched folder's inode and birth: a folder removed and made again is watched again. */
  private watchedId: string | undefined;
  private closed = false;
  private readonly now: () => number;

  constructor(
    private readonly stateDir: string,
    private readonly o: RecordIndexOptions = {},
  ) {
    this.dir = `${stateDir}/${RECORDS_SUBDIR}`;
    this.now = o.now ?? Date.now;
  }

  /**
   * Reads the folder and starts watching it. A records folder not there yet (no pod has had a
   * record) is not made: the state folder (made 0700 when missing, as for the socket) is watched
   * for it instead.
   */
  start(): this {
    try {
      mkdirSync(this.stateDir, { recursive: true, mode: 0o700 });
    } catch {
      // not writable: the rescan finds nothing, and the periodic resync looks again
    }
    this.rescan();
    return this;
  }

  /** The records and the names of the files that are not records, in file-name order. */
  records(): RecordsRead {
    if (!this.snapshot) {
      const names = [...this.byName.keys()].sort();
      const out: RecordsRead = { records: [], unreadable: [] };
      for (const n of names) {
        const r = this.byName.get(n)!.record;
        if (r === "unreadable") out.unreadable.push(n);
        else out.records.push(r);
      }
      this.snapshot = out;
    }
    return this.snapshot;
  }

  /** Files in the folder: records and files that are not. */
  size(): number {
    return this.byName.size;
  }

  /** The container has a record, or had one within REMOVED_KEPT_MS. */
  knows(containerId: string): boolean {
    const name = nameOf(this.stateDir, containerId);
    if (name === undefined) return false;
    const e = this.byName.get(name);
    if (e && e.record !== "unreadable" && e.record.containerId === containerId) return true;
    const at = this.removed.get(name);
    return at !== undefined && this.now() - at <= REMOVED_KEPT_MS;
  }

  /** The container's record as the index holds it (undefined when none, or not a record). */
  get(containerId: string): PodRecord | undefined {
    const name = nameOf(this.stateDir, containerId);
    const r = name === undefined ? undefined : this.byName.get(name)?.record;
    return r === undefined || r === "unreadable" || r.containerId !== containerId ? undefined : r;
  }

  /** The agent wrote this record. */
  wrote(record: PodRecord): void {
    const name = nameOf(this.stateDir, record.containerId);
    if (name === undefined) return;
    this.set(name, { record, key: "" });
  }

  /**
   * Reads one container's record again (a report named it): kept, changed, or dropped. A name the
   * index never held is not remembered as removed: a report alone is no sign a record was there.
   */
  refresh(containerId: string): void {
    const name = nameOf(this.stateDir, containerId);
    if (name !== undefined) this.readOne(name, undefined, false);
  }

  /**
   * Reads the folder again: files whose inode, size and modification time are unchanged are
   * kept as read; others are read; names gone are dropped. Starts the watch when it is not running.
   */
  rescan(): void {
    if (this.closed) return;
    if (this.o.watch !== false) {
      const id = folderId(this.dir);
      if (this.watcher && id !== this.watchedId) this.stopWatch();
      if (!this.watcher && id !== undefined) this.startWatch(id);
      if (id === undefined) this.watchParent();
      else this.stopParentWatch();
    }
    let names: string[];
    try {
      names = readdirSync(this.dir).filter(isRecordName);
    } catch {
      names = [];
    }
    const seen = new Set(names);
    for (const n of [...this.byName.keys()]) if (!seen.has(n)) this.drop(n);
    for (const n of names) {
      const key = statKey(`${this.dir}/${n}`);
      const held = this.byName.get(n);
      if (key === undefined) this.drop(n);
      else if (!held || held.key !== key) this.readOne(n, key);
    }
  }

  stop(): void {
    this.closed = true;
    this.stopWatch();
    this.stopParentWatch();
  }

  private stopWatch(): void {
    this.watcher?.close();
    this.watcher = undefined;
  }

  /** Watches the state folder until the records folder appears in it (then a rescan watches that). */
  private watchParent(): void {
    if (this.parentWatcher) return;
    const sub = basename(this.dir);
    try {
      const w = watch(this.stateDir, { persistent: false }, (_event, name) => {
        if (name === sub || typeof name !== "string") this.rescan();
      });
      w.on("error", () => {
        if (this.parentWatcher === w) this.stopParentWatch();
      });
      this.parentWatcher = w;
    } catch {
      // no state folder either: the next rescan (the periodic resync) looks again
    }
  }

  private stopParentWatch(): void {
    this.parentWatcher?.close();
    this.parentWatcher = undefined;
  }

  private startWatch(id: string): void {
    const self = basename(this.dir);
    try {
      const w = watch(this.dir, { persistent: false }, (_event, name) => {
        // The folder itself went (its own name): watched again once a rescan finds it.
        if (name === self) this.stopWatch();
        else if (typeof name !== "string")
          this.rescan(); // the kernel did not say which: look at all
        else if (isRecordName(name)) this.readOne(name, undefined, true);
      });
      w.on("error", (e) => {
        if (this.watcher === w) this.watcher = undefined;
        w.close();
        this.o.onWatchError?.(e);
      });
      this.watcher = w;
      this.watchedId = id;
    } catch (e) {
      this.o.onWatchError?.(e as Error);
    }
  }

  /** `seen`: the folder said a file of that name came or went (an inotify event), so it was there. */
  private readOne(name: string, key = statKey(`${this.dir}/${name}`), seen = true): void {
    const r = key === undefined ? undefined : readRecordFile(`${this.dir}/${name}`);
    if (r !== undefined) this.set(name, { record: r, key: key ?? "" });
    else if (seen || this.byName.has(name)) this.drop(name);
  }

  private set(name: string, e: Entry): void {
    this.byName.set(name, e);
    this.removed.delete(name);
    this.snapshot = undefined;
  }

  private drop(name: string): void {
    // A file went (or came and went before it was read): its container is still known for a while.
    const had = this.byName.delete(name);
    this.removed.delete(name);
    this.removed.set(name, this.now());
    if (had) this.snapshot = undefined;
    const cutoff = this.now() - REMOVED_KEPT_MS;
    for (const [n, at] of this.removed) {
      if (at >= cutoff && this.removed.size <= REMOVED_KEPT_MAX) break;
      this.removed.delete(n);
    }
  }
}

/** The record file's name for a container, or undefined for an ID that cannot name one. */
function nameOf(stateDir: string, containerId: string): string | undefined {
  return safeContainerId(containerId) ? basename(recordPath(stateDir, containerId)) : undefined;
}

function folderId(path: string): string | undefined {
  try {
    const st = lstatSync(path, { bigint: true });
    return st.isDirectory() ? `${st.ino}:${st.birthtimeNs}` : undefined;
  } catch {
    return undefined;
  }
}

function statKey(path: string): string | undefined {
  try {
    const st = lstatSync(path, { bigint: true });
    return `${st.ino}:${st.size}:${st.mtimeNs}`;
  } catch {
    return undefined;
  }
}
