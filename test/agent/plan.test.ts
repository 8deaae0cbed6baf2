// The undo record across the host's own changes: re-chaining after the host rewrote its config,
// the host writing its `.conf` again, files that vanished, a switch to another file.
import { describe, expect, test } from "bun:test";
import { renderConfig } from "../../internal/agent/install/conflist/chain.ts";
import { selectPrimaryConfig } from "../../internal/agent/install/conflist/select.ts";
import { entryFromConfigText } from "../../internal/agent/install/entry.ts";
import { type ChainPlan, planChain, planUndoRecord } from "../../internal/agent/install/plan.ts";
import {
  EMPTY_STATE,
  fromBase64,
  parseUndoState,
  renderUndoState,
  type UndoState,
} from "../../internal/agent/install/undo-state.ts";
import { applySteps, cloneFolder, type Folder, observeIn, readIn, sameFolder, text } from "./folder.ts";

const ENTRY = entryFromConfigText(undefined, "/etc/cni/net.d");
const enc = (s: string) => new TextEncoder().encode(s);
const file = (s: string, mode = 0o644) => ({ bytes: enc(s), mode });

const FLANNEL =
  '{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}},{"type":"portmap","capabilities":{"portMappings":true}}]}';
const FLANNEL_V2 =
  '{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel","delegate":{"hairpinMode":false}}]}\n';
const BRIDGE_CONF = '{"cniVersion":"1.0.0","name":"podnet","type":"bridge","bridge":"cni0"}';
const BRIDGE_CONF_V2 = '{"cniVersion":"1.0.0","name":"podnet","type":"bridge","bridge":"cni9"}';

/** Chains the folder's primary config with `state`; applies the plan; returns it. */
function chain(folder: Folder, state: UndoState): ChainPlan {
  const sel = selectPrimaryConfig([...folder.keys()], readIn(folder));
  const o = planChain(state, { name: sel.name!, config: sel.config! }, ENTRY, observeIn(folder));
  if (!o.ok) throw new Error(o.reason);
  applySteps(folder, o.plan.steps);
  // The record survives a round trip through its file.
  expect(parseUndoState(renderUndoState(o.plan.state))).toEqual(o.plan.state);
  return o.plan;
}

function undoAll(folder: Folder, state: UndoState): void {
  for (const r of state.records) applySteps(folder, planUndoRecord(r, observeIn(folder)));
}

