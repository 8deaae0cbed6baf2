import { describe, expect, test } from "bun:test";
import { everyString, seededRandom } from "../../../test/support/regexp-agreement.ts";
import { IPTABLES_VERSION, parseIptablesVersion, planXtablesLock, XTABLES_WAIT_SECONDS } from "./xtables-lock.ts";

describe("the xtables lock in a pod's namespace", () => {
  const ns = "/var/run/netns/cni-1";
  test("reads iptables-restore --version", () => {
    expect(parseIptablesVersion("iptables-restore v1.8.9 (legacy)\n")).toEqual({ version: [1, 8, 9], nft: false });
    expect(parseIptablesVersion("iptables-nft-restore v1.8.4 (nf_tables)")).toEqual({ version: [1, 8, 4], nft: true });
    expect(parseIptablesVersion("iptables-restore v1.6")).toEqual({ version: [1, 6, 0], nft: false });
    expect(parseIptablesVersion("unknown option")).toBeUndefined();
  });

  test("1.8.6 and later: the namespace file is the lock, --wait only with use-wait-flag", () => {
    for (const v of ["v1.8.6 (legacy)", "v1.8.10 (legacy)", "v1.10.0 (legacy)"]) {
      expect(planXtablesLock(`iptables-restore ${v}`, ns, false)).toEqual({ lockFile: ns, waitArgs: [] });
      expect(planXtablesLock(`iptables-restore ${v}`, ns, true)).toEqual({ lockFile: ns, waitArgs: ["--wait"] });
    }
  });

  test("below 1.8.6, or unreadable: no lock file (it would be ignored), a bounded wait for the host's lock", () => {
    for (const text of ["iptables-restore v1.8.5 (legacy)", "iptables-restore v1.6.2", undefined, "garbage"]) {
      for (const wait of [false, true]) {
        expect(planXtablesLock(text, ns, wait)).toEqual({ waitArgs: [`--wait=${XTABLES_WAIT_SECONDS}`] });
      }
    }
    // iptables-restore has no --wait before 1.6.2.
    expect(planXtablesLock("iptables-restore v1.6.1", ns, true)).toEqual({ waitArgs: [] });
  });

  test("nf_tables takes no lock", () => {
    expect(planXtablesLock("iptables-restore v1.8.4 (nf_tables)", ns, false)).toEqual({ waitArgs: [] });
  });
});

test(
  "parseIptablesVersion's loop finds what IPTABLES_VERSION (and /nf_tables/) " +
    "found, on every short string over a small alphabet and on random ones",
  () => {
    const was = (text: string) => {
      const m = IPTABLES_VERSION.exec(text);
      return m ? { version: [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)], nft: /nf_tables/.test(text) } : undefined;
    };
    const bad: string[] = [];
    const agree = (s: string) => {
      if (bad.length < 20 && JSON.stringify(parseIptablesVersion(s)) !== JSON.stringify(was(s))) bad.push(s);
    };
    const alphabet = ["v", "1", "0", ".", " ", "a", "_", "V", "-", "é"];
    agree("");
    everyString(alphabet, 6, agree);
    const rnd = seededRandom(5);
    const pieces = [
      "v",
      "1",
      "8",
      "10",
      "0",
      ".",
      " ",
      "iptables-restore ",
      "(legacy)",
      "(nf_tables)",
      "nf_tables",
      "nf_table",
      "nf_",
      "tables",
      "s",
      "_",
      "x",
      "\n",
      "123456789012345678901234",
    ];
    for (let i = 0; i < 50000; i++) {
      // Random pieces around, half the time, a version as iptables prints one.
      let s = "";
      for (let j = rnd(5); j > 0; j--) s += pieces[rnd(pieces.length)];
      if (rnd(2) === 0) s += `v${rnd(20)}.${rnd(20)}${rnd(2) === 0 ? `.${rnd(20)}` : ""}`;
      for (let j = rnd(5); j > 0; j--) s += pieces[rnd(pieces.length)];
      agree(s);
    }
    expect(bad).toEqual([]);
  },
);
