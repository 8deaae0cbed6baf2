// Putting meshcni's entry into a host network config, and taking it out again. Pure.
//
// Output format (the agent's own; goldens pin it): the host's keys in the host's order
// (except that JavaScript puts integer-like keys first; CNI configs have none), numbers as
// JavaScript writes them, two-space indent, a trailing newline. Undo gives the host's own bytes
// back whenever the host has not rewritten the file since. A single-plugin `.conf`/`.json` becomes a list
// `{cniVersion, name, plugins: [<the plugin minus cniVersion>, <meshcni>]}`, keeping the host's
// network name and cniVersion (0.3.1 when it had none, the oldest version libcni chains with
// that old plugins still speak).
import { compareVersions, SUPPORTED_VERSIONS } from "../../../cni/spec.ts";
import type { HostConfig } from "./parse.ts";
import { NETWORK_NAME, PLUGIN_TYPE } from "./schema.ts";
import { conflistNameFor } from "./select.ts";

export type JsonObject = Record<string, unknown>;

/** The list name for a converted `.conf` without a usable name (what Linkerd and Istio use). */
export const DEFAULT_LIST_NAME = "k8s-pod-network";
/** The cniVersion for a converted `.conf` that had none. */
export const DEFAULT_CONVERTED_VERSION = "0.3.1";

export function renderConfig(doc: JsonObject): string {
  return `${JSON.stringify(doc, null, 2)}\n`;
}

const isOurs = (p: unknown) => typeof p === "object" && p !== null && (p as JsonObject).type === PLUGIN_TYPE;

/** How many meshcni entries a config holds (a single-plugin file counts as a list of one). */
export function countEntries(config: HostConfig): number {
  return config.kind === "conf" ? (isOurs(config.doc) ? 1 : 0) : config.doc.plugins.filter(isOurs).length;
}

/** Equal as JSON values; object key order does not matter, list order does. */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    return a.length === bb.length && a.every((x, i) => jsonEqual(x, bb[i]));
  }
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return (
    ka.length === kb.length &&
    ka.every((k) => Object.hasOwn(b, k) && jsonEqual((a as JsonObject)[k], (b as JsonObject)[k]))
  );
}

/** The chain is in place: a list whose only meshcni entry is the last plugin and equals `entry`. */
export function isChained(config: HostConfig, entry: JsonObject): boolean {
  if (config.kind !== "conflist") return false;
  const plugins = config.doc.plugins;
  return countEntries(config) === 1 && jsonEqual(plugins[plugins.length - 1], entry);
}

/** The list without any meshcni entry; every other key and plugin stays where it was. */
export function removeEntries(doc: JsonObject & { plugins: unknown[] }): JsonObject & { plugins: unknown[] } {
  return { ...doc, plugins: doc.plugins.filter((p) => !isOurs(p)) };
}

/** Why meshcni cannot run in this list, judged by its versions; undefined when it can. */
export function unchainableVersion(doc: JsonObject): string | undefined {
  const versions = [doc.cniVersion, ...(Array.isArray(doc.cniVersions) ? doc.cniVersions : [])].filter(
    (x): x is string => typeof x === "string",
  );
  if (versions.length === 0) {
    return (
      "it has no cniVersion, so runtimes call its plugins as " +
      "CNI 0.1.0, which cannot chain; meshcni needs 0.3.0 or later"
    );
  }
  const ours = SUPPORTED_VERSIONS as readonly string[];
  if (!versions.some((x) => ours.includes(x))) {
    const old = versions.every((x) => compareVersions(x, "0.3.0") < 0);
    return (
      `its cniVersion ${versions.join(", ")} is ` +
      `${old ? "too old to chain plugins" : "not one meshcni speaks"}; meshcni speaks ${ours.join(", ")}`
    );
  }
  return undefined;
}

export type ChainResult =
  | { ok: true; target: string; text: string; doc: JsonObject; converted: boolean }
  | { ok: false; reason: string };

/**
 * The file `name` (with decoded content `config`) with meshcni chained in: every earlier meshcni
 * entry removed and `entry` appended last. A single-plugin file becomes a `.conflist`
 * (`target`), which the caller writes before removing the original.
 */
export function buildChainedConfig(name: string, config: HostConfig, entry: JsonObject): ChainResult {
  if (config.kind === "conflist") {
    const why = unchainableVersion(config.doc);
    if (why) return { ok: false, reason: why };
    const stripped = removeEntries(config.doc);
    const doc = { ...stripped, plugins: [...stripped.plugins, entry] };
    return { ok: true, target: name, text: renderConfig(doc), doc, converted: false };
  }
  if (isOurs(config.doc)) {
    return {
      ok: false,
      reason: "it holds meshcni alone; meshcni is chained after the cluster's network plugin, not used instead of it",
    };
  }
  const { cniVersion, ...plugin } = config.doc;
  const version = cniVersion === undefined ? DEFAULT_CONVERTED_VERSION : cniVersion;
  const listName = typeof plugin.name === "string" && NETWORK_NAME.test(plugin.name) ? plugin.name : DEFAULT_LIST_NAME;
  const doc: JsonObject = { cniVersion: version, name: listName, plugins: [plugin, entry] };
  const why = unchainableVersion(doc);
  if (why) return { ok: false, reason: why };
  return { ok: true, target: conflistNameFor(name), text: renderConfig(doc), doc, converted: true };
}
