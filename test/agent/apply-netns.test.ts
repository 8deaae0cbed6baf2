// The agent's way into pods' network namespaces (internal/firewall/io/setns.ts,
// open-in-netns.ts) and its applier (internal/agent/apply/apply.ts), on real namespaces: a
// process started from the thread that entered a namespace starts in it (its /proc/PID/ns/net),
// every thread is back home afterwards, `auto` reads the namespace's own legacy tables, and each
// backend applies, verifies and replaces a plan there with this machine's userland (standing in
// for the agent image's). Needs root.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readlinkSync, statSync } from "node:fs";
import { createApplier } from "../../internal/agent/apply/apply.ts";
import { agentUserland, openAgentFirewall, readNamespaceTables } from "../../internal/firewall/io/open-in-netns.ts";
import { loadNetnsCalls, spawnInNetns, trySetns } from "../../internal/firewall/io/setns.ts";
import type { FirewallSettings } from "../../internal/firewall/registry.ts";
import { isRoot, Netns, uniq } from "../support/netns.ts";
import { allCases } from "../nftables/cases.ts";

const threads = () => readdirSync("/proc/self/task").map((t) => readlinkSync(`/proc/self/task/${t}/ns/net`));
const settings = (mode: string): FirewallSettings => ({
  mode: mode as FirewallSettings["mode"],
  wait: true,
  simulate: false,
});

describe.skipIf(!isRoot())("the agent in pods' namespaces", () => {
  const made: Netns[] = [];
  let home: string;
  const fresh = () => {
    const ns = Netns.create(`mcap-${uniq()}`);
    made.push(ns);
    return ns;
  };
  beforeAll(async () => {
    await loadNetnsCalls();
    home = readlinkSync("/proc/thread-self/ns/net");
  });
  afterAll(() => {
    for (const ns of made) ns.delete();
  });

  test("a process started in a namespace's window starts there; the thread and every other stay home", async () => {
    const ns = fresh();
    const inode = statSync(ns.path).ino;
    const r = await spawnInNetns(ns.path, ["readlink", "/proc/self/ns/net"], { signal: AbortSignal.timeout(5000) });
    expect(r.stdout.trim()).toBe(`net:[${inode}]`);
    expect(readlinkSync("/proc/thread-self/ns/net")).toBe(home);
    for (const n of threads()) expect(n).toBe(home);
    // stdin reaches it.
    const cat = await spawnInNetns(ns.path, ["cat"], { stdin: "in the pod\n", signal: AbortSignal.timeout(5000) });
    expect(cat).toEqual({ code: 0, stdout: "in the pod\n", stderr: "" });
  });

  test("a binary that is not there, a namespace that is not there: errors, and the thread is home", async () => {
    const ns = fresh();
    await expect(
      spawnInNetns(ns.path, [`/nonexistent-${uniq()}`], { signal: AbortSignal.timeout(5000) }),
    ).rejects.toThrow();
    expect(readlinkSync("/proc/thread-self/ns/net")).toBe(home);
    expect(trySetns(`/var/run/netns/none-${uniq()}`)).toMatchObject({ ok: false });
    expect(trySetns(ns.path)).toEqual({ ok: true });
    expect(readlinkSync("/proc/thread-self/ns/net")).toBe(home);
  });

  test("auto reads the pod's namespace's own legacy tables, not the host's", () => {
    const ns = fresh();
    expect(readNamespaceTables(ns.path, [4, 6]).legacy).toEqual({ 4: [], 6: [] });
    // Listing the legacy nat table instantiates it in that namespace only.
    ns.exec(["iptables-legacy", "-t", "nat", "-S"]);
    expect(readNamespaceTables(ns.path, [4, 6]).legacy).toEqual({ 4: ["nat"], 6: [] });
    expect(readNamespaceTables(fresh().path, [4]).legacy).toEqual({ 4: [] });
  });

  const plan = allCases().find((c) => c.name === "linkerd-meshed")!.plan;
  const userland = agentUserland(true);
  for (const [mode, label, listing] of [
    ["nftables", "nftables in process", ["nft", "list", "table", "ip", "meshcni"]],
    ["nft", "nft", ["iptables-nft-save", "-t", "nat"]],
    ["legacy", "legacy", ["iptables-legacy-save", "-t", "nat"]],
  ] as const) {
    test(`${label}: applied, verified and replaced in the pod's namespace only`, async () => {
      const ns = fresh();
      const apply = createApplier({ userland, open: openAgentFirewall });
      const req = {
        path: ns.path,
        plan,
        settings: settings(mode),
        reason: "pod a/b: meshed",
        level: "info" as const,
        context: "ADD 0123456789ab",
        signal: AbortSignal.timeout(10_000),
      };
      const first = await apply(req);
      expect(first).toMatchObject({ kind: "applied", backend: label });
      const text = ns.exec([...listing]).stdout;
      expect(text).toMatch(/PROXY_INIT_REDIRECT/);
      // Again into the kept namespace: replaced, one copy.
      const again = await apply(req);
      expect(again).toMatchObject({ kind: "applied", backend: label });
      expect(ns.exec([...listing]).stdout).toBe(text);
      const opened = await openAgentFirewall({ path: ns.path, settings: settings(mode), families: [4], userland });
      if ("missing" in opened) throw new Error(opened.missing);
      expect(await opened.fw.driver.verify(opened.fw, plan, AbortSignal.timeout(5000))).toEqual([]);
      expect(Bun.spawnSync([...listing]).stdout.toString()).not.toMatch(/PROXY_INIT_REDIRECT/);
      for (const n of threads()) expect(n).toBe(home);
    });
  }

  test("auto in a fresh namespace: iptables-nft, said in the applied line", async () => {
    const ns = fresh();
    const apply = createApplier({ userland, open: openAgentFirewall });
    const r = await apply({
      path: ns.path,
      plan,
      settings: settings("auto"),
      reason: "pod a/b: meshed",
      level: "info",
      context: "ADD 0123456789ab",
      signal: AbortSignal.timeout(10_000),
    });
    expect(r.kind).toBe("applied");
    if (r.kind !== "applied") return;
    expect(r.lines.join("")).toContain("(nft, IPv4) by the agent; auto: no legacy iptables tables");
  });

  test("a plan with ip commands and no ip in the image: declined, nothing applied", async () => {
    const ns = fresh();
    const tproxy = allCases().find((c) => c.plan.ipCommands.length > 0)!.plan;
    const apply = createApplier({
      userland: { ...userland, has: (b) => b !== "ip" && userland.has(b) },
      open: openAgentFirewall,
    });
    const r = await apply({
      path: ns.path,
      plan: tproxy,
      settings: settings("nftables"),
      reason: "pod a/b: meshed",
      level: "info",
      context: "ADD 0123456789ab",
      signal: AbortSignal.timeout(10_000),
    });
    expect(r).toEqual({ kind: "declined", why: "the plan has ip commands and the agent's image has no ip" });
    expect(ns.exec(["nft", "list", "tables"]).stdout).toBe("");
  });
});
