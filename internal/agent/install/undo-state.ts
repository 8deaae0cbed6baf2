// What meshcni-installer changed in the host's CNI config folder, kept in a file of that folder
// (ZZZ-meshcni-undo: no CNI extension, so no runtime reads it) so that undo works after a
// restart or a kill -9 too. Pure.
import { createHash } from "node:crypto";
import * as v from "valibot";
import { describeFirstIssue } from "./conflist/schema.ts";

export const UNDO_FILE = "ZZZ-meshcni-undo";

const Base64 = v.pipe(v.string(), v.regex(/^[A-Za-z0-9+/]*={0,2}$/, "must be base64"));
const Name = v.pipe(
  v.string(),
  v.nonEmpty(),
  v.check((s) => !s.includes("/"), "must be a file name"),
);
const Mode = v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(0o7777));

export const UndoRecordSchema = v.object({
  /** The config file meshcni wrote (a conflist). */
  file: Name,
  /** Its bytes before meshcni's first write (base64), or null when meshcni created it. */
  before: v.nullable(Base64),
  /** Its mode before, or the mode meshcni gave it. */
  mode: Mode,
  /** sha256 (hex) of the bytes meshcni last wrote: while the file still has them, undo is exact. */
  wrote: v.pipe(v.string(), v.regex(/^[0-9a-f]{64}$/, "must be a sha256 hex digest")),
  /** The single-plugin file `file` was made from; meshcni removed it and puts it back on undo. */
  convertedFrom: v.optional(v.object({ name: Name, before: Base64, mode: Mode })),
});
export type UndoRecord = v.InferOutput<typeof UndoRecordSchema>;

export const UndoStateSchema = v.object({
  version: v.literal(1),
  records: v.array(UndoRecordSchema),
});
export type UndoState = v.InferOutput<typeof UndoStateSchema>;

export const EMPTY_STATE: UndoState = { version: 1, records: [] };

export class UndoStateError extends Error {}

export function parseUndoState(text: string): UndoState {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new UndoStateError(`${UNDO_FILE} is not JSON: ${(e as Error).message}`);
  }
  const r = v.safeParse(UndoStateSchema, raw);
  if (!r.success) {
    throw new UndoStateError(`${UNDO_FILE} is not a meshcni undo record: ${describeFirstIssue(r.issues)}`);
  }
  return r.output;
}

export function renderUndoState(state: UndoState): string {
  return `${JSON.stringify(state, null, 2)}\n`;
}

export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}

export const toBase64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
export const fromBase64 = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
