import { describe, expect, test } from "bun:test";
import { disagreements } from "../../test/support/regexp-agreement.ts";
import { cidrContains, HEX_GROUP, isHexGroup, isShortDecimal, parseCidr, parseCidrList, V4_OCTET } from "./cidr.ts";
import { groupMultiport, parsePortList, parsePortRange } from "./ports.ts";

describe("ports", () => {
  test("single ports and ranges, trimmed", () => {
    expect(parsePortRange(" 80 ")).toEqual({ from: 80, to: 80 });
    expect(parsePortRange("25-27")).toEqual({ from: 25, to: 27 });
    expect(parsePortRange("22-22")).toEqual({ from: 22, to: 22 });
    expect(parsePortRange(0)).toEqual({ from: 0, to: 0 });
    expect(parsePortRange(65535)).toEqual({ from: 65535, to: 65535 });
  });
  test("anything else is refused", () => {
    for (const bad of [
      "",
      "70000",
      "-1",
      "27-25",
      "8O",
      "80 -j ACCEPT",
      "80\n-A",
      "１２３",
      "0x50",
      "1e3",
      "80-",
      "-80",
      "80:90",
      " 8 0",
      "99999-100000",
    ]) {
      expect(parsePortRange(bad)).toBeUndefined();
    }
    expect(parsePortRange(80.5)).toBeUndefined();
    expect(parsePortRange(-1)).toBeUndefined();
  });
  test("lists skip empty items and name the first bad one", () => {
    expect(parsePortList("443, 8080 ,").ports.length).toBe(2);
    expect(parsePortList("443,x,9").bad).toBe("x");
    expect(parsePortList(["80-90"], true).bad).toBe("80-90");
  });
  test("multiport groups hold 15 slots, a range takes two (linkerd's rule)", () => {
    const ports = parsePortList([
      "22-23",
      "25-27",
      "33-34",
      "35-35",
      "37-38",
      "50-54",
      "56",
      "58",
      "60",
      "63",
      "70-72",
    ]).ports;
    expect(groupMultiport(ports)).toEqual([
      ["22:23", "25:27", "33:34", "35", "37:38", "50:54", "56", "58", "60", "63"],
      ["70:72"],
    ]);
    expect(groupMultiport(parsePortList("1,1,2").ports)).toEqual([["1", "2"]]);
    expect(groupMultiport([])).toEqual([]);
  });
});

describe("cidrs", () => {
  test("normalised as iptables-save prints them", () => {
    expect(parseCidr("10.1.2.3/8")?.text).toBe("10.0.0.0/8");
    expect(parseCidr(" 192.168.7.0/24 ")?.text).toBe("192.168.7.0/24");
    expect(parseCidr("0.0.0.0/0")?.text).toBe("0.0.0.0/0");
    expect(parseCidr("FD00:10:96:0:0:0:0:1/112")?.text).toBe("fd00:10:96::/112");
    expect(parseCidr("::1/128")?.text).toBe("::1/128");
    expect(parseCidr("::/0")?.text).toBe("::/0");
    expect(parseCidr("2001:db8:0:0:1:0:0:1/128")?.text).toBe("2001:db8::1:0:0:1/128");
    expect(parseCidr("::ffff:10.0.0.1/128")?.family).toBe(6);
    // surrounding whitespace (a line break too) is trimmed, never carried into the rule
    expect(parseCidr("10.0.0.0/8\n")?.text).toBe("10.0.0.0/8");
  });
  test("anything else is refused", () => {
    for (const bad of [
      "10.0.0.0",
      "10.0.0.0/33",
      "10.0.0/8",
      "010.0.0.0/8",
      "10.0.0.0/08",
      "::/129",
      "1:2:3:4:5:6:7:8:9/64",
      "1::2::3/64",
      "10.0.0.0/8 -j ACCEPT",
      "10.0.0.0/8\n-A X",
      "١٠.0.0.0/8",
      "fd00::g/8",
      "/8",
      "10.0.0.0/-1",
    ]) {
      expect(parseCidr(bad)).toBeUndefined();
    }
  });
  test("lists", () => {
    expect(parseCidrList("10.0.0.0/8, 10.0.0.0/8,fd00::/8").cidrs.map((c) => c.text)).toEqual([
      "10.0.0.0/8",
      "fd00::/8",
    ]);
    expect(parseCidrList("10.0.0.0/8,nope").bad).toBe("nope");
  });
  test("containment", () => {
    expect(cidrContains(parseCidr("10.0.0.0/8")!, "10.9.8.7")).toBe(true);
    expect(cidrContains(parseCidr("10.0.0.0/8")!, "11.0.0.1")).toBe(false);
    expect(cidrContains(parseCidr("fd00::/8")!, "fd12::1")).toBe(true);
  });
});

test("IPv6 text as ip6tables-save prints it (inet_ntop): IPv4-mapped and -compatible end in dotted quad", () => {
  const text = (s: string) => parseCidr(s)?.text;
  expect(text("::ffff:a00:0/104")).toBe("::ffff:10.0.0.0/104");
  expect(text("::ffff:10.0.0.0/104")).toBe("::ffff:10.0.0.0/104");
  expect(text("::ffff:0:0/96")).toBe("::ffff:0.0.0.0/96");
  expect(text("::a00:0/104")).toBe("::10.0.0.0/104");
  expect(text("::1/128")).toBe("::1/128");
  expect(text("::/0")).toBe("::/0");
  expect(text("64:ff9b::1.2.3.4/128")).toBe("64:ff9b::102:304/128");
  expect(text("fd00::ffff:0:0/96")).toBe("fd00::ffff:0:0/96");
});

test("octets, prefix lengths and IPv6 groups", () => {
  for (const ok of ["0", "7", "10", "255", "999"]) expect(isShortDecimal(ok)).toBe(true);
  for (const bad of ["", "00", "08", "1000", "1a", " 1", "-1", "1\n"]) expect(isShortDecimal(bad)).toBe(false);
  for (const ok of ["0", "fd00", "FFFF", "aB9"]) expect(isHexGroup(ok)).toBe(true);
  for (const bad of ["", "fd000", "g", "0x1", ":", "a b"]) expect(isHexGroup(bad)).toBe(false);
});

test("isShortDecimal agrees with V4_OCTET (the octet and prefix length RegExp)", () => {
  expect(
    disagreements(isShortDecimal, V4_OCTET, {
      alphabet: ["0", "1", "9", "/", ":", ".", "a", " ", "\n"],
      valid: "0123456789",
      bounds: [1, 3],
      depth: 5,
    }),
  ).toEqual([]);
});

test("isHexGroup agrees with HEX_GROUP", () => {
  expect(
    disagreements(isHexGroup, HEX_GROUP, {
      alphabet: ["0", "9", "a", "f", "A", "F", "g", "G", "/", ":", "@", "`", " "],
      valid: "0123456789abcdefABCDEF",
      bounds: [4],
      depth: 5,
    }),
  ).toEqual([]);
});
