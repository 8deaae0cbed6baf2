import { expect, test } from "bun:test";
import { CONTAINER_ID, safeContainerId } from "./plugin-state.ts";

test("safeContainerId's loop agrees with CONTAINER_ID on every short string over a small alphabet, and at the length bound", () => {
  const alphabet = ["a", "Z", "0", "_", ".", "-", "/", " ", "\0", "é"];
  const agree = (s: string) => expect([s, safeContainerId(s)]).toEqual([s, CONTAINER_ID.test(s)]);
  let level = [""];
  agree("");
  for (let n = 0; n < 4; n++) {
    const next: string[] = [];
    for (const p of level) for (const c of alphabet) next.push(p + c);
    for (const s of next) agree(s);
    level = next;
  }
  for (const len of [255, 256, 257]) for (const c of ["a", "_", "/"]) agree(`a${c.repeat(len - 1)}`);
  expect(safeContainerId(undefined)).toBe(false);
  expect(safeContainerId("../../etc/passwd")).toBe(false);
});
