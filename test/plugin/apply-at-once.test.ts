// What an ADD starts at the same time. A dual-stack pod's two iptables transactions: at once
// where the binaries share no lock (iptables-nft), one after the other where they do (legacy
// iptables, one lock file for IPv4 and IPv6); either way a pod gets both families or neither.
// The plan's `ip` commands (Istio's TPROXY rule and route, IPv6's ::6): all at once, after the
// rules; when one fails, the rules go again. Real namespaces, real iptables and ip. Needs root.
import { afterEach, describe, expect, test } from "bun:test";
import { applyPlan } from "../../internal/firewall/apply.ts";
import { undoIpCommand as undoOf } from "../../internal/plan/model.ts";
import { ISTIO_CLEANUP_IP_COMMANDS } from "../../internal/mesh/istio/rules.ts";
import type { Firewall } from "../../internal/firewall/backend.ts";
import { openFirewall } from "../../internal/firewall/io/open.ts";
import { createLogger } from "../../internal/plugin/log.ts";
import { allCases } from "../nftables/cases.ts";
import { isRoot, Netns, uniq } from "../support/netns.ts";

const log = createLogger("error", (l) => {
  if (Bun.env.SHOWLOG) console.error(l);
});
const t = () => AbortSignal.timeout(10000);
const dualStack = () => allCases().find((c) => c.name === "linkerd-ipv6")!;

/**
 * The firewall with its runs and `ip` commands timed; the restore of `failing` (a key such as
 * "restore6"), or the `ip` command whose words start with it (such as "route"), refused; the `ip`
 * command whose words start with `stalling` throws the plugin's time-out error.
 */
function timed(fw: Firewall, failing?: string, stalling?: string) {
  const runs: { key: string; start: number; end: number; code: number }[] = [];
  const run: Firewall["run"] = async (key, argv, stdin, signal) => {
    const start = performance.now();
    const r =
      key === failing
        ? { code: 2, stdout: "", stderr: "iptables-restore: line 3 failed" }
        : await fw.run(key, argv, stdin, signal);
    runs.push({ key, start, end: performance.now(), code: r.code });
    return r;
  };
  const ip: Firewall["ip"] = async (family, argv, signal) => {
    const start = performance.now();
    if (argv[0] === stalling) throw new Error("timed out: ip did not finish within the plugin's time bound");
    const r =
      argv[0] === failing
        ? { code: 2, stdout: "", stderr: "RTNETLINK answers: Operation not permitted" }
        : await fw.ip(family, argv, signal);
    runs.push({ key: `ip -${family} ${argv.join(" ")}`, start, end: performance.now(), code: r.code });
    return r;
  };
  return { fw: { ...fw, run, ip }, runs };
}

const overlaps = (a: { start: number; end: number }, b: { start: number; end: number }) =>
  Math.min(a.end, b.end) > Math.max(a.start, b.start);

