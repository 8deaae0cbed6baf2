// Goldens for chaining and undo, through the pure planners on an in-memory copy of each folder:
// every recorded host config (testdata/hosts) and the special cases in testdata/conflist.
// Each golden shows which file was selected (and which were skipped and why), the bytes
// written, and what undo does; the test also checks that the result is chained, that planning
// again changes nothing, that undo gives back the host's bytes, and that undo after the host
// edited the chained file keeps the edit and drops only meshcni's entry.
import { describe, expect, test } from "bun:test";
import { readdirSync, statSync } from "node:fs";
import { countEntries, isChained, type JsonObject, renderConfig } from "../../internal/agent/install/conflist/chain.ts";
import { parseHostConfig } from "../../internal/agent/install/conflist/parse.ts";
import { selectPrimaryConfig } from "../../internal/agent/install/conflist/select.ts";
import { entryFromConfigText } from "../../internal/agent/install/entry.ts";
import { planChain, planUndoRecord } from "../../internal/agent/install/plan.ts";
import { EMPTY_STATE } from "../../internal/agent/install/undo-state.ts";
import { expectGolden, repoPath } from "../support/golden.ts";
import {
  applySteps,
  cloneFolder,
  type Folder,
  loadFolder,
  observeIn,
  readIn,
  renderSelection,
  renderSteps,
  sameFolder,
  text,
} from "./folder.ts";

const ENTRY = entryFromConfigText(undefined, "/etc/cni/net.d", "meshcni");

function select(folder: Folder) {
  return selectPrimaryConfig([...folder.keys()], readIn(folder));
}

/** Runs chain → check → re-plan → undo on a folder and returns the golden report. */
function exercise(folder: Folder): string {
  const original = cloneFolder(folder);
  const sel = select(folder);
  const lines = renderSelection(sel);
  if (!sel.name || !sel.config) return `${lines.join("\n")}\n`;
  const outcome = planChain(EMPTY_STATE, { name: sel.name, config: sel.config }, ENTRY, observeIn(folder));
  if (!outcome.ok) {
    lines.push(`# not chained: ${outcome.reason}`);
    return `${lines.join("\n")}\n`;
  }
  const { plan } = outcome;
  lines.push(...renderSteps(plan.steps));
  applySteps(folder, plan.steps);

  // The runtime now reads the chained list first, with exactly one meshcni entry, last.
  const after = select(folder);
  expect(after.name).toBe(plan.target);
  expect(isChained(after.config!, ENTRY)).toBe(true);
  expect(countEntries(after.config!)).toBe(1);
  // Every plugin and key the host had is still there, in its order.
  const chained = after.config!.doc as JsonObject & { plugins: JsonObject[] };
  const host = sel.config.kind === "conflist" ? sel.config.doc : undefined;
  if (host) {
    expect(Object.keys(chained)).toEqual(Object.keys(host));
    expect(chained.plugins.slice(0, -1)).toEqual(host.plugins.filter((p) => p.type !== "meshcni"));
  }

  // Undo puts back exactly what the host had.
  const record = plan.state.records[0]!;
  const undo = planUndoRecord(record, observeIn(folder));
  lines.push("# undo", ...renderSteps(undo, original));
  const undone = cloneFolder(folder);
  applySteps(undone, undo);
  expect(sameFolder(undone, original)).toBe(true);

  // The host edits the chained list (keeping meshcni's entry) with a tool of its own: undo keeps
  // the edit, drops meshcni's entry, and writes in the agent's format.
  const edited = structuredClone(chained);
  (edited.plugins[0] as JsonObject).hostEdit = "kept";
  folder.set(plan.target, { bytes: new TextEncoder().encode(JSON.stringify(edited, null, 4)), mode: 0o640 });
  const undoEdited = planUndoRecord(record, observeIn(folder));
  applySteps(folder, undoEdited);
  const left = parseHostConfig(plan.target, text(folder.get(plan.target)!.bytes));
  expect(left.ok).toBe(true);
  const want = { ...edited, plugins: edited.plugins.filter((p) => p.type !== "meshcni") };
  expect(left.ok && left.config.doc).toEqual(want);
  expect(text(folder.get(plan.target)!.bytes)).toBe(renderConfig(want));
  expect(folder.get(plan.target)!.mode).toBe(0o640);
  // A converted `.conf` is not brought back beside a list the host has taken over.
  if (record.convertedFrom) expect(folder.has(record.convertedFrom.name)).toBe(false);
  return `${lines.join("\n")}\n`;
}

describe("recorded host configs: chained, then undone", () => {
  const hosts = readdirSync(repoPath("testdata/hosts"))
    .filter((h) => statSync(repoPath("testdata/hosts", h)).isDirectory())
    .sort();
  test("all 33 recorded hosts are here", () => expect(hosts.length).toBe(33));
  for (const host of hosts) {
    test(host, () => {
      const report = exercise(loadFolder(repoPath("testdata/hosts", host)));
      expect(report).toContain("# write ");
      expectGolden(`testdata/conflist/hosts/${host}.golden`, report);
    });
  }
});

describe("special cases", () => {
  const cases = readdirSync(repoPath("testdata/conflist"))
    .filter((c) => c !== "hosts" && statSync(repoPath("testdata/conflist", c)).isDirectory())
    .sort();
  for (const c of cases) {
    test(c, () =>
      expectGolden(`testdata/conflist/${c}.golden`, exercise(loadFolder(repoPath("testdata/conflist", c)))),
    );
  }

  test("the chained output is the same bytes whatever the input's formatting", () => {
    const a = loadFolder(repoPath("testdata/conflist/disable-check"));
    const doc = JSON.parse(text(a.get("10-bridge.conflist")!.bytes));
    const b: Folder = new Map([
      ["10-bridge.conflist", { bytes: new TextEncoder().encode(JSON.stringify(doc)), mode: 0o644 }],
    ]);
    const plan = (f: Folder) => {
      const sel = select(f);
      const o = planChain(EMPTY_STATE, { name: sel.name!, config: sel.config! }, ENTRY, observeIn(f));
      if (!o.ok) throw new Error(o.reason);
      return o.plan.steps[0]!.op === "write" ? o.plan.steps[0]!.data : undefined;
    };
    expect(plan(a)).toBe(plan(b) as string);
  });
});
