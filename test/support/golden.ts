// Golden files: expected outputs kept beside their inputs under testdata/, compared byte for
// byte. `UPDATE_GOLDEN=1 bun test` rewrites them; review the diff before committing.
import { expect } from "bun:test";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";

export const ROOT = resolve(import.meta.dir, "../..");
export const UPDATE = Bun.env.UPDATE_GOLDEN === "1";

/** Absolute path of a file under the repository root. */
export function repoPath(...parts: string[]): string {
  return resolve(ROOT, ...parts);
}

function unifiedDiff(want: string, got: string): string {
  const a = want.split("\n");
  const b = got.split("\n");
  const out: string[] = [];
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) {
    if (a[i] === b[i]) continue;
    if (a[i] !== undefined) out.push(`-${i + 1}: ${a[i]}`);
    if (b[i] !== undefined) out.push(`+${i + 1}: ${b[i]}`);
    if (out.length > 40) {
      out.push("...");
      break;
    }
  }
  return out.join("\n");
}

/** Compares `actual` with the golden file at `path` (relative to the repo root). */
export function expectGolden(path: string, actual: string): void {
  const file = repoPath(path);
  if (!UPDATE && !existsSync(file)) {
    throw new Error(`golden file ${path} is missing; run UPDATE_GOLDEN=1 bun test and review what it writes`);
  }
  if (UPDATE) {
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, actual);
    return;
  }
  const want = readFileSync(file, "utf8");
  if (want !== actual) {
    throw new Error(`${path} differs from the output (UPDATE_GOLDEN=1 rewrites it):\n${unifiedDiff(want, actual)}`);
  }
  expect(actual).toBe(want);
}
