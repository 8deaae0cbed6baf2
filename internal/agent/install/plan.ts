// The file operations that chain meshcni into the host's config and that undo it, planned from
// what the folder holds now and the undo record. Pure: the caller reads the files and applies
// the steps in order (each write atomic), saving the record where a plan says so.
import { buildChainedConfig, countEntries, type JsonObject, removeEntries, renderConfig } from "./conflist/chain.ts";
import { parseHostConfig } from "./conflist/parse.ts";
import type { Selection } from "./conflist/select.ts";
import { fromBase64, sha256Hex, toBase64, type UndoRecord, type UndoState } from "./undo-state.ts";

/** A file of the folder as it is now. */
export interface Observed {
  bytes: Uint8Array;
  mode: number;
}
export type Observe = (name: string) => Observed | undefined;

/**
 * `expect`: what the file must still hold (as text; null: be absent) when the step runs. The
 * host may write at any moment; a step planned from older content must not undo that write.
 */
export type Step =
  | { op: "write"; file: string; data: Uint8Array | string; mode: number; why: string; expect: string | null }
  | { op: "remove"; file: string; why: string; expect: string; mustExist?: boolean };

const textOf = (o: Observed) => new TextDecoder().decode(o.bytes);

export interface ChainPlan {
  /** The conflist that ends up holding meshcni's entry. */
  target: string;
  /** Save this record before the steps run. */
  state: UndoState;
  steps: Step[];
  /** Records of files chained earlier that are no longer the target: undo them afterwards. */
  stale: UndoRecord[];
}

export type ChainOutcome = { ok: true; plan: ChainPlan } | { ok: false; reason: string };

/** Default mode for a file meshcni creates without a model to copy. */
const NEW_FILE_MODE = 0o644;

/**
 * Chain meshcni into the selected file. The record keeps the bytes the host had (or had last,
 * when it rewrote the file since), so that undo can put them back exactly.
 */
export function planChain(
  state: UndoState,
  sel: Required<Pick<Selection, "name" | "config">> & Pick<Selection, "text">,
  entry: JsonObject,
  observe: Observe,
): ChainOutcome {
  const chained = buildChainedConfig(sel.name, sel.config, entry);
  if (!chained.ok) return { ok: false, reason: `cannot chain meshcni into ${sel.name}: ${chained.reason}` };
  const target = chained.target;
  const previous = state.records.find((r) => r.file === target);
  const current = observe(target);
  // The file still holds what meshcni wrote last: what was there before that is still the original.
  const inherit = previous !== undefined && current !== undefined && sha256Hex(current.bytes) === previous.wrote;
  const source = chained.converted ? observe(sel.name) : undefined;
  const mode = current?.mode ?? source?.mode ?? NEW_FILE_MODE;
  const record: UndoRecord = {
    file: target,
    before: inherit ? previous.before : current ? toBase64(current.bytes) : null,
    mode: inherit ? previous.mode : mode,
    wrote: sha256Hex(chained.text),
  };
  if (chained.converted && source)
    record.convertedFrom = { name: sel.name, before: toBase64(source.bytes), mode: source.mode };
  else if (inherit && previous.convertedFrom) record.convertedFrom = previous.convertedFrom;

  // The list is written only over what it was made from; a converted file goes only as it was read.
  const read = sel.text ?? (chained.converted ? source && textOf(source) : current && textOf(current)) ?? null;
  const steps: Step[] = [
    {
      op: "write",
      file: target,
      data: chained.text,
      mode,
      why: chained.converted ? `chained meshcni into ${sel.name}, now a list` : "chained meshcni",
      expect: chained.converted ? (current ? textOf(current) : null) : read,
    },
  ];
  // The host's file must still be there to be replaced: if the host withdrew it, the list is out of date.
  if (chained.converted && read !== null)
    steps.push({ op: "remove", file: sel.name, why: `replaced by ${target}`, expect: read, mustExist: true });
  const stale = state.records.filter((r) => r.file !== target);
  return { ok: true, plan: { target, state: { version: 1, records: [record, ...stale] }, steps, stale } };
}

/** Take meshcni's entries out of a list the host changed; nothing when it has none or is not ours to judge. */
export function planEntryRemoval(file: string, current: Observed): Step[] {
  const parsed = parseHostConfig(file, new TextDecoder().decode(current.bytes));
  if (!parsed.ok || parsed.config.kind !== "conflist" || countEntries(parsed.config) === 0) return [];
  const doc = removeEntries(parsed.config.doc);
  const expect = textOf(current);
  if (doc.plugins.length === 0) return [{ op: "remove", file, why: "it held nothing but meshcni", expect }];
  return [{ op: "write", file, data: renderConfig(doc), mode: current.mode, why: "removed meshcni's entry", expect }];
}

/**
 * Undo one record. A file that still holds exactly what meshcni wrote gets its original bytes
 * back (a converted `.conf` is restored and the list removed); a file the host rewrote since
 * keeps the host's content minus meshcni's entry; a file the host removed stays removed.
 */
export function planUndoRecord(record: UndoRecord, observe: Observe): Step[] {
  const current = observe(record.file);
  if (!current) return [];
  if (sha256Hex(current.bytes) !== record.wrote) return planEntryRemoval(record.file, current);
  const steps: Step[] = [];
  const conf = record.convertedFrom;
  // The original goes back first, so that a runtime always finds a config.
  if (conf && !observe(conf.name)) {
    steps.push({
      op: "write",
      file: conf.name,
      data: fromBase64(conf.before),
      mode: conf.mode,
      why: `restored the host's ${conf.name}`,
      expect: null,
    });
  }
  const expect = textOf(current);
  if (record.before === null)
    steps.push({ op: "remove", file: record.file, why: conf ? `${conf.name} is back` : "meshcni created it", expect });
  else
    steps.push({
      op: "write",
      file: record.file,
      data: fromBase64(record.before),
      mode: record.mode,
      why: "restored the host's bytes",
      expect,
    });
  return steps;
}
