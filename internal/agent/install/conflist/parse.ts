// Reading one file of a CNI config folder the way a runtime does: which names count, and
// whether the bytes make a usable network config. Pure.
import * as v from "valibot";
import { ConflistSchema, ConfSchema, describeFirstIssue } from "./schema.ts";

/** A decoded config file. `doc` is the JSON exactly as parsed, key order and all. */
export type HostConfig =
  | { kind: "conflist"; doc: Record<string, unknown> & { plugins: Record<string, unknown>[] } }
  | { kind: "conf"; doc: Record<string, unknown> & { type: string } };

export type ParsedConfig = { ok: true; config: HostConfig } | { ok: false; reason: string };

export const CONFIG_EXTENSIONS = [".conf", ".conflist", ".json"] as const;

/** Names a runtime considers (libcni ConfFiles): the extension must match exactly, case and all. */
export function isConfigFileName(name: string): boolean {
  return CONFIG_EXTENSIONS.some((ext) => name.endsWith(ext));
}

/** Byte-wise order of the names, as Go's sort.Strings orders them. */
export function sortConfigNames(names: readonly string[]): string[] {
  const key = (s: string) => Buffer.from(s, "utf8");
  return names.filter(isConfigFileName).sort((a, b) => Buffer.compare(key(a), key(b)));
}

/**
 * Decodes a config file. A `.conflist` needs a `name` and a non-empty `plugins` list of
 * objects with a `type`; a `.conf` or `.json` is a single plugin and needs a `type`.
 */
export function parseHostConfig(name: string, text: string): ParsedConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    return { ok: false, reason: `not JSON (${(e as Error).message})` };
  }
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    return { ok: false, reason: "not a JSON object" };
  }
  // A name outside the runtime's extensions (only reachable through --conf-name) is read by content.
  if (name.endsWith(".conflist") || (!isConfigFileName(name) && "plugins" in raw)) {
    const r = v.safeParse(ConflistSchema, raw);
    if (!r.success) return { ok: false, reason: `not a network config list: ${describeFirstIssue(r.issues)}` };
    return {
      ok: true,
      config: { kind: "conflist", doc: raw as HostConfig["doc"] & { plugins: Record<string, unknown>[] } },
    };
  }
  const r = v.safeParse(ConfSchema, raw);
  if (!r.success) {
    const hint = "plugins" in raw ? " (a list of plugins belongs in a .conflist file)" : "";
    return { ok: false, reason: `not a single-plugin network config: ${describeFirstIssue(r.issues)}${hint}` };
  }
  return { ok: true, config: { kind: "conf", doc: raw as Record<string, unknown> & { type: string } } };
}
