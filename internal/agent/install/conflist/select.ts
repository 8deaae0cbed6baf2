// Which file of the host's CNI config folder is the runtime's default network: the one meshcni
// chains into. Pure: file contents come from the `read` function the caller passes.
import { type HostConfig, parseHostConfig, sortConfigNames } from "./parse.ts";

export interface Skipped {
  name: string;
  reason: string;
}

export interface Selection {
  /** The file chosen, when there is one. */
  name?: string;
  config?: HostConfig;
  /** Its text, as read. */
  text?: string;
  /** Files passed over on the way, and why (a runtime skips them too). */
  skipped: Skipped[];
}

/** Reads a file of the folder by name; undefined when it is absent or not a regular file. */
export type ReadFile = (name: string) => string | undefined;

/** The `.conflist` a single-plugin file becomes when meshcni chains into it. */
export function conflistNameFor(name: string): string {
  if (name.endsWith(".conflist")) return name;
  const m = /\.(conf|json)$/.exec(name);
  return m ? `${name.slice(0, m.index)}.conflist` : `${name}.conflist`;
}

/**
 * The first valid config in byte-wise name order among `.conf`, `.conflist` and `.json`
 * files, as kubelet, CRI-O and Istio's installer choose it; invalid files are skipped.
 */
export function selectPrimaryConfig(names: readonly string[], read: ReadFile): Selection {
  const skipped: Skipped[] = [];
  for (const name of sortConfigNames(names)) {
    const text = read(name);
    if (text === undefined) continue;
    const parsed = parseHostConfig(name, text);
    if (parsed.ok) return { name, config: parsed.config, text, skipped };
    skipped.push({ name, reason: parsed.reason });
  }
  return { skipped };
}

/**
 * The file named by --conf-name. A `.conf` (or `.json`) that meshcni already turned into a
 * `.conflist` is found under its new name, and a `.conflist` asked for as `.conf` likewise.
 */
export function selectNamedConfig(confName: string, read: ReadFile): Selection {
  const alternatives = [confName];
  if (/\.(conf|json)$/.test(confName)) alternatives.push(conflistNameFor(confName));
  else if (confName.endsWith(".conflist")) alternatives.push(confName.slice(0, -4));
  for (const name of alternatives) {
    const text = read(name);
    if (text === undefined) continue;
    const parsed = parseHostConfig(name, text);
    if (parsed.ok) return { name, config: parsed.config, text, skipped: [] };
    return { skipped: [{ name, reason: parsed.reason }] };
  }
  return { skipped: [] };
}
