// Whether the agent applies: its capabilities as /proc/self/status says, the setns it tried,
// the switch (internal/agent/apply/ability.ts).
import { describe, expect, test } from "bun:test";
import { judgeAbility, missingCaps, parseCapEff } from "../../internal/agent/apply/ability.ts";

const status = (eff: string) => `Name:\tmeshcni\nCapInh:\t0000000000000000\nCapEff:\t${eff}\nCapBnd:\t${eff}\n`;
const NET_ADMIN = 1n << 12n;
const SYS_ADMIN = 1n << 21n;

describe("the agent's ability to apply", () => {
  test("CapEff is read from /proc/self/status", () => {
    expect(parseCapEff(status("0000000000201000"))).toBe(NET_ADMIN | SYS_ADMIN);
    expect(parseCapEff(status("000001ffffffffff"))).toBe(0x1ffffffffffn);
    expect(parseCapEff("Name:\tx\n")).toBeUndefined();
    expect(parseCapEff(status("zz"))).toBeUndefined();
  });
  test("both capabilities are needed, each named when missing", () => {
    expect(missingCaps(NET_ADMIN | SYS_ADMIN)).toEqual([]);
    expect(missingCaps(NET_ADMIN)).toEqual(["CAP_SYS_ADMIN"]);
    expect(missingCaps(SYS_ADMIN)).toEqual(["CAP_NET_ADMIN"]);
    expect(missingCaps(0n)).toEqual(["CAP_NET_ADMIN", "CAP_SYS_ADMIN"]);
    expect(missingCaps(undefined)).toEqual(["CAP_NET_ADMIN", "CAP_SYS_ADMIN"]);
  });
  const ok = { target: "/var/run/netns/x", ok: true };
  test("applies with both capabilities and a working setns", () => {
    const a = judgeAbility({ enabled: true, capEff: NET_ADMIN | SYS_ADMIN, setns: ok, nftLibrary: { ok: true } });
    expect(a.applies).toBe(true);
    expect(a.nftInProcess).toBe(true);
    expect(a.reason).toContain("setns into /var/run/netns/x works; nftables in process");
  });
  test("does not apply when turned off, when a capability lacks, or when setns fails", () => {
    const caps = NET_ADMIN | SYS_ADMIN;
    const off = judgeAbility({ enabled: false, capEff: caps, setns: ok, nftLibrary: { ok: true } });
    expect(off).toMatchObject({ applies: false });
    expect(off.reason).toContain("--agent-applies=false");
    const one = judgeAbility({ enabled: true, capEff: NET_ADMIN, setns: ok, nftLibrary: { ok: true } });
    expect(one).toMatchObject({ applies: false, missingCapabilities: ["CAP_SYS_ADMIN"] });
    expect(one.reason).toContain("lacks CAP_SYS_ADMIN");
    const denied = { target: "/proc/self/ns/net", ok: false, error: "setns into /proc/self/ns/net failed (EPERM)" };
    const seccomp = judgeAbility({ enabled: true, capEff: caps, setns: denied, nftLibrary: { ok: true } });
    expect(seccomp.applies).toBe(false);
    expect(seccomp.reason).toContain("failed (EPERM)");
  });
});
