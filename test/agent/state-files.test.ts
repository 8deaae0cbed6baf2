// The agent's files in its state folder never follow a symbolic link (internal/agent/state/safe-file.ts):
// its records are written through a temp file of a random name opened O_EXCL|O_NOFOLLOW and
// renamed over the final name; what it reads (records, the plugin's fallback log) is opened
// O_NOFOLLOW|O_NONBLOCK and only when it is a regular file. Each test plants links where the
// agent writes or reads, pointing outside the folder, and checks that nothing outside was written
// or read.
import { afterEach, describe, expect, test } from "bun:test";
import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PodRecord } from "../../internal/wire/state.ts";
import { readRecords, takeFallbackLog, writeRecordFor } from "../../internal/agent/state/files.ts";
import { readFileNoFollow, writeFileNoFollow } from "../../internal/agent/state/safe-file.ts";

let root: string;
afterEach(() => rmSync(root, { recursive: true, force: true }));

/** A state folder and, beside it, a file outside it that a link points at. */
function setup() {
  root = mkdtempSync(join(tmpdir(), "meshcni-state-"));
  const state = join(root, "state");
  const records = join(state, "containers");
  mkdirSync(records, { recursive: true, mode: 0o700 });
  const outside = join(root, "outside");
  writeFileSync(outside, "host file\n");
  return { state, records, outside };
}

const RECORD: PodRecord = {
  v: 1,
  containerId: "3f0c9b6a1e2d",
  namespace: "emojivoto",
  name: "web-1",
  uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f",
  decision: "meshed",
  reason: "has a linkerd-proxy container",
  families: [4],
  time: "2026-01-01T10:00:00.000Z",
};

describe("the agent's writes follow no symbolic link", () => {
  test("a record: a link at its final name is replaced, the file it points at is not written", () => {
    const { state, records, outside } = setup();
    symlinkSync(outside, join(records, `${RECORD.containerId}.json`));
    writeRecordFor(state, RECORD);
    expect(readFileSync(outside, "utf8")).toBe("host file\n");
    expect(lstatSync(join(records, `${RECORD.containerId}.json`)).isFile()).toBe(true);
    expect(readRecords(state).records).toEqual([RECORD]);
    expect(readdirSync(records)).toEqual([`${RECORD.containerId}.json`]); // no temp file left
  });

  test("a link at a predictable temp name is never opened: another name is taken, or the write fails", () => {
    const { records, outside } = setup();
    symlinkSync(outside, join(records, ".fixed.tmp"));
    // The first name tried is the planted one (O_EXCL: EEXIST), the next a fresh one.
    const names = [".fixed.tmp", ".fresh.tmp"];
    writeFileNoFollow(records, "note", "1\n", { temp: () => names.shift()! });
    expect(readFileSync(outside, "utf8")).toBe("host file\n");
    expect(readFileSync(join(records, "note"), "utf8")).toBe("1\n");
    // Only the planted name, every time: it gives up, having written nothing anywhere.
    expect(() => writeFileNoFollow(records, "note", "2\n", { temp: () => ".fixed.tmp" })).toThrow(/EEXIST/);
    expect(readFileSync(outside, "utf8")).toBe("host file\n");
    expect(readFileSync(join(records, "note"), "utf8")).toBe("1\n");
    expect(lstatSync(join(records, ".fixed.tmp")).isSymbolicLink()).toBe(true);
  });

  test("the records folder itself a link: nothing is written through it", () => {
    const { state, records } = setup();
    const elsewhere = join(root, "elsewhere");
    mkdirSync(elsewhere);
    rmSync(records, { recursive: true });
    symlinkSync(elsewhere, records);
    expect(() => writeRecordFor(state, RECORD)).toThrow(/symbolic link/);
    expect(readdirSync(elsewhere)).toEqual([]);
  });
});

describe("the agent's reads follow no symbolic link", () => {
  test("a record that is a link, a FIFO or a folder is named unreadable, not read (and a FIFO does not hang)", () => {
    const { state, records, outside } = setup();
    writeFileSync(outside, JSON.stringify({ ...RECORD, containerId: "outside" }));
    symlinkSync(outside, join(records, "linked.json"));
    Bun.spawnSync(["mkfifo", join(records, "fifo.json")]);
    mkdirSync(join(records, "folder.json"));
    writeRecordFor(state, RECORD);
    const read = readRecords(state);
    expect(read.records).toEqual([RECORD]);
    expect(read.unreadable.sort()).toEqual(["fifo.json", "folder.json", "linked.json"]);
  });

  test("the plugin's fallback log as a link: not read, not printed; the link is taken away", () => {
    const { state, outside } = setup();
    writeFileSync(outside, "root:secret\n");
    symlinkSync(outside, join(state, "plugin.log"));
    writeFileSync(join(state, "plugin.log.1"), "meshcni: info a line\n");
    expect(takeFallbackLog(state)).toEqual([
      { file: join(state, "plugin.log.1"), content: "meshcni: info a line\n" },
      {
        file: join(state, "plugin.log"),
        content: "",
        problem: `${join(state, "plugin.log")} is a symbolic link; not reading it`,
      },
    ]);
    expect(readFileSync(outside, "utf8")).toBe("root:secret\n");
    expect(readdirSync(state).sort()).toEqual(["containers"]);
  });

  test("reads are bounded", () => {
    const { records } = setup();
    writeFileSync(join(records, "big"), "x".repeat(100));
    expect(readFileNoFollow(join(records, "big"), 10)).toEqual({ text: "x".repeat(10), truncated: true });
    expect(readFileNoFollow(join(records, "big"), 100)).toEqual({ text: "x".repeat(100), truncated: false });
    expect(readFileNoFollow(join(records, "none"), 10)).toBeUndefined();
  });
});
