// The startup taint (--startup-taint KEY): the JSON patch that takes it off the agent's node.
// Pure. The patch first tests the node's resourceVersion, so a node changed since the agent read
// it (another taint added, a label) fails the patch instead of losing that change; the agent then
// reads the node again.

export interface JsonPatchOp {
  op: "test" | "replace";
  path: string;
  value: unknown;
}

type Obj = Record<string, unknown>;
const obj = (x: unknown): Obj => (typeof x === "object" && x !== null && !Array.isArray(x) ? (x as Obj) : {});

/** The node's taints with KEY (any effect), or none. */
export function taintsWithKey(node: unknown, key: string): unknown[] {
  const taints = obj(obj(node).spec).taints;
  return Array.isArray(taints) ? taints.filter((t) => obj(t).key === key) : [];
}

/** The patch that removes every taint with KEY, or undefined when the node has none (or no resourceVersion to test). */
export function untaintPatch(node: unknown, key: string): JsonPatchOp[] | undefined {
  const taints = obj(obj(node).spec).taints;
  const rv = obj(obj(node).metadata).resourceVersion;
  if (!Array.isArray(taints) || typeof rv !== "string" || taintsWithKey(node, key).length === 0) return undefined;
  return [
    { op: "test", path: "/metadata/resourceVersion", value: rv },
    { op: "replace", path: "/spec/taints", value: taints.filter((t) => obj(t).key !== key) },
  ];
}
