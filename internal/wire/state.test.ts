import { expect, test } from "bun:test";
import { createHash } from "node:crypto";
import { everyString } from "../../test/support/regexp-agreement.ts";
import { RECORD_ID_MAX, recordName } from "./state.ts";
import { CONTAINER_ID, safeContainerId } from "./state.ts";

test(
  "safeContainerId's loop agrees with CONTAINER_ID on every " +
    "short string over a small alphabet, and at the length bound",
  () => {
    const alphabet = ["a", "Z", "0", "_", ".", "-", "/", " ", "\0", "é"];
    const agree = (s: string) => expect([s, safeContainerId(s)]).toEqual([s, CONTAINER_ID.test(s)]);
    agree("");
    everyString(alphabet, 4, agree);
    for (const len of [255, 256, 257]) for (const c of ["a", "_", "/"]) agree(`a${c.repeat(len - 1)}`);
    expect(safeContainerId(undefined)).toBe(false);
    expect(safeContainerId("../../etc/passwd")).toBe(false);
  },
);

test(
  "a record's name: the ID up to RECORD_ID_MAX characters, " + "past it the ID's SHA-256 (no ID's name starts with _)",
  () => {
    const id = (n: number) => `c${"0".repeat(n - 1)}`;
    expect(recordName(id(64))).toBe(`${id(64)}.json`);
    expect(recordName(id(RECORD_ID_MAX))).toBe(`${id(RECORD_ID_MAX)}.json`);
    for (const n of [RECORD_ID_MAX + 1, 256, 1000]) {
      expect(recordName(id(n))).toBe(`_${createHash("sha256").update(id(n)).digest("hex")}.json`);
    }
    // Every name fits NAME_MAX (255 bytes), with room for a temp name's suffix on a plain one.
    expect(recordName(id(RECORD_ID_MAX)).length).toBeLessThanOrEqual(255);
    expect(safeContainerId("_abc")).toBe(false);
  },
);