describe("undo record", () => {
  test("after the host rewrote its list and meshcni chained it again, undo gives the host's latest bytes", () => {
    const folder: Folder = new Map([["10-flannel.conflist", file(FLANNEL)]]);
    const first = chain(folder, EMPTY_STATE);
    folder.set("10-flannel.conflist", file(FLANNEL_V2, 0o600));
    const second = chain(folder, first.state);
    expect(second.state.records).toHaveLength(1);
    expect(text(fromBase64(second.state.records[0]!.before!))).toBe(FLANNEL_V2);
    undoAll(folder, second.state);
    expect(sameFolder(folder, new Map([["10-flannel.conflist", file(FLANNEL_V2, 0o600)]]))).toBe(true);
  });

  test("chaining again with a new entry keeps the original bytes", () => {
    const folder: Folder = new Map([["10-flannel.conflist", file(FLANNEL)]]);
    const first = chain(folder, EMPTY_STATE);
    const other = { ...ENTRY, log_level: "debug" };
    const sel = selectPrimaryConfig([...folder.keys()], readIn(folder));
    const o = planChain(first.state, { name: sel.name!, config: sel.config! }, other, observeIn(folder));
    if (!o.ok) throw new Error(o.reason);
    applySteps(folder, o.plan.steps);
    expect(o.plan.state.records[0]!.before).toBe(first.state.records[0]!.before);
    undoAll(folder, o.plan.state);
    expect(text(folder.get("10-flannel.conflist")!.bytes)).toBe(FLANNEL);
  });

  test("a converted .conf the host writes again is converted again, and undo restores its newest bytes", () => {
    const folder: Folder = new Map([["10-bridge.conf", file(BRIDGE_CONF, 0o600)]]);
    const first = chain(folder, EMPTY_STATE);
    expect([...folder.keys()]).toEqual(["10-bridge.conflist"]);
    expect(folder.get("10-bridge.conflist")!.mode).toBe(0o600);
    folder.set("10-bridge.conf", file(BRIDGE_CONF_V2, 0o600));
    const second = chain(folder, first.state);
    expect([...folder.keys()]).toEqual(["10-bridge.conflist"]);
    expect(JSON.parse(text(folder.get("10-bridge.conflist")!.bytes)).plugins[0].bridge).toBe("cni9");
    expect(second.state.records[0]!.before).toBeNull();
    undoAll(folder, second.state);
    expect(sameFolder(folder, new Map([["10-bridge.conf", file(BRIDGE_CONF_V2, 0o600)]]))).toBe(true);
  });

  test("a crash between writing the list and removing the .conf is repaired by the next run", () => {
    const folder: Folder = new Map([["10-bridge.conf", file(BRIDGE_CONF)]]);
    const sel = selectPrimaryConfig([...folder.keys()], readIn(folder));
    const o = planChain(EMPTY_STATE, { name: sel.name!, config: sel.config! }, ENTRY, observeIn(folder));
    if (!o.ok) throw new Error(o.reason);
    applySteps(folder, o.plan.steps.slice(0, 1)); // killed before the .conf went
    const again = chain(folder, o.plan.state);
    expect([...folder.keys()]).toEqual(["10-bridge.conflist"]);
    undoAll(folder, again.state);
    expect(sameFolder(folder, new Map([["10-bridge.conf", file(BRIDGE_CONF)]]))).toBe(true);
  });

  test("a crash between saving the record and writing the list loses nothing", () => {
    const folder: Folder = new Map([["10-flannel.conflist", file(FLANNEL)]]);
    const sel = selectPrimaryConfig([...folder.keys()], readIn(folder));
    const o = planChain(EMPTY_STATE, { name: sel.name!, config: sel.config! }, ENTRY, observeIn(folder));
    if (!o.ok) throw new Error(o.reason);
    // Killed after the record was saved, before any file was written: undo leaves the file alone.
    const untouched = cloneFolder(folder);
    undoAll(folder, o.plan.state);
    expect(sameFolder(folder, untouched)).toBe(true);
    // And the next run records the same original.
    const again = chain(folder, o.plan.state);
    expect(again.state.records[0]!.before).toBe(o.plan.state.records[0]!.before);
  });

  test("a file the host removed stays removed; a converted .conf is not brought back then", () => {
    const folder: Folder = new Map([["10-bridge.conf", file(BRIDGE_CONF)]]);
    const plan = chain(folder, EMPTY_STATE);
    folder.delete("10-bridge.conflist");
    expect(planUndoRecord(plan.state.records[0]!, observeIn(folder))).toEqual([]);
  });

  test("a host edit that dropped meshcni's entry is left alone", () => {
    const folder: Folder = new Map([["10-flannel.conflist", file(FLANNEL)]]);
    const plan = chain(folder, EMPTY_STATE);
    folder.set("10-flannel.conflist", file(FLANNEL_V2));
    expect(planUndoRecord(plan.state.records[0]!, observeIn(folder))).toEqual([]);
  });

  test("a list holding nothing but meshcni after the host's edit is removed", () => {
    const folder: Folder = new Map([["10-flannel.conflist", file(FLANNEL)]]);
    const plan = chain(folder, EMPTY_STATE);
    folder.set(
      "10-flannel.conflist",
      file(renderConfig({ name: "cbr0", cniVersion: "0.3.1", plugins: [ENTRY] }).replace(/\n/g, " ")),
    );
    expect(planUndoRecord(plan.state.records[0]!, observeIn(folder))).toMatchObject([
      { op: "remove", file: "10-flannel.conflist", why: "it held nothing but meshcni" },
    ]);
  });

  test("an unparseable file is never rewritten", () => {
    const folder: Folder = new Map([["10-flannel.conflist", file(FLANNEL)]]);
    const plan = chain(folder, EMPTY_STATE);
    folder.set("10-flannel.conflist", file('{"name":"cbr0","plugins":[{"type":"meshcni"'));
    expect(planUndoRecord(plan.state.records[0]!, observeIn(folder))).toEqual([]);
  });

  test("when another file becomes the first, the old one is listed as stale with its record", () => {
    const folder: Folder = new Map([["10-flannel.conflist", file(FLANNEL)]]);
    const first = chain(folder, EMPTY_STATE);
    folder.set("05-bridge.conf", file(BRIDGE_CONF));
    const second = chain(folder, first.state);
    expect(second.target).toBe("05-bridge.conflist");
    expect(second.stale.map((r) => r.file)).toEqual(["10-flannel.conflist"]);
    undoAll(folder, { version: 1, records: second.stale });
    expect(text(folder.get("10-flannel.conflist")!.bytes)).toBe(FLANNEL);
  });

  test("a bad undo record is refused with the reason", () => {
    expect(() => parseUndoState("{}")).toThrow(/not a meshcni undo record: "version" is missing/);
    expect(() =>
      parseUndoState('{"version":1,"records":[{"file":"../x","before":null,"mode":420,"wrote":"00"}]}'),
    ).toThrow(/records\.0\.file: must be a file name/);
    expect(() => parseUndoState("{")).toThrow(/not JSON/);
  });
});
