// The watch cache's pure store (internal/agent/cache/store.ts): lists replace, events change one object,
// bookmarks move the resourceVersion, 410 is "expired", and objects are trimmed to what the
// profiles and repair read.
import { describe, expect, test } from "bun:test";
import { keyOf, Store, trimNamespace, trimPod } from "../../internal/agent/cache/store.ts";

const pod = (name: string, rv: string, extra: Record<string, unknown> = {}) => ({
  metadata: { name, namespace: "ns", uid: `u-${name}`, resourceVersion: rv },
  spec: { containers: [{ name: "app" }] },
  ...extra,
});

describe("Store", () => {
  test("a list replaces everything; events change one object each and move the resourceVersion", () => {
    const s = new Store();
    s.replace([pod("a", "5"), pod("b", "6"), { metadata: {} }], "10");
    expect([s.size, s.resourceVersion]).toEqual([2, "10"]);
    expect(s.apply({ type: "ADDED", object: pod("c", "11") })).toBe("changed");
    expect(s.apply({ type: "MODIFIED", object: pod("a", "12", { status: { phase: "Running" } }) })).toBe("changed");
    expect((s.get("ns/a") as any).status.phase).toBe("Running");
    expect(s.apply({ type: "DELETED", object: pod("b", "13") })).toBe("changed");
    expect([s.size, s.resourceVersion, s.get("ns/b")]).toEqual([2, "13", undefined]);
    expect(s.apply({ type: "BOOKMARK", object: { metadata: { resourceVersion: "20" } } })).toBe("bookmark");
    expect([s.size, s.resourceVersion]).toEqual([2, "20"]);
    expect(s.apply({ type: "ERROR", object: { kind: "Status", code: 410 } })).toBe("expired");
    expect(s.apply({ type: "ERROR", object: { kind: "Status", code: 500 } })).toBe("ignored");
    expect(s.apply({ type: "ADDED", object: { metadata: { namespace: "ns" } } })).toBe("ignored");
    expect(s.apply({ type: "SOMETHING", object: pod("d", "30") })).toBe("ignored");
    expect(s.resourceVersion).toBe("20");
    // A relist drops what the new list does not hold.
    s.replace([pod("z", "40")], "40");
    expect(s.values().map(keyOf)).toEqual(["ns/z"]);
  });

  test("trimming keeps what the profiles read and drops the bulk", () => {
    const full = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name: "web",
        namespace: "ns",
        uid: "u",
        labels: { a: "b" },
        annotations: { x: "y" },
        managedFields: [{}],
        ownerReferences: [{}],
      },
      spec: {
        nodeName: "node-a",
        volumes: [{}],
        tolerations: [{}],
        containers: [
          {
            name: "linkerd-proxy",
            image: "i",
            env: [{ name: "E", value: "1" }],
            securityContext: { runAsUser: 2102 },
            resources: {},
            volumeMounts: [{}],
            livenessProbe: {},
          },
        ],
        initContainers: [{ name: "linkerd-init", args: ["--x"], restartPolicy: "Always" }],
      },
      status: {
        phase: "Running",
        conditions: [{ type: "Ready" }],
        containerStatuses: [{ name: "linkerd-proxy" }],
        qosClass: "Burstable",
        podIP: "10.0.0.1",
      },
    };
    expect(trimPod(full)).toEqual({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "web", namespace: "ns", uid: "u", labels: { a: "b" }, annotations: { x: "y" } },
      spec: {
        nodeName: "node-a",
        containers: [
          { name: "linkerd-proxy", image: "i", env: [{ name: "E", value: "1" }], securityContext: { runAsUser: 2102 } },
        ],
        initContainers: [{ name: "linkerd-init", args: ["--x"], restartPolicy: "Always" }],
      },
      status: {
        phase: "Running",
        conditions: [{ type: "Ready" }],
        containerStatuses: [{ name: "linkerd-proxy" }],
        podIP: "10.0.0.1",
      },
    });
    expect(
      trimNamespace({
        metadata: { name: "ns", annotations: { a: "1" }, managedFields: [{}] },
        spec: { finalizers: ["kubernetes"] },
        status: { phase: "Terminating" },
      }),
    ).toEqual({
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: "ns", annotations: { a: "1" } },
      status: { phase: "Terminating" },
    });
  });
});

test("a change stores a new object and leaves the old one as it was (internal/agent/cache/parsed.ts keys each parse on the object)", () => {
  for (const trim of [trimPod, (o: unknown) => o]) {
    const s = new Store(trim);
    s.replace([pod("a", "5"), pod("b", "6")], "10");
    const [a0, b0] = [s.get("ns/a"), s.get("ns/b")];
    const copy = structuredClone(a0);
    s.apply({ type: "MODIFIED", object: pod("a", "11", { status: { phase: "Running" } }) });
    expect(s.get("ns/a")).not.toBe(a0);
    expect(a0).toEqual(copy);
    expect(s.get("ns/b")).toBe(b0);
    s.replace([pod("a", "11"), pod("b", "6")], "12");
    expect(s.get("ns/b")).not.toBe(b0);
  }
});
