// The startup taint's patch (internal/agent/repair/taint.ts).
import { describe, expect, test } from "bun:test";
import { untaintPatch } from "../../internal/agent/repair/taint.ts";

const KEY = "meshcni.io/agent-not-ready";
const node = (taints: unknown[] | undefined, rv: string | null = "812") => ({
  apiVersion: "v1",
  kind: "Node",
  metadata: { name: "node-a", ...(rv ? { resourceVersion: rv } : {}) },
  spec: taints ? { taints } : {},
});
const other = { key: "node.kubernetes.io/not-ready", effect: "NoSchedule" };

describe("untaintPatch", () => {
  test("removes every taint with the key, keeps the others, and tests the resourceVersion first", () => {
    expect(
      untaintPatch(node([{ key: KEY, effect: "NoSchedule" }, other, { key: KEY, effect: "NoExecute" }]), KEY),
    ).toEqual([
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
