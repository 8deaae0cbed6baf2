// Repair's shell (internal/agent/repair/loop.ts startRepair) on a fake node view, on real timers
// with short periods: how often it plans while it waits out the grace period. Each round judges
// every pod of the node and reads the plugin's records; while only the grace period is pending
// nothing but the clock and the chain can change the plan (a change of the node's pods kicks a
// round through the watch), so the timer looks at the chain alone until the grace period ends.
import { afterEach, describe, expect, test } from "bun:test";
import type { RepairConfig } from "../../internal/agent/repair/plan.ts";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import { type RepairLoop, startRepair } from "../../internal/agent/repair/loop.ts";
import { linkerdProfile } from "../../internal/mesh/linkerd/profile.ts";

const conf = parsePluginConf(
  JSON.stringify({
    cniVersion: "1.0.0",
    name: "k8s-pod-network",
    type: "meshcni",
    mesh: "linkerd",
    kubernetes: {
      kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig",
      exclude_namespaces: ["kube-system"],
      pod_namespace: "meshcni",
    },
  }),
);

const INTERVAL_MS = 20;

interface Fake {
  loop: RepairLoop;
  /** Rounds planned so far (each asks the view for the node's pods). */
  rounds(): number;
  chainChecks(): number;
  lines: string[];
  setChained(on: boolean): void;
  /** The next look at the chain throws (the host folder cannot be read for a moment). */
  throwOnce(): void;
  /** A change delivered by the watch. */
  change(): void;
  /** The node's pods from now on. */
  setPods(pods: unknown[]): void;
  /** The writes repair made ("METHOD path"). */
  sent: string[];
}

const loops: RepairLoop[] = [];
afterEach(() => {
  for (const l of loops.splice(0)) l.stop();
});

function start(graceMs: number): Fake {
  let rounds = 0;
  let checks = 0;
  let chained = true;
  let throwNext = 0;
  let pods: unknown[] = [];
  const sent: string[] = [];
  const listeners = new Set<() => void>();
  const lines: string[] = [];
  const say = (m: string) => void lines.push(m);
  const log = { debug: say, info: say, warn: say, error: say };
  const cfg: RepairConfig = {
    mode: "evict",
    node: "node-a",
    conf,
    profile: linkerdProfile,
    daemonSetName: "meshcni-node",
    graceMs,
    ratePerMinute: 10,
    retryMs: 60_000,
  };
  const loop = startRepair({
    cfg,
    log,
    records: () => [],
    intervalMs: INTERVAL_MS,
    view: {
      synced: () => true,
      pods: () => {
        rounds++;
        return pods;
      },
      namespace: () => undefined,
      onChange(fn) {
        listeners.add(fn);
        return () => listeners.delete(fn);
      },
    },
    api: { server: "https://127.0.0.1:9", get: async () => ({ kind: "unreachable", reason: "not in this test" }) },
    writer: {
      send: async (method, path) => {
        sent.push(`${method} ${path}`);
        return { ok: true, status: 201, object: {} };
      },
    },
    chained: () => {
      checks++;
      if (throwNext > 0) {
        throwNext--;
        throw new Error("list /host/etc/cni/net.d: EIO: i/o error");
      }
      return chained;
    },
    ready: () => true,
  });
  loops.push(loop);
  return {
    loop,
    lines,
    rounds: () => rounds,
    chainChecks: () => checks,
    setChained: (on) => void (chained = on),
    throwOnce: () => void (throwNext = 1),
    change: () => {
      for (const fn of listeners) fn();
    },
    setPods: (p) => void (pods = p),
    sent,
  };
}

