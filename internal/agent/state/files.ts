// The state folder the plugin and the agent share (wire/state.ts): the plugin's records of the
// containers it handled, read for /status and repair; the fallback log the plugin appends to
// while the agent is down, printed and emptied by the agent. The undo that SIGTERM runs when
// meshcni is being removed takes only the socket away: the records outlive a reinstall (they sit
// on tmpfs and go at the next boot). `--uninstall` removes all of it.
import { randomBytes } from "node:crypto";
import { lstatSync, mkdirSync, readdirSync, renameSync, rmdirSync, unlinkSync } from "node:fs";
import { basename, dirname } from "node:path";
import {
  FALLBACK_LOG,
  FALLBACK_LOG_MAX_BYTES,
  LEGACY_STATE_NOTES,
  type PodRecord,
  RECORDS_SUBDIR,
  recordPath,
} from "../../wire/state.ts";
import { parseRecord, type RecordsRead } from "../../wire/state.ts";
import { safeContainerId } from "../../wire/state.ts";
import { readFileNoFollow, writeFileNoFollow } from "./safe-file.ts";

/** A record is a few hundred bytes; anything much larger in the folder is not one. */
export const MAX_RECORD_BYTES = 64 << 10;

/**
 * Writes a record for the plugin (an ADD the agent planned, ../socket/plan-add.ts): a temp file
 * of a random name in the records folder, then rename(2), as the plugin writes its own
 * (internal/plugin/io/state.ts); no symbolic link is followed (safe-file.ts).
 */
export function writeRecordFor(stateDir: string, record: PodRecord): void {
  if (!safeContainerId(record.containerId))
    throw new Error(`container ID ${JSON.stringify(record.containerId)} cannot name a record`);
  const path = recordPath(stateDir, record.containerId);
  const text = `${JSON.stringify(record)}\n`;
  try {
    writeFileNoFollow(dirname(path), basename(path), text);
  } catch (e) {
    // The folder is made once, when the first record needs it.
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") throw e;
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    writeFileNoFollow(dirname(path), basename(path), text);
  }
}

/** A record file's name: `CONTAINER_ID.json` (a dot first is a temp file, never a record). */
export const isRecordName = (name: string) => name.endsWith(".json") && !name.startsWith(".");

/** One record file: the record, "unreadable" when something else is there, undefined when nothing is. */
export function readRecordFile(path: string): PodRecord | "unreadable" | undefined {
  let read;
  try {
    read = readFileNoFollow(path, MAX_RECORD_BYTES);
  } catch {
    return "unreadable"; // a link, a FIFO, a folder
  }
  if (read === undefined) return undefined;
  return (!read.truncated && parseRecord(read.text)) || "unreadable";
}

/** Every record in the folder, read now (the agent keeps them in memory: record-index.ts). */
export function readRecords(stateDir: string): RecordsRead {
  const dir = `${stateDir}/${RECORDS_SUBDIR}`;
  let names: string[];
  try {
    names = readdirSync(dir).filter(isRecordName);
  } catch {
    return { records: [], unreadable: [] };
  }
  const out: RecordsRead = { records: [], unreadable: [] };
  for (const name of names.sort()) {
    const r = readRecordFile(`${dir}/${name}`);
    if (r === undefined) continue; // removed by a DEL meanwhile
    if (r === "unreadable") out.unreadable.push(name);
    else out.records.push(r);
  }
  return out;
}

/**
 * Takes the fallback log out of the plugin's way (older file first: `.1`, then the current one)
 * and returns what it held. Each file is renamed before it is read, so a plugin appending at that
 * moment starts a new file instead of writing into one being emptied.
 */
export function takeFallbackLog(stateDir: string): { file: string; content: string; problem?: string }[] {
  const out: { file: string; content: string; problem?: string }[] = [];
  for (const name of [`${FALLBACK_LOG}.1`, FALLBACK_LOG]) {
    const path = `${stateDir}/${name}`;
    const taken = `${stateDir}/.${name}.printing-${randomBytes(6).toString("hex")}`;
    try {
      renameSync(path, taken);
    } catch {
      continue; // not there
    }
    try {
      // The plugin bounds each file (FALLBACK_LOG_MAX_BYTES); a link or a FIFO there is not read.
      const read = readFileNoFollow(taken, 2 * FALLBACK_LOG_MAX_BYTES);
      if (read) out.push({ file: path, content: read.text });
    } catch (e) {
      out.push({ file: path, content: "", problem: (e as Error).message.replace(taken, path) });
    } finally {
      unlinkSync(taken);
    }
  }
  return out;
}

/** Removes the agent's socket (only a socket) and any socket an agent that died mid-step left bound aside. */
export function removeAgentSocket(socket: string): string[] {
  const removed: string[] = [];
  const rm = (path: string) => {
    try {
      unlinkSync(path);
      removed.push(path);
    } catch {
      // absent
    }
  };
  try {
    if (lstatSync(socket).isSocket()) rm(socket);
  } catch {
    // absent
  }
  let all: string[] = [];
  try {
    all = readdirSync(dirname(socket));
  } catch {
    // absent
  }
  const aside = `.${basename(socket)}.`;
  for (const n of all) if (n.startsWith(aside)) rm(`${dirname(socket)}/${n}`);
  return removed;
}

/** Removes the records, the fallback logs and the socket; the folder too when that leaves it empty. */
export function removeAgentState(stateDir: string, socket: string): string[] {
  const removed: string[] = [];
  const rm = (path: string) => {
    try {
      unlinkSync(path);
      removed.push(path);
    } catch {
      // absent
    }
  };
  const records = `${stateDir}/${RECORDS_SUBDIR}`;
  let names: string[] = [];
  try {
    names = readdirSync(records);
  } catch {
    // none
  }
  for (const n of names) rm(`${records}/${n}`);
  try {
    rmdirSync(records);
  } catch {
    // absent, or something else is in it
  }
  rm(`${stateDir}/${FALLBACK_LOG}`);
  rm(`${stateDir}/${FALLBACK_LOG}.1`);
  for (const note of LEGACY_STATE_NOTES) rm(`${stateDir}/${note}`);
  removed.push(...removeAgentSocket(socket));
  // What an agent that died mid-step left: a fallback log being printed.
  let all: string[] = [];
  try {
    all = readdirSync(stateDir);
  } catch {
    // absent
  }
  const printing = [`.${FALLBACK_LOG}.printing-`, `.${FALLBACK_LOG}.1.printing-`];
  for (const n of all) if (printing.some((p) => n.startsWith(p))) rm(`${stateDir}/${n}`);
  try {
    rmdirSync(stateDir); // fails when not empty, or when it is a mount point: both fine
  } catch {
    // kept
  }
  return removed;
}
