// What SIGTERM does, decided from the API server's answers (internal/agent/stop.ts): undo only
// when meshcni is being removed (its DaemonSet gone or being deleted, its namespace being
// deleted, its account or RBAC deleted) or no longer runs on this node; keep everything when in
// doubt.
import { describe, expect, test } from "bun:test";
import type { ApiAnswer } from "../../internal/kube/client.ts";
import { decideOnStop, type StopFacts, targetsNode } from "../../internal/agent/stop.ts";

const ds = (spec: Record<string, unknown> = {}, meta: Record<string, unknown> = {}) => ({
  apiVersion: "apps/v1",
  kind: "DaemonSet",
  metadata: { name: "meshcni-node", namespace: "meshcni", ...meta },
  spec: {
    template: {
      spec: { nodeSelector: { "kubernetes.io/os": "linux" }, tolerations: [{ operator: "Exists" }], ...spec },
    },
  },
});
const node = (labels: Record<string, string> = { "kubernetes.io/os": "linux" }, taints: unknown[] = []) => ({
  apiVersion: "v1",
  kind: "Node",
  metadata: { name: "node-a", labels },
  spec: { taints },
});
const obj = (object: unknown): ApiAnswer => ({ kind: "object", object });
const status = (s: number, message?: string): ApiAnswer => ({
  kind: "status",
  status: s,
  ...(message ? { message } : {}),
});
const base: StopFacts = {
  namespace: "meshcni",
  daemonSetName: "meshcni-node",
  nodeName: "node-a",
  namespaceObject: obj({ kind: "Namespace", metadata: { name: "meshcni" } }),
  node: obj(node()),
};

describe("decideOnStop", () => {
  const cases: [string, Partial<StopFacts>, boolean, RegExp][] = [
    [
      "a rollout: the DaemonSet is there and runs here",
      { daemonSet: obj(ds()) },
      false,
      /its DaemonSet meshcni\/meshcni-node exists and runs on node node-a/,
    ],
    ["kubectl delete: the DaemonSet is gone", { daemonSet: status(404) }, true, /is gone \(404\)/],
    [
      "foreground deletion: the DaemonSet is being deleted",
      { daemonSet: obj(ds({}, { deletionTimestamp: "2026-01-01T00:00:00Z" })) },
      true,
      /is being deleted \(deletionTimestamp 2026-01-01T00:00:00Z\)/,
    ],
    [
      "the namespace is being deleted",
      {
        daemonSet: obj(ds()),
        namespaceObject: obj({ metadata: { name: "meshcni", deletionTimestamp: "2026-01-01T00:00:00Z" } }),
      },
      true,
      /namespace meshcni is being deleted/,
    ],
    [
      "the namespace is gone",
      { daemonSet: obj(ds()), namespaceObject: status(404) },
      true,
      /namespace meshcni is gone/,
    ],
    [
      "the ServiceAccount was deleted first",
      { daemonSet: status(401) },
      true,
      /no longer accepts the agent's service account token \(401\)/,
    ],
    [
      "the RBAC was deleted first",
      { daemonSet: status(403, "forbidden") },
      true,
      /may no longer read its DaemonSet .* \(403\)/,
    ],
    [
      "the API server is down",
      { daemonSet: { kind: "unreachable", reason: "connect ECONNREFUSED" } },
      false,
      /cannot tell .*did not answer \(connect ECONNREFUSED\)/,
    ],
    ["the API server fails", { daemonSet: status(503) }, false, /cannot tell .*answered 503/],
    ["the API server throttles", { daemonSet: status(429) }, false, /answered 429/],
    ["the API server answers nonsense", { daemonSet: obj({ kind: "Status" }) }, false, /not a DaemonSet/],
    [
      "no POD_NAMESPACE",
      { namespace: undefined as unknown as string, daemonSet: status(404) },
      false,
      /POD_NAMESPACE is not set/,
    ],
    ["not asked at all", { daemonSet: undefined }, false, /could not ask/],
    [
      "a nodeSelector that no longer matches",
      { daemonSet: obj(ds({ nodeSelector: { pool: "mesh" } })) },
      true,
      /no longer runs on node node-a: its nodeSelector wants pool=mesh, the node has no label pool/,
    ],
    [
      "the node cannot be read: assumed to run here",
      { daemonSet: obj(ds({ nodeSelector: { pool: "mesh" } })), node: status(403) },
      false,
      /exists and runs on node node-a/,
    ],
    [
      "the ClusterRole was deleted first",
      { daemonSet: obj(ds()), namespaceObject: status(403) },
      true,
      /may no longer read its namespace meshcni \(403\)/,
    ],
    [
      "a node that cannot be read (an older ClusterRole): kept",
      { daemonSet: obj(ds()), node: status(403) },
      false,
      /exists and runs on node node-a/,
    ],
    [
      "a namespace that cannot be read: kept",
      { daemonSet: obj(ds()), namespaceObject: { kind: "unreachable", reason: "timeout" } },
      false,
      /exists/,
    ],
  ];
  for (const [what, facts, undo, why] of cases) {
    test(`${what}: ${undo ? "undo" : "keep"}`, () => {
      const d = decideOnStop({ ...base, ...facts });
      expect(d.undo).toBe(undo);
      expect(d.why).toMatch(why);
    });
  }
});