/** A meshed pod whose linkerd-network-validator's latest run failed (exit 95). */
const failing = {
  metadata: { name: "web-1", namespace: "emojivoto", uid: "uid-1", annotations: { "linkerd.io/inject": "enabled" } },
  spec: {
    nodeName: "node-a",
    initContainers: [
      { name: "linkerd-network-validator", image: "p" },
      { name: "linkerd-proxy", image: "p", restartPolicy: "Always" },
    ],
    containers: [{ name: "web", image: "web" }],
  },
  status: {
    phase: "Pending",
    conditions: [{ type: "PodReadyToStartContainers", status: "True" }],
    initContainerStatuses: [
      {
        name: "linkerd-network-validator",
        state: { waiting: { reason: "CrashLoopBackOff" } },
        lastState: { terminated: { exitCode: 95 } },
      },
    ],
  },
};

describe("the repair loop while it waits out the grace period", () => {
  test("plans once at the start and once when the grace period ends, not every interval; then it is active", async () => {
    const f = start(600);
    await Bun.sleep(300);
    // Not a round every interval (20 ms), which would make about 15 by now.
    expect(f.rounds()).toBe(1);
    expect(f.loop.status().active).toBe(false);
    await Bun.sleep(500);
    expect(f.loop.status().active).toBe(true);
    expect(f.rounds()).toBeLessThanOrEqual(3);
    expect(
      f.lines.filter((l) => l.startsWith("repair waits: the chain has been in place for less than the grace period"))
        .length,
    ).toBe(1);
    expect(f.lines.filter((l) => l.startsWith("repair is active")).length).toBe(1);
  });

  test("a change from the watch still plans at once", async () => {
    const f = start(10_000);
    await Bun.sleep(100);
    const before = f.rounds();
    f.change();
    await Bun.sleep(10);
    expect(f.rounds()).toBe(before + 1);
  });

  test("the wait is said once, not again for each round a change kicks as the seconds run down", async () => {
    const f = start(3000);
    await Bun.sleep(1100);
    f.change();
    await Bun.sleep(10);
    expect(f.rounds()).toBe(2);
    expect(f.lines.filter((l) => l.startsWith("repair waits:"))).toEqual([
      "repair waits: the chain has been in place for less than the grace period (3 s left)",
    ]);
  });

  test("the chain is still looked at every interval: a break is noticed as soon as before", async () => {
    const f = start(10_000);
    await Bun.sleep(200);
    expect(f.chainChecks()).toBeGreaterThanOrEqual(5);
    const before = f.rounds();
    f.setChained(false);
    await Bun.sleep(INTERVAL_MS * 3);
    expect(f.rounds()).toBeGreaterThan(before);
    expect(f.lines).toContain("repair waits: meshcni is not chained");
  });

  test("a look at the chain that throws during the grace period kicks a round, and the loop goes on", async () => {
    const f = start(300);
    await Bun.sleep(60);
    const before = f.rounds();
    f.throwOnce();
    await Bun.sleep(INTERVAL_MS * 3);
    expect(f.rounds()).toBeGreaterThan(before);
    await Bun.sleep(400);
    expect(f.loop.status().active).toBe(true);
    expect(f.lines.filter((l) => l.startsWith("repair is active")).length).toBe(1);
  });
});

describe("the repair loop once settled", () => {
  test("a change from the watch that brings evidence: acted on once confirmed, at the busy pace, not the settled one", async () => {
    const f = start(100); // confirmation: 100 ms
    await Bun.sleep(250);
    expect(f.loop.status().active).toBe(true);
    const before = f.rounds();
    await Bun.sleep(200);
    // Settled: no round without a change.
    expect(f.rounds()).toBe(before);
    f.setPods([failing]);
    f.change();
    await Bun.sleep(10);
    expect(f.loop.status().bypassing.map((b) => b.action)).toEqual(["waiting"]);
    // The confirmed pod does not wait for the timer's settled pace (30 s).
    await Bun.sleep(300);
    expect(f.sent).toEqual([
      "POST /api/v1/namespaces/emojivoto/events",
      "POST /api/v1/namespaces/emojivoto/pods/web-1/eviction",
    ]);
    expect(f.loop.status().bypassing.map((b) => b.action)).toEqual(["evicted"]);
  });
});
