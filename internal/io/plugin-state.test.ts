import { expect, test } from "bun:test";
import { everyString } from "../../test/support/regexp-agreement.ts";
import { CONTAINER_ID, safeContainerId } from "./plugin-state.ts";

test("safeContainerId's loop agrees with CONTAINER_ID on every short string over a small alphabet, and at the length bound", () => {
  const alphabet = ["a", "Z", "0", "_", ".", "-", "/", " ", "\0", "é"];
  const agree = (s: string) => expect([s, safeContainerId(s)]).toEqual([s, CONTAINER_ID.test(s)]);
  agree("");
  everyString(alphabet, 4, agree);
  for (const len of [255, 256, 257]) for (const c of ["a", "_", "/"]) agree(`a${c.repeat(len - 1)}`);
  expect(safeContainerId(undefined)).toBe(false);
  expect(safeContainerId("../../etc/passwd")).toBe(false);
});
