// The stand-in API server's writes that repair and the startup taint use, added to a running
// stand-in (test/support/apiserver.ts) as extra routes: a pod's eviction (POST of a policy/v1
// Eviction to pods/NAME/eviction) and DELETE, each with a UID precondition, POST of Events, and
// PATCH of a node with a JSON patch (test and replace, as kube-apiserver applies them). An
// eviction a PodDisruptionBudget would refuse is asked for by naming the pod in `refuse`: it is
// answered 429 as kube-apiserver answers it, and the pod stays.
import type { ApiServer } from "./apiserver.ts";

export interface Writes {
  /** Pods deleted (DELETE), as "namespace/name uid". */
  deleted: string[];
  /** Pods evicted (the Eviction API), as "namespace/name uid". */
  evicted: string[];
  /** Evictions refused with 429 (a PodDisruptionBudget), as "namespace/name uid". */
  refused: string[];
  /** "namespace/name" of pods whose eviction a PodDisruptionBudget refuses, while they are in it. */
  refuse: Set<string>;
  /** Every write in the order it came: "event NS/NAME", "evict NS/NAME", "refused NS/NAME", "delete NS/NAME". */
  order: string[];
  events: Record<string, any>[];
  /** JSON patches applied to nodes, and those refused (a failed test). */
  patches: { path: string; ops: unknown; applied: boolean }[];
}

const POD_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/;
const EVICTION_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)\/eviction$/;
const EVENTS_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/events$/;
const NODE_PATH = /^\/api\/v1\/nodes\/([^/]+)$/;

function failure(code: number, reason: string, message: string, details?: unknown) {
  return {
    status: code,
    body: {
      kind: "Status",
      apiVersion: "v1",
      metadata: {},
      status: "Failure",
      message,
      reason,
      ...(details ? { details } : {}),
      code,
    },
  };
}

/**
 * kube-apiserver's words when a PodDisruptionBudget does not allow an eviction
 * (pkg/registry/core/pod/storage/eviction.go).
 */
export const PDB_REFUSAL = "Cannot evict pod as it would violate the pod's disruption budget.";

let rv = 9000;

export function addWriteRoutes(api: ApiServer): Writes {
  const w: Writes = { deleted: [], evicted: [], refused: [], refuse: new Set(), order: [], events: [], patches: [] };
  api.handlers.push((req, body) => {
    const eviction = req.method === "POST" ? EVICTION_PATH.exec(req.path) : null;
    if (eviction) {
      const [, ns, name] = eviction as unknown as [string, string, string];
      let e: Record<string, any>;
      try {
        e = JSON.parse(body);
      } catch {
        return failure(400, "BadRequest", "the body is not JSON");
      }
      if (e.kind !== "Eviction" || (e.apiVersion !== "policy/v1" && e.apiVersion !== "policy/v1beta1"))
        return failure(400, "BadRequest", `not an Eviction: ${e.apiVersion}/${e.kind}`);
      if (e.metadata?.name !== name)
        return failure(
          400,
          "BadRequest",
          `name in URL does not match name in Eviction object: ${name} vs ${e.metadata?.name}`,
        );
      const path = `/api/v1/namespaces/${ns}/pods/${name}`;
      const obj = api.objects.get(path) as { metadata: { uid?: string } } | undefined;
      if (!obj) return failure(404, "NotFound", `pods "${name}" not found`);
      const want = e.deleteOptions?.preconditions?.uid;
      if (want !== undefined && want !== obj.metadata.uid) {
        return failure(
          409,
          "Conflict",
          `Precondition failed: UID in precondition: ${want}, UID in object meta: ${obj.metadata.uid}`,
        );
      }
      if (w.refuse.has(`${ns}/${name}`)) {
        w.refused.push(`${ns}/${name} ${obj.metadata.uid}`);
        w.order.push(`refused ${ns}/${name}`);
        return failure(429, "TooManyRequests", PDB_REFUSAL, {
          causes: [
            {
              reason: "DisruptionBudget",
              message:
                `The disruption budget ${name.replace(/-[^-]+$/, "")}-pdb ` +
                `needs 1 healthy pods and has 1 currently`,
            },
          ],
        });
      }
      api.deletePod(ns, name);
      w.evicted.push(`${ns}/${name} ${obj.metadata.uid}`);
      w.order.push(`evict ${ns}/${name}`);
      return { status: 201, body: { kind: "Status", apiVersion: "v1", metadata: {}, status: "Success", code: 201 } };
    }
    const pod = req.method === "DELETE" ? POD_PATH.exec(req.path) : null;
    if (pod) {
      const obj = api.objects.get(req.path) as { metadata: { uid?: string } } | undefined;
      if (!obj) return failure(404, "NotFound", `pods "${pod[2]}" not found`);
      const want = (JSON.parse(body || "{}") as { preconditions?: { uid?: string } }).preconditions?.uid;
      if (want !== undefined && want !== obj.metadata.uid) {
        return failure(
          409,
          "Conflict",
          `Precondition failed: UID in precondition: ${want}, UID in object meta: ${obj.metadata.uid}`,
        );
      }
      api.deletePod(pod[1]!, pod[2]!);
      w.deleted.push(`${pod[1]}/${pod[2]} ${obj.metadata.uid}`);
      w.order.push(`delete ${pod[1]}/${pod[2]}`);
      return { status: 200, body: obj };
    }
    const ev = req.method === "POST" ? EVENTS_PATH.exec(req.path) : null;
    if (ev) {
      const e = JSON.parse(body) as Record<string, any>;
      if (e.kind !== "Event" || e.metadata?.namespace !== ev[1] || !e.involvedObject?.name)
        return failure(400, "BadRequest", "not an Event of this namespace");
      w.events.push(e);
      w.order.push(`event ${ev[1]}/${e.involvedObject.name}`);
      return {
        status: 201,
        body: { ...e, metadata: { ...e.metadata, name: `${e.metadata.generateName ?? ""}${w.events.length}` } },
      };
    }
    if (req.method === "PATCH" && NODE_PATH.test(req.path)) {
      const node = structuredClone(api.objects.get(req.path)) as Record<string, any> | undefined;
      if (!node) return failure(404, "NotFound", "node not found");
      const ops = JSON.parse(body) as { op: string; path: string; value: unknown }[];
      for (const op of ops) {
        const keys = op.path.split("/").slice(1);
        const parent = keys.slice(0, -1).reduce((o, k) => (o as Record<string, any>)?.[k], node as unknown) as
          | Record<string, unknown>
          | undefined;
        const last = keys.at(-1)!;
        if (op.op === "test" && JSON.stringify(parent?.[last]) !== JSON.stringify(op.value)) {
          w.patches.push({ path: req.path, ops, applied: false });
          return failure(
            422,
            "Invalid",
            `the server rejected our request due to an error in our request: testing value ${op.path} failed`,
          );
        }
        if (op.op === "replace" && parent) parent[last] = op.value;
        if (op.op !== "test" && op.op !== "replace")
          return failure(422, "Invalid", `op ${op.op} not supported by the stand-in`);
      }
      node.metadata.resourceVersion = String(++rv);
      api.objects.set(req.path, node);
      w.patches.push({ path: req.path, ops, applied: true });
      return { status: 200, body: node };
    }
    return undefined;
  });
  return w;
}
