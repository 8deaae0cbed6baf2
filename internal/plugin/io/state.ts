// The plugin's files in the state folder (internal/wire/protocol.ts): one record per container
// it handled for a Kubernetes pod, and the fallback log it appends to while the agent does not
// answer. Reading uses Bun's own file API; writing, renaming, removing and making folders go
// through internal/plugin/io/libc.ts, loaded only when they are needed, and never through a symbolic
// link: the state folder is the configured one, but a link planted inside it (at a record's or
// the log's name, or as the records folder) is never written, appended or removed through.
import {
  FALLBACK_LOG,
  FALLBACK_LOG_MAX_BYTES,
  type PodRecord,
  RECORDS_SUBDIR,
  recordName,
  recordPath,
  safeContainerId,
} from "../../wire/state.ts";

const isStr = (x: unknown): x is string => typeof x === "string";

/** The record of `containerId`; undefined when there is none, "unreadable" when one is there but is not a record. */
export async function readRecord(stateDir: string, containerId: string): Promise<PodRecord | "unreadable" | undefined> {
  if (!safeContainerId(containerId)) return undefined;
  let text: string;
  try {
    text = await Bun.file(recordPath(stateDir, containerId)).text();
  } catch {
    return undefined;
  }
  try {
    const r = JSON.parse(text) as Record<string, unknown>;
    if (
      r?.v === 1 &&
      r.containerId === containerId &&
      isStr(r.namespace) &&
      isStr(r.name) &&
      (r.decision === "meshed" || r.decision === "skipped")
    ) {
      return r as unknown as PodRecord;
    }
  } catch {
    // below
  }
  return "unreadable";
}

/** A temp name in the records folder: a dot (no reader lists it), part of the record's name, random bytes. */
function tempName(name: string): string {
  const bytes = crypto.getRandomValues(new Uint8Array(8));
  let hex = "";
  for (let i = 0; i < bytes.length; i++) hex += (bytes[i]! < 16 ? "0" : "") + bytes[i]!.toString(16);
  return `.${name.slice(0, 64)}.${hex}.tmp`;
}

/**
 * The records folder's descriptor, never through a symbolic link: the state folder is the
 * configured one (followed), and `containers` in it must be a folder itself (ELOOP when it is a
 * link; mkdir(2) does not follow one either). `create`: make both first when they are missing.
 */
async function openRecords(stateDir: string, create: boolean): Promise<number> {
  const { mkdir, openDir } = await import("./libc.ts");
  const dir = `${stateDir}/${RECORDS_SUBDIR}`;
  if (create) {
    mkdir(stateDir, 0o700);
    mkdir(dir, 0o700);
  }
  return openDir(dir);
}

/**
 * Writes the record atomically, and through no symbolic link: a temp file of a random name,
 * created (O_EXCL: never over anything already there, a link included) in the records folder,
 * then renameat(2) over the record's name, which replaces a link there instead of writing
 * through it.
 */
export async function writeRecord(stateDir: string, record: PodRecord): Promise<void> {
  if (!safeContainerId(record.containerId))
    throw new Error(`container ID ${JSON.stringify(record.containerId)} cannot name a record`);
  const { closeFd, renameAt, unlinkAt, writeNewAt } = await import("./libc.ts");
  const dir = await openRecords(stateDir, true);
  try {
    const name = recordName(record.containerId);
    const text = `${JSON.stringify(record)}\n`;
    let tmp = tempName(name);
    for (let tries = 0; ; tries++) {
      try {
        writeNewAt(dir, tmp, text, 0o600);
        break;
      } catch (e) {
        // Something is at that name already (planted there): another name, a few times.
        if ((e as { code?: string }).code !== "EEXIST" || tries >= 3) throw e;
        tmp = tempName(name);
      }
    }
    try {
      renameAt(dir, tmp, name);
    } catch (e) {
      unlinkAt(dir, tmp);
      throw e;
    }
  } finally {
    closeFd(dir);
  }
}

/** Removes the record: a link at its name is removed itself, never what it points to. */
export async function removeRecord(stateDir: string, containerId: string): Promise<void> {
  if (!safeContainerId(containerId)) return;
  const { closeFd, unlinkAt } = await import("./libc.ts");
  let dir: number;
  try {
    dir = await openRecords(stateDir, false);
  } catch {
    return; // no records folder (or a link instead of one): no record of ours to remove
  }
  try {
    unlinkAt(dir, recordName(containerId));
  } catch {
    // not removable: DEL goes on
  } finally {
    closeFd(dir);
  }
}

/** Removes the records of containers not in `keep` (GC); returns the container IDs removed. */
export async function pruneRecords(stateDir: string, keep: ReadonlySet<string>): Promise<string[]> {
  const removed: string[] = [];
  const { closeFd, unlinkAt } = await import("./libc.ts");
  let dir: number;
  try {
    dir = await openRecords(stateDir, false);
  } catch {
    return removed;
  }
  try {
    // Listed through the descriptor: the folder opened above, whatever is renamed meanwhile.
    let names: string[];
    try {
      names = [...new Bun.Glob("*.json").scanSync({ cwd: `/proc/self/fd/${dir}`, onlyFiles: false })];
    } catch {
      return removed;
    }
    // The names of the records to keep, as recordName gives them (a long ID's is its hash).
    const kept = new Set<string>();
    for (const id of keep) kept.add(recordName(id));
    for (const n of names) {
      if (n.includes("/") || kept.has(n)) continue;
      // A hashed name says no ID: the record inside does, for the log line.
      const id = n.startsWith("_") ? await idInside(`/proc/self/fd/${dir}/${n}`, n) : n.slice(0, -".json".length);
      try {
        if (unlinkAt(dir, n)) removed.push(id);
      } catch {
        // not removable (a folder): left
      }
    }
  } finally {
    closeFd(dir);
  }
  return removed;
}

/** The container ID in the record at `path`, or `name` when it holds none. */
async function idInside(path: string, name: string): Promise<string> {
  try {
    const id = ((await Bun.file(path).json()) as { containerId?: unknown } | null)?.containerId;
    if (typeof id === "string" && safeContainerId(id) && recordName(id) === name) return id;
  } catch {
    // not a record
  }
  return name;
}

/**
 * Appends lines to STATE_DIR/plugin.log; when that would take it past FALLBACK_LOG_MAX_BYTES it
 * first moves to plugin.log.1 (replacing the older one). The agent prints and empties both.
 * A symbolic link at plugin.log is never appended through (O_NOFOLLOW: this throws), and the
 * rotation renames names, never what a link points to.
 */
export async function appendFallbackLog(
  stateDir: string,
  text: string,
  maxBytes = FALLBACK_LOG_MAX_BYTES,
): Promise<void> {
  const { append, mkdir, rename } = await import("./libc.ts");
  mkdir(stateDir, 0o700);
  const path = `${stateDir}/${FALLBACK_LOG}`;
  const size = Bun.file(path).size;
  const bytes = Buffer.byteLength(text);
  if (size > 0 && size + bytes > maxBytes) {
    try {
      rename(path, `${path}.1`);
    } catch {
      // another plugin rotated it meanwhile
    }
  }
  append(path, text, 0o600);
}