describe.skipIf(!isRoot())("a dual-stack pod: its families and its ip commands", () => {
  let ns: Netns | undefined;
  afterEach(() => ns?.delete());

  for (const variant of ["nft", "legacy"] as const) {
    test(`iptables-${variant}: ${variant === "nft" ? "both restores at once" : "one restore after the other"}, and both families in place`, async () => {
      ns = Netns.create(`mcf-${uniq()}`);
      const c = dualStack();
      expect(c.plan.families.map((f) => f.family)).toEqual([4, 6]);
      const fw = await openFirewall(ns.path, { mode: variant, wait: false, simulate: false }, [4, 6], Bun.env.PATH);
      expect(fw.concurrent).toBe(variant === "nft");
      const { fw: watched, runs } = timed(fw);
      await fw.driver.apply({ ...watched, driver: fw.driver } as typeof fw, c.plan, log, t());
      const [a, b] = [runs.find((r) => r.key === "restore4")!, runs.find((r) => r.key === "restore6")!];
      expect(runs.length).toBe(2);
      expect(overlaps(a, b)).toBe(variant === "nft");
      expect(await fw.driver.verify(fw, c.plan, t())).toEqual([]);
    });
  }

  test("iptables-nft: when one family fails, the other is rolled back and the ADD fails", async () => {
    ns = Netns.create(`mcf-${uniq()}`);
    const c = dualStack();
    const fw = await openFirewall(ns.path, { mode: "nft", wait: false, simulate: false }, [4, 6], Bun.env.PATH);
    const { fw: failing6, runs } = timed(fw, "restore6");
    await expect(fw.driver.apply({ ...failing6, driver: fw.driver } as typeof fw, c.plan, log, t())).rejects.toThrow(
      /ip6tables-restore failed/,
    );
    // The failed family was tried once more on its own before the ADD gave up.
    const six = runs.filter((r) => r.key === "restore6");
    expect(six.length).toBe(2);
    expect(six[1]!.start).toBeGreaterThanOrEqual(runs.find((r) => r.key === "restore4")!.end);
    // IPv4 went in at the same time and came out again: nothing of meshcni's in either family.
    expect(ns.save("nft", 4)).not.toContain("PROXY_INIT");
    expect(ns.save("nft", 6)).not.toContain("PROXY_INIT");
    // And the same plan applies cleanly afterwards.
    await fw.driver.apply(fw, c.plan, log, t());
    expect(await fw.driver.verify(fw, c.plan, t())).toEqual([]);
  });

  test("iptables-nft: a family that fails once at the same time as the other is tried again alone, and the ADD succeeds", async () => {
    ns = Netns.create(`mcf-${uniq()}`);
    const c = dualStack();
    const fw = await openFirewall(ns.path, { mode: "nft", wait: false, simulate: false }, [4, 6], Bun.env.PATH);
    let refused = 0;
    const once: Firewall["run"] = (key, argv, stdin, signal) =>
      key === "restore6" && refused++ === 0
        ? Promise.resolve({
            code: 4,
            stdout: "",
            stderr: "iptables-restore: line 12 failed: Resource temporarily unavailable",
          })
        : fw.run(key, argv, stdin, signal);
    await fw.driver.apply({ ...fw, run: once } as typeof fw, c.plan, log, t());
    expect(refused).toBe(2);
    expect(await fw.driver.verify(fw, c.plan, t())).toEqual([]);
  });

  test("Istio TPROXY, dual-stack: the five ip commands run at once, after the rules, and all take effect", async () => {
    ns = Netns.create(`mcf-${uniq()}`);
    const c = allCases().find((x) => x.name === "istio-ipv6-tproxy-dns")!;
    expect(c.plan.ipCommands.length).toBe(5);
    const fw = await openFirewall(ns.path, { mode: "nft", wait: false, simulate: false }, [4, 6], Bun.env.PATH);
    const { fw: watched, runs } = timed(fw);
    await applyPlan({ ...watched, driver: fw.driver } as typeof fw, c.plan, log, t());
    const ips = runs.filter((r) => r.key.startsWith("ip "));
    const restores = runs.filter((r) => !r.key.startsWith("ip "));
    expect(ips.length).toBe(5);
    for (const r of ips) expect(r.code).toBe(0);
    // Every ip command started after every restore ended, and before any other ip command ended.
    const lastRestore = Math.max(...restores.map((r) => r.end));
    const firstIpEnd = Math.min(...ips.map((r) => r.end));
    for (const r of ips) expect(r.start).toBeGreaterThanOrEqual(lastRestore);
    for (const r of ips) expect(r.start).toBeLessThan(firstIpEnd);
    expect(ns.exec(["ip", "-4", "rule"]).stdout).toContain("fwmark 0x539 lookup 133");
    expect(ns.exec(["ip", "-6", "rule"]).stdout).toContain("fwmark 0x539 lookup 133");
    expect(ns.exec(["ip", "-4", "route", "show", "table", "133"]).stdout).toContain("local default dev lo");
    expect(ns.exec(["ip", "-6", "route", "show", "table", "133"]).stdout).toContain("local default dev lo");
    expect(ns.exec(["ip", "-6", "addr", "show", "dev", "lo"]).stdout).toContain("::6/128");
    // ADD again: the rule and route are there already ("File exists" is fine).
    await applyPlan(fw, c.plan, log, t());
    expect(await fw.driver.verify(fw, c.plan, t())).toEqual([]);
  });

  test("Istio TPROXY, dual-stack: a failing ip command fails the ADD; the rules and the ip changes it made are taken back out", async () => {
    ns = Netns.create(`mcf-${uniq()}`);
    const c = allCases().find((x) => x.name === "istio-ipv6-tproxy-dns")!;
    const fw = await openFirewall(ns.path, { mode: "nft", wait: false, simulate: false }, [4, 6], Bun.env.PATH);
    // The routes fail; the rules and the ::6 address went in at the same time.
    const { fw: failingRoute, runs } = timed(fw, "route");
    await expect(applyPlan({ ...failingRoute, driver: fw.driver } as typeof fw, c.plan, log, t())).rejects.toThrow(
      /ip route replace local default dev lo table 133 failed/,
    );
    expect(runs.filter((r) => r.key.includes(" rule add ")).map((r) => r.code)).toEqual([0, 0]);
    expect(ns.save("nft", 4)).not.toContain("ISTIO");
    expect(ns.save("nft", 6)).not.toContain("ISTIO");
    expect(ns.exec(["ip", "-4", "rule"]).stdout).not.toContain("lookup 133");
    expect(ns.exec(["ip", "-6", "rule"]).stdout).not.toContain("lookup 133");
    expect(ns.exec(["ip", "-6", "addr", "show", "dev", "lo"]).stdout).not.toContain("::6/128");
  });

  test("Istio TPROXY: a command's own failure is the ADD's error, not another one's time-out", async () => {
    ns = Netns.create(`mcf-${uniq()}`);
    const c = allCases().find((x) => x.name === "istio-ipv6-tproxy-dns")!;
    const fw = await openFirewall(ns.path, { mode: "nft", wait: false, simulate: false }, [4, 6], Bun.env.PATH);
    const { fw: mixed } = timed(fw, "route", "addr");
    await expect(applyPlan({ ...mixed, driver: fw.driver } as typeof fw, c.plan, log, t())).rejects.toThrow(
      /ip route replace .* failed in the pod network namespace/,
    );
    expect(ns.exec(["ip", "-4", "rule"]).stdout).not.toContain("lookup 133");
    // With only the time-out, the time-out is the error.
    const { fw: stalled } = timed(fw, undefined, "addr");
    await expect(applyPlan({ ...stalled, driver: fw.driver } as typeof fw, c.plan, log, t())).rejects.toThrow(
      /timed out/,
    );
  });
});

describe("undoing a plan's ip commands", () => {
  test("each command an Istio plan can hold has its undo among DEL's clean-up commands", () => {
    const plans = allCases().filter((x) => x.plan.ipCommands.length > 0);
    expect(plans.length).toBeGreaterThan(3);
    const cleanup = ISTIO_CLEANUP_IP_COMMANDS.map((x) => `${x.family} ${x.argv.join(" ")}`);
    for (const c of plans) {
      for (const cmd of c.plan.ipCommands) {
        const undo = undoOf(cmd);
        expect(undo, `${c.name}: ip ${cmd.argv.join(" ")}`).toBeDefined();
        expect(cleanup).toContain(`${undo!.family} ${undo!.argv.join(" ")}`);
      }
    }
    expect(undoOf({ family: 4, argv: ["route", "show"] })).toBeUndefined();
  });
});
