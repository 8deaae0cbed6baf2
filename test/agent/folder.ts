// An in-memory CNI config folder for the planner tests: load one from testdata, apply the
// steps a plan returns, and render what a plan would do as a readable golden report.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Selection } from "../../internal/agent/install/conflist/select.ts";
import type { Observe, Step } from "../../internal/agent/install/plan.ts";

export type Folder = Map<string, { bytes: Uint8Array; mode: number }>;

export function loadFolder(dir: string): Folder {
  const folder: Folder = new Map();
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isFile()) folder.set(name, { bytes: new Uint8Array(readFileSync(path)), mode: 0o644 });
  }
  return folder;
}

export const text = (b: Uint8Array) => new TextDecoder().decode(b);
export const observeIn =
  (folder: Folder): Observe =>
  (name) =>
    folder.get(name);
export const readIn = (folder: Folder) => (name: string) => {
  const f = folder.get(name);
  return f && text(f.bytes);
};

export function applySteps(folder: Folder, steps: Step[]): void {
  for (const s of steps) {
    if (s.op === "remove") folder.delete(s.file);
    else
      folder.set(s.file, {
        bytes: typeof s.data === "string" ? new TextEncoder().encode(s.data) : s.data,
        mode: s.mode,
      });
  }
}

export function cloneFolder(folder: Folder): Folder {
  return new Map([...folder].map(([k, v]) => [k, { bytes: v.bytes.slice(), mode: v.mode }]));
}

export function sameFolder(a: Folder, b: Folder): boolean {
  if (a.size !== b.size) return false;
  for (const [k, v] of a) {
    const w = b.get(k);
    if (!w || w.mode !== v.mode || Buffer.compare(Buffer.from(v.bytes), Buffer.from(w.bytes)) !== 0) return false;
  }
  return true;
}

/** `# ...` lines say what happened; file contents follow a `# write` line verbatim. */
export function renderSelection(sel: Selection): string[] {
  return [
    ...sel.skipped.map((s) => `# skipped ${s.name}: ${s.reason}`),
    sel.name ? `# selected ${sel.name} (${sel.config!.kind})` : "# nothing selected",
  ];
}

export function renderSteps(steps: Step[], original?: Folder): string[] {
  return steps.flatMap((s) => {
    if (s.op === "remove") return [`# remove ${s.file} (${s.why})`];
    const body = typeof s.data === "string" ? s.data : text(s.data);
    const same = original?.get(s.file);
    const head = `# write ${s.file} mode ${s.mode.toString(8).padStart(4, "0")} (${s.why})`;
    if (same && text(same.bytes) === body) return [`${head}: the original bytes`];
    return [head, body.endsWith("\n") ? body.slice(0, -1) : `${body}\n# (no newline at the end)`];
  });
}
