// The plugin's files in the state folder (internal/agent/protocol.ts): one record per container
// it handled for a Kubernetes pod, and the fallback log it appends to while the agent does not
// answer. Reading and deleting use Bun's own file API; renaming, appending and making folders go
// through internal/io/libc.ts, loaded only when they are needed.
import { FALLBACK_LOG, FALLBACK_LOG_MAX_BYTES, type PodRecord, RECORDS_SUBDIR, recordPath } from "../agent/protocol.ts";

/**
 * A container ID that is safe in a file name: the CNI spec's form (parseCmdArgs checks it too),
 * at most 256 characters. What CONTAINER_ID matches, checked with a loop (no RegExp to compile on
 * the plugin's hot path); plugin-state.test.ts holds the two together.
 */
export const CONTAINER_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,255}$/;

export function safeContainerId(id: string | undefined): id is string {
  if (id === undefined || id.length === 0 || id.length > 256) return false;
  for (let i = 0; i < id.length; i++) {
    const c = id.charCodeAt(i);
    const alnum = (c >= 97 && c <= 122) || (c >= 65 && c <= 90) || (c >= 48 && c <= 57);
    if (!alnum && (i === 0 || (c !== 95 && c !== 46 && c !== 45))) return false;
  }
  return true;
}

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
    if (r?.v === 1 && r.containerId === containerId && isStr(r.namespace) && isStr(r.name) && (r.decision === "meshed" || r.decision === "skipped")) {
      return r as unknown as PodRecord;
    }
  } catch {
    // below
  }
  return "unreadable";
}

/** Writes the record atomically: a temp file in the same folder, then rename(2). */
export async function writeRecord(stateDir: string, record: PodRecord): Promise<void> {
  if (!safeContainerId(record.containerId)) throw new Error(`container ID ${JSON.stringify(record.containerId)} cannot name a record`);
  const { mkdir, rename } = await import("./libc.ts");
  mkdir(stateDir, 0o700);
  mkdir(`${stateDir}/${RECORDS_SUBDIR}`, 0o700);
  const final = recordPath(stateDir, record.containerId);
  const tmp = `${stateDir}/${RECORDS_SUBDIR}/.${record.containerId}.${process.pid}.${Math.random().toString(36).slice(2, 8)}.tmp`;
  await Bun.write(tmp, JSON.stringify(record) + "\n");
  try {
    rename(tmp, final);
  } catch (e) {
    await Bun.file(tmp).delete().catch(() => {});
    throw e;
  }
}

export async function removeRecord(stateDir: string, containerId: string): Promise<void> {
  if (!safeContainerId(containerId)) return;
  await Bun.file(recordPath(stateDir, containerId)).delete().catch(() => {});
}

/** Removes the records of containers not in `keep` (GC); returns the container IDs removed. */
export async function pruneRecords(stateDir: string, keep: ReadonlySet<string>): Promise<string[]> {
  const dir = `${stateDir}/${RECORDS_SUBDIR}`;
  const removed: string[] = [];
  let names: string[];
  try {
    names = [...new Bun.Glob("*.json").scanSync({ cwd: dir, onlyFiles: true })];
  } catch {
    return removed;
  }
  for (const n of names) {
    const id = n.slice(0, -".json".length);
    if (n.includes("/") || keep.has(id)) continue;
    await Bun.file(`${dir}/${n}`).delete().catch(() => {});
    removed.push(id);
  }
  return removed;
}

/**
 * Appends lines to STATE_DIR/plugin.log; when that would take it past FALLBACK_LOG_MAX_BYTES it
 * first moves to plugin.log.1 (replacing the older one). The agent prints and empties both.
 */
export async function appendFallbackLog(stateDir: string, text: string, maxBytes = FALLBACK_LOG_MAX_BYTES): Promise<void> {
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
