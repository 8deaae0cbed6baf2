import { expect, test } from "bun:test";
import { everyString } from "../../test/support/regexp-agreement.ts";
import { createLogger, trimNewlines } from "./log.ts";

test('trimNewlines is what replace(/\\n+$/, "") returns, on every short string over a small alphabet', () => {
  const alphabet = ["a", "\n", "\r", " ", "\0", "é"];
  const bad: string[] = [];
  const agree = (s: string) => {
    if (trimNewlines(s) !== s.replace(/\n+$/, "") && bad.length < 20) bad.push(s);
  };
  agree("");
  everyString(alphabet, 7, agree);
  for (const s of ["\n".repeat(1000), `x${"\n".repeat(1000)}`, `${"\n".repeat(1000)}x`]) agree(s);
  expect(bad).toEqual([]);
});

test("a message's lines each carry the prefix; trailing line breaks make no empty lines", () => {
  let out = "";
  const log = createLogger("info", (l) => (out += l), "ADD abc");
  log.info("one\r\ntwo\n\n");
  log.debug("hidden");
  log.warn("\n");
  expect(out).toBe("meshcni: info ADD abc: one\nmeshcni: info ADD abc: two\nmeshcni: warn ADD abc: \n");
});
