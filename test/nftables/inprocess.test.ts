// The in-process path of the nftables backend (internal/firewall/io/nft-inprocess.ts): the JavaScript
// thread enters the pod's namespace, libnftables sends the batch, the thread comes back. Proven
// here by the kernel's own view of every thread (/proc/self/task/*/ns/net) inside and after the
// window, and by the namespace's ruleset after a failed batch. Needs root.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readlinkSync } from "node:fs";
import { nftInProcess, nftLibraryAvailable } from "../../internal/firewall/io/nft-inprocess.ts";
import { renderScript } from "../../internal/firewall/nftables/render.ts";
import { isRoot, Netns, uniq } from "../support/netns.ts";
import { allCases } from "./cases.ts";

const threads = () =>
  new Map(readdirSync("/proc/self/task").map((t) => [Number(t), readlinkSync(`/proc/self/task/${t}/ns/net`)]));

describe.skipIf(!isRoot())("nft in process", () => {
  let ns: Netns;
  let hostNs: string;
  beforeAll(() => {
    hostNs = readlinkSync("/proc/thread-self/ns/net");
    ns = Netns.create(`mcip-${uniq()}`);
  });
  afterAll(() => ns?.delete());

  test("libnftables is available on this host", async () => {
    expect(await nftLibraryAvailable()).toBe(true);
  });

  test("only the calling thread enters the pod's namespace, and it comes back", async () => {
    // A request in flight, so the runtime's HTTP thread is busy while we are inside.
    const server = Bun.serve({
      port: 0,
      fetch: async () => {
        await Bun.sleep(200);
        return new Response("ok");
      },
    });
    const pending = fetch(`http://127.0.0.1:${server.port}/`).then((r) => r.text());
    await Bun.sleep(20);
    const before = threads();
    expect(before.size).toBeGreaterThan(1);
    const host = readlinkSync("/proc/thread-self/ns/net");
    const pod = (() => {
      const r = ns.exec(["readlink", "/proc/self/ns/net"]);
      return r.stdout.trim();
    })();
    expect(pod).not.toBe(host);
    let inside: Map<number, string> | undefined;
    let tid = 0;
    const plan = allCases().find((c) => c.plan.families.length === 2)!.plan;
    const r = await nftInProcess(ns.path, renderScript(plan), {
      observe: (t) => {
        tid = t;
        inside = threads();
      },
    });
    expect(r).toEqual({ code: 0, stdout: "", stderr: "" });
    // Inside: exactly one thread (the caller) was in the pod's namespace; every other one stayed.
    expect(inside!.get(tid)).toBe(pod);
    for (const [t, n] of inside!) if (t !== tid) expect({ t, n }).toEqual({ t, n: before.get(t) ?? host });
    // After: this thread is back, nobody else moved.
    expect(readlinkSync("/proc/thread-self/ns/net")).toBe(host);
    for (const [t, n] of threads()) expect({ t, n }).toEqual({ t, n: host });
    expect(await pending).toBe("ok");
    server.stop(true);
    // The rules are in the pod's namespace, not the host's.
    expect(ns.exec(["nft", "list", "tables"]).stdout).toContain("table ip6 meshcni");
    expect(Bun.spawnSync(["nft", "list", "tables"]).stdout.toString()).not.toContain("meshcni");
  });

  test("a failed batch leaves nothing applied and reports nft's error; the thread comes back", async () => {
    const before = ns.exec(["nft", "list", "ruleset"]).stdout;
    const plan = allCases().find((c) => c.name === "linkerd-meshed")!.plan;
    const broken = `${renderScript(plan)}add rule ip meshcni nat_OUTPUT tcp dport 70000 return\n`;
    const r = await nftInProcess(ns.path, broken);
    expect(r!.code).toBe(1);
    expect(r!.stderr).toMatch(/out of range/);
    expect(ns.exec(["nft", "list", "ruleset"]).stdout).toBe(before);
    expect(readlinkSync("/proc/thread-self/ns/net")).toBe(hostNs);
  });

  test("a namespace that is not there: an error, and the thread never moves", async () => {
    let moved = false;
    const r = await nftInProcess(`/var/run/netns/none-${uniq()}`, "list tables", { observe: () => (moved = true) });
    expect(r!.code).toBe(1);
    expect(r!.stderr).toMatch(/cannot open/);
    expect(moved).toBe(false);
  });

  test("listing in process prints what `nft -y list` prints (CHECK reads either)", async () => {
    const viaProcess = ns.exec(["nft", "-y", "list", "table", "ip6", "meshcni"]).stdout;
    const inProc = await nftInProcess(ns.path, "list table ip6 meshcni", { numericPriority: true });
    expect(inProc!.stdout).toBe(viaProcess);
  });
});
