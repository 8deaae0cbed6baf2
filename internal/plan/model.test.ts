// The plan model's name and comment checks: character loops held to the RegExps they stand for.
import { expect, test } from "bun:test";
import { disagreements } from "../../test/support/regexp-agreement.ts";
import { CHAIN_NAME, COMMENT_TEXT, IFACE_NAME, isChainName, isCommentText, isIfaceName } from "./model.ts";

test("chain names, interface names and comments: examples", () => {
  for (const ok of ["PROXY_INBOUND", "A", "ISTIO_REDIRECT", "X".repeat(29)]) expect(isChainName(ok)).toBe(true);
  for (const bad of ["", "proxy", "_A", "1A", "PROXY INBOUND", "X\n", "X".repeat(30)])
    expect(isChainName(bad)).toBe(false);
  for (const ok of ["eth0", "lo", "_x", "veth.1-a", "x".repeat(15)]) expect(isIfaceName(ok)).toBe(true);
  for (const bad of ["", ".a", "-a", "eth0 -j", 'a"', "x".repeat(16)]) expect(isIfaceName(bad)).toBe(false);
  for (const ok of ["meshcni: inbound", "a", "x, y/z-1.2_3", "x".repeat(200)]) expect(isCommentText(ok)).toBe(true);
  for (const bad of ["", 'x" -j ACCEPT "', "a\nb", "a\\b", "x".repeat(201)]) expect(isCommentText(bad)).toBe(false);
});

// Each alphabet holds the characters the RegExp accepts and their neighbours in ASCII.
const edges = ["@", "[", "`", "{", "/", ":", "\0", "é"];

test("isChainName agrees with CHAIN_NAME", () => {
  expect(
    disagreements(isChainName, CHAIN_NAME, {
      alphabet: ["A", "Z", "0", "9", "_", "a", ...edges],
      valid: "AZ09_QX",
      bounds: [29],
    }),
  ).toEqual([]);
});

test("isIfaceName agrees with IFACE_NAME", () => {
  expect(
    disagreements(isIfaceName, IFACE_NAME, {
      alphabet: ["a", "Z", "0", "_", ".", "-", ",", ...edges],
      valid: "azAZ09_.-",
      bounds: [15],
    }),
  ).toEqual([]);
});

test("isCommentText agrees with COMMENT_TEXT", () => {
  expect(
    disagreements(isCommentText, COMMENT_TEXT, {
      alphabet: ["a", "Z", "0", "_", ".", ",", "-", " ", "+", ";", '"', ...edges],
      valid: "azAZ09_.,:/ -",
      bounds: [200],
    }),
  ).toEqual([]);
});
