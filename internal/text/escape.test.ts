import { describe, expect, test } from "bun:test";
import { disagreements } from "../../test/support/regexp-agreement.ts";
import { escapeText, isPlainValue, PLAIN_VALUE, quote, quoteValue } from "./escape.ts";

describe("escaping pod-controlled text for log lines", () => {
  test("line breaks, terminal escapes, bidi and zero-width characters become visible escapes", () => {
    expect(escapeText("a\nb\r\tc")).toBe("a\\nb\\r\\tc");
    expect(escapeText("\x1b[2Jred")).toBe("\\x1b[2Jred");
    expect(escapeText("\u202egnp.exe\u200b\u2028")).toBe("\\u202egnp.exe\\u200b\\u2028");
    expect(escapeText("\ud800x")).toBe("\\ud800x");
    expect(escapeText("ünïcode 😀 stays")).toBe("ünïcode 😀 stays");
  });

  test("quote: always quoted, the same as JSON.stringify for printable text", () => {
    for (const s of ["", "router", 'a "b" \\c', "5432,$(reboot)"]) expect(quote(s)).toBe(JSON.stringify(s));
    expect(quote("router\nmeshcni: info forged")).toBe('"router\\nmeshcni: info forged"');
    expect(quote("x\u0085y\u2029")).toBe('"x\\x85y\\u2029"');
  });

  test("quoteValue: bare only when plainly safe", () => {
    expect(quoteValue("emojivoto/web-1")).toBe("emojivoto/web-1");
    expect(quoteValue("a b")).toBe('"a b"');
  });
});

test("isPlainValue agrees with PLAIN_VALUE", () => {
  expect(
    disagreements(isPlainValue, PLAIN_VALUE, {
      alphabet: [
        "a",
        "Z",
        "0",
        "9",
        ".",
        "_",
        ":",
        "/",
        "@",
        "+",
        "-",
        ",",
        ";",
        "*",
        "?",
        "[",
        "`",
        "{",
        " ",
        '"',
        "\n",
      ],
      valid: "azAZ09._:/@+-",
      bounds: [1, 64],
      depth: 4,
    }),
  ).toEqual([]);
});