describe("targetsNode", () => {
  test("nodeSelector", () => {
    expect(targetsNode(ds(), node())).toEqual({ runs: true });
    expect(targetsNode(ds({ nodeSelector: { "kubernetes.io/os": "windows" } }), node()).runs).toBe(false);
  });

  test("required node affinity: terms ORed, expressions ANDed, each operator", () => {
    const affinity = (terms: unknown[]) =>
      ds({
        affinity: { nodeAffinity: { requiredDuringSchedulingIgnoredDuringExecution: { nodeSelectorTerms: terms } } },
      });
    const n = node({ "kubernetes.io/os": "linux", pool: "mesh", cores: "8" });
    const expr = (key: string, operator: string, values?: string[]) => ({
      matchExpressions: [{ key, operator, ...(values ? { values } : {}) }],
    });
    expect(targetsNode(affinity([expr("pool", "In", ["mesh", "edge"])]), n).runs).toBe(true);
    expect(targetsNode(affinity([expr("pool", "In", ["edge"])]), n).runs).toBe(false);
    expect(targetsNode(affinity([expr("pool", "In", ["edge"]), expr("cores", "Gt", ["4"])]), n).runs).toBe(true);
    expect(targetsNode(affinity([expr("pool", "NotIn", ["mesh"])]), n).runs).toBe(false);
    expect(targetsNode(affinity([expr("gpu", "DoesNotExist")]), n).runs).toBe(true);
    expect(targetsNode(affinity([expr("gpu", "Exists")]), n).runs).toBe(false);
    expect(targetsNode(affinity([expr("cores", "Lt", ["4"])]), n).runs).toBe(false);
    expect(
      targetsNode(
        affinity([
          {
            matchExpressions: [
              { key: "pool", operator: "In", values: ["mesh"] },
              { key: "cores", operator: "Gt", values: ["16"] },
            ],
          },
        ]),
        n,
      ).runs,
    ).toBe(false);
    expect(
      targetsNode(affinity([{ matchFields: [{ key: "metadata.name", operator: "In", values: ["node-a"] }] }]), n).runs,
    ).toBe(true);
    expect(
      targetsNode(affinity([{ matchFields: [{ key: "metadata.name", operator: "NotIn", values: ["node-a"] }] }]), n)
        .runs,
    ).toBe(false);
    // An operator this code does not know: it cannot tell, so it runs.
    expect(targetsNode(affinity([expr("pool", "Matches", ["m.*"])]), n).runs).toBe(true);
  });

  test("taints: NoSchedule and NoExecute must be tolerated, with the DaemonSet controller's own tolerations", () => {
    const none = ds({ tolerations: [] });
    expect(targetsNode(none, node(undefined, [{ key: "dedicated", value: "db", effect: "NoSchedule" }]))).toEqual({
      runs: false,
      why: "it does not tolerate the node's taint dedicated=db:NoSchedule",
    });
    expect(
      targetsNode(none, node(undefined, [{ key: "dedicated", value: "db", effect: "PreferNoSchedule" }])).runs,
    ).toBe(true);
    // Cordoned, not ready, under pressure: the controller's tolerations cover them.
    for (const key of [
      "unschedulable",
      "not-ready",
      "unreachable",
      "disk-pressure",
      "memory-pressure",
      "pid-pressure",
    ]) {
      const effect = key === "not-ready" || key === "unreachable" ? "NoExecute" : "NoSchedule";
      expect(targetsNode(none, node(undefined, [{ key: `node.kubernetes.io/${key}`, effect }])).runs).toBe(true);
    }
    expect(
      targetsNode(none, node(undefined, [{ key: "node.kubernetes.io/network-unavailable", effect: "NoSchedule" }]))
        .runs,
    ).toBe(false);
    expect(
      targetsNode(
        ds({ tolerations: [], hostNetwork: true }),
        node(undefined, [{ key: "node.kubernetes.io/network-unavailable", effect: "NoSchedule" }]),
      ).runs,
    ).toBe(true);
    const tol = (t: Record<string, string>) => ds({ tolerations: [t] });
    const taint = [{ key: "dedicated", value: "db", effect: "NoExecute" }];
    expect(targetsNode(tol({ key: "dedicated", operator: "Equal", value: "db" }), node(undefined, taint)).runs).toBe(
      true,
    );
    expect(targetsNode(tol({ key: "dedicated", value: "db", effect: "NoSchedule" }), node(undefined, taint)).runs).toBe(
      false,
    );
    expect(targetsNode(tol({ key: "dedicated", value: "web" }), node(undefined, taint)).runs).toBe(false);
    expect(targetsNode(tol({ key: "dedicated", operator: "Exists" }), node(undefined, taint)).runs).toBe(true);
    expect(targetsNode(tol({ operator: "Exists" }), node(undefined, taint)).runs).toBe(true);
  });
});
