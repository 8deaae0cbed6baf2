// The startup taint's patch (internal/agent/taint.ts) and the records-since note that keeps an
// upgrade from a plugin without records from looking like a node full of bypassing pods.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { untaintPatch } from "../../internal/agent/taint.ts";
import { writeFileSync } from "node:fs";
import { meshcniEntryIn, recordsSince } from "../../internal/io/agent-repair.ts";

const KEY = "meshcni.io/agent-not-ready";
const node = (taints: unknown[] | undefined, rv: string | null = "812") => ({
  apiVersion: "v1", kind: "Node", metadata: { name: "node-a", ...(rv ? { resourceVersion: rv } : {}) }, spec: taints ? { taints } : {},
});
const other = { key: "node.kubernetes.io/not-ready", effect: "NoSchedule" };

describe("untaintPatch", () => {
  test("removes every taint with the key, keeps the others, and tests the resourceVersion first", () => {
    expect(untaintPatch(node([{ key: KEY, effect: "NoSchedule" }, other, { key: KEY, effect: "NoExecute" }]), KEY)).toEqual([
      { op: "test", path: "/metadata/resourceVersion", value: "812" },
      { op: "replace", path: "/spec/taints", value: [other] },
    ]);
  });
  const none: [string, unknown][] = [
    ["no taints", node(undefined)],
    ["only other taints", node([other])],
    ["a taint with the key as its value, not its key", node([{ key: "x", value: KEY, effect: "NoSchedule" }])],
    ["no resourceVersion to test", node([{ key: KEY, effect: "NoSchedule" }], null)],
    ["not a node", "node-a"],
  ];
  for (const [what, n] of none) test(`nothing to patch: ${what}`, () => expect(untaintPatch(n, KEY)).toBeUndefined());
});

describe("recordsSince", () => {
  const log = { debug() {}, info() {}, warn() {}, error() {} };
  test("a node meshcni was not chained on: records complete from the start (0), kept for later agents", () => {
    const dir = mkdtempSync(join(tmpdir(), "meshcni-rs-"));
    try {
      expect(recordsSince(dir, false, 5000, log)).toBe(0);
      expect(readFileSync(join(dir, "records-since"), "utf8")).toBe("0\n");
      // A later agent finds the chain in place (it always does after the first): the note holds.
      expect(recordsSince(dir, true, 9000, log)).toBe(0);
    } finally {
      rmSync(dir, { recursive: true });
    }
  });
  test("chained before, without the note (an upgrade): records complete only from this agent's start, kept", () => {
    const dir = mkdtempSync(join(tmpdir(), "meshcni-rs-"));
    try {
      expect(recordsSince(join(dir, "state"), true, 5000, log)).toBe(5000);
      expect(recordsSince(join(dir, "state"), true, 9000, log)).toBe(5000);
    } finally {
      rmSync(dir, { recursive: true });
    }
  });
});

describe("meshcniEntryIn: was the node meshed before this agent?", () => {
  test("an earlier release's entry (other settings, no agent_socket) counts; other plugins and broken files do not", () => {
    const dir = mkdtempSync(join(tmpdir(), "meshcni-net-"));
    try {
      expect(meshcniEntryIn(join(dir, "absent"))).toBe(false);
      writeFileSync(join(dir, "10-calico.conflist"), JSON.stringify({ cniVersion: "0.3.1", name: "k8s-pod-network", plugins: [{ type: "calico" }, { type: "portmap" }] }));
      writeFileSync(join(dir, "05-broken.conflist"), "{ not json");
      expect(meshcniEntryIn(dir)).toBe(false);
      writeFileSync(join(dir, "10-calico.conflist"), JSON.stringify({ cniVersion: "0.3.1", name: "k8s-pod-network", plugins: [{ type: "calico" }, { type: "meshcni", log_level: "debug", kubernetes: { kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig" } }] }));
      expect(meshcniEntryIn(dir)).toBe(true);
    } finally {
      rmSync(dir, { recursive: true });
    }
  });
});
