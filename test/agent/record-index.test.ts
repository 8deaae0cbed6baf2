// The agent's records in memory (internal/agent/state/record-index.ts) over a real folder: read once at
// start; kept current by the agent's own writes, by the reports that name a container, by an
// inotify watch of the folder (the plugin's own writes and removals: temp file and rename, unlink)
// and by a rescan that reads again only what changed; and the containers whose record went away,
// remembered for a while (their DEL's report comes after the removal).
import { afterEach, describe, expect, test } from "bun:test";
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  renameSync,
  rmSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PodRecord } from "../../internal/wire/state.ts";
import { writeRecordFor } from "../../internal/agent/state/files.ts";
import { REMOVED_KEPT_MS, RecordIndex } from "../../internal/agent/state/record-index.ts";

let root: string;
let index: RecordIndex | undefined;
afterEach(() => {
  index?.stop();
  index = undefined;
  rmSync(root, { recursive: true, force: true });
});

const record = (containerId: string, over: Partial<PodRecord> = {}): PodRecord => ({
  v: 1,
  containerId,
  namespace: "emojivoto",
  name: `web-${containerId}`,
  uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f",
  decision: "meshed",
  reason: "has a linkerd-proxy container",
  families: [4],
  time: "2026-01-01T10:00:00.000Z",
  ...over,
});

function setup() {
  root = mkdtempSync(join(tmpdir(), "meshcni-index-"));
  const dir = join(root, "containers");
  mkdirSync(dir, { mode: 0o700 });
  return { state: root, dir };
}

/** The plugin's own write: a temp file, then rename(2) over the name (internal/plugin/io/state.ts). */
function pluginWrite(dir: string, r: PodRecord) {
  const tmp = join(dir, `.${r.containerId}.123.abcdef.tmp`);
  writeFileSync(tmp, `${JSON.stringify(r)}\n`);
  renameSync(tmp, join(dir, `${r.containerId}.json`));
}

async function until(fn: () => boolean, what: string, ms = 3000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!fn()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(5);
  }
}

const ids = (i: RecordIndex) => i.records().records.map((r) => r.containerId);

describe("the records in memory", () => {
  test("read once at start, in file-name order, the unreadable named; one snapshot until something changes", () => {
    const { state, dir } = setup();
    pluginWrite(dir, record("bbbb"));
    pluginWrite(dir, record("aaaa", { decision: "skipped" }));
    writeFileSync(join(dir, "torn.json"), "{ torn");
    writeFileSync(join(dir, ".cccc.1.x.tmp"), "a temp file is no record");
    index = new RecordIndex(state, { watch: false }).start();
    expect(ids(index)).toEqual(["aaaa", "bbbb"]);
    expect(index.records().unreadable).toEqual(["torn.json"]);
    expect(index.size()).toBe(3);
    expect(index.records()).toBe(index.records());
  });

  test("the plugin's writes and removals arrive through the watch, with no rescan", async () => {
    const { state, dir } = setup();
    index = new RecordIndex(state).start();
    expect(ids(index)).toEqual([]);
    pluginWrite(dir, record("aaaa"));
    pluginWrite(dir, record("bbbb"));
    await until(() => index!.size() === 2, "both records seen");
    pluginWrite(dir, record("aaaa", { decision: "skipped", reason: "rewritten" }));
    await until(() => index!.records().records[0]?.reason === "rewritten", "the rewrite seen");
    unlinkSync(join(dir, "bbbb.json"));
    await until(() => index!.size() === 1, "the removal seen");
    expect(ids(index)).toEqual(["aaaa"]);
    // Gone, but its DEL's report is still known.
    expect([index.knows("aaaa"), index.knows("bbbb"), index.knows("cccc")]).toEqual([true, true, false]);
  });

  test("the agent's own write, and a report naming a container, change that one record at once", () => {
    const { state, dir } = setup();
    index = new RecordIndex(state, { watch: false }).start();
    const r = record("dddd");
    writeRecordFor(state, r);
    index.wrote(r);
    expect(ids(index)).toEqual(["dddd"]);
    pluginWrite(dir, record("eeee"));
    expect(index.knows("eeee")).toBe(false);
    index.refresh("eeee");
    expect(ids(index)).toEqual(["dddd", "eeee"]);
    unlinkSync(join(dir, "dddd.json"));
    index.refresh("dddd");
    expect(ids(index)).toEqual(["eeee"]);
    expect(index.knows("dddd")).toBe(true);
    // Names that cannot be a container's are never looked up.
    index.refresh("../../etc/passwd");
    expect(index.knows("../../etc/passwd")).toBe(false);
  });

  test("a report naming a container the index never held does not make it known", () => {
    const { state } = setup();
    index = new RecordIndex(state, { watch: false }).start();
    // A forged DEL report, twice: the second must not find the first's name remembered.
    index.refresh("forged99");
    index.refresh("forged99");
    expect(index.knows("forged99")).toBe(false);
  });

  test("a records folder removed and made again is watched again from the next rescan", async () => {
    const { state, dir } = setup();
    index = new RecordIndex(state).start();
    rmSync(dir, { recursive: true });
    mkdirSync(dir, { mode: 0o700 });
    index.rescan();
    pluginWrite(dir, record("aaaa"));
    await until(() => index!.size() === 1, "the record in the new folder seen");
  });

  test("a removed container is known for REMOVED_KEPT_MS, then forgotten", () => {
    const { state, dir } = setup();
    let now = 1_000_000;
    pluginWrite(dir, record("ffff"));
    index = new RecordIndex(state, { watch: false, now: () => now }).start();
    unlinkSync(join(dir, "ffff.json"));
    index.refresh("ffff");
    now += REMOVED_KEPT_MS;
    expect(index.knows("ffff")).toBe(true);
    now += 1;
    expect(index.knows("ffff")).toBe(false);
  });

  test("the rescan puts right what no event said, reading again only the files that changed", () => {
    const { state, dir } = setup();
    pluginWrite(dir, record("aaaa"));
    pluginWrite(dir, record("bbbb"));
    index = new RecordIndex(state, { watch: false }).start();
    // Changed behind its back: one rewritten, one removed, one added.
    writeFileSync(join(dir, "aaaa.json"), JSON.stringify(record("aaaa", { reason: "changed" })));
    utimesSync(join(dir, "aaaa.json"), new Date(), new Date(Date.now() + 5000));
    unlinkSync(join(dir, "bbbb.json"));
    pluginWrite(dir, record("cccc"));
    expect(ids(index)).toEqual(["aaaa", "bbbb"]);
    index.rescan();
    expect(index.records().records.map((r) => [r.containerId, r.reason])).toEqual([
      ["aaaa", "changed"],
      ["cccc", "has a linkerd-proxy container"],
    ]);
    expect(index.knows("bbbb")).toBe(true);
    // Unchanged files are not read again: a snapshot object survives a rescan that changed nothing.
    const before = index.records();
    index.rescan();
    expect(index.records()).toBe(before);
  });

  test("a records folder that appears only later: not made by the index, watched once it is there", async () => {
    root = mkdtempSync(join(tmpdir(), "meshcni-index-"));
    const state = join(root, "state");
    index = new RecordIndex(state).start();
    // The state folder is made (as for the socket), the records folder is not.
    expect(readdirSync(state)).toEqual([]);
    mkdirSync(join(state, "containers"), { mode: 0o700 });
    await Bun.sleep(50); // the state folder's watch sees it and starts the folder's own
    pluginWrite(join(state, "containers"), record("aaaa"));
    await until(() => index!.size() === 1, "the record seen");
  });
});
