// The stand-in API server's writes that repair and the startup taint use, added to a running
// stand-in (test/support/apiserver.ts) as extra routes: DELETE of a pod with a UID precondition, POST of Events,
// and PATCH of a node with a JSON patch (test and replace, as kube-apiserver applies them).
import type { ApiServer } from "./apiserver.ts";

export interface Writes {
  /** Pods deleted, as "namespace/name uid". */
  deleted: string[];
  events: Record<string, any>[];
  /** JSON patches applied to nodes, and those refused (a failed test). */
  patches: { path: string; ops: unknown; applied: boolean }[];
}

const POD_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/pods\/([^/]+)$/;
const EVENTS_PATH = /^\/api\/v1\/namespaces\/([^/]+)\/events$/;
const NODE_PATH = /^\/api\/v1\/nodes\/([^/]+)$/;

function failure(code: number, reason: string, message: string) {
  return { status: code, body: { kind: "Status", apiVersion: "v1", metadata: {}, status: "Failure", message, reason, code } };
}

let rv = 9000;

export function addWriteRoutes(api: ApiServer): Writes {
  const w: Writes = { deleted: [], events: [], patches: [] };
  api.handlers.push((req, body) => {
    const pod = req.method === "DELETE" ? POD_PATH.exec(req.path) : null;
    if (pod) {
      const obj = api.objects.get(req.path) as { metadata: { uid?: string } } | undefined;
      if (!obj) return failure(404, "NotFound", `pods "${pod[2]}" not found`);
      const want = (JSON.parse(body || "{}") as { preconditions?: { uid?: string } }).preconditions?.uid;
      if (want !== undefined && want !== obj.metadata.uid) {
        return failure(409, "Conflict", `Precondition failed: UID in precondition: ${want}, UID in object meta: ${obj.metadata.uid}`);
      }
      api.deletePod(pod[1]!, pod[2]!);
      w.deleted.push(`${pod[1]}/${pod[2]} ${obj.metadata.uid}`);
      return { status: 200, body: obj };
    }
    const ev = req.method === "POST" ? EVENTS_PATH.exec(req.path) : null;
    if (ev) {
      const e = JSON.parse(body) as Record<string, any>;
      if (e.kind !== "Event" || e.metadata?.namespace !== ev[1] || !e.involvedObject?.name) return failure(400, "BadRequest", "not an Event of this namespace");
      w.events.push(e);
      return { status: 201, body: { ...e, metadata: { ...e.metadata, name: `${e.metadata.generateName ?? ""}${w.events.length}` } } };
    }
    if (req.method === "PATCH" && NODE_PATH.test(req.path)) {
      const node = structuredClone(api.objects.get(req.path)) as Record<string, any> | undefined;
      if (!node) return failure(404, "NotFound", "node not found");
      const ops = JSON.parse(body) as { op: string; path: string; value: unknown }[];
      for (const op of ops) {
        const keys = op.path.split("/").slice(1);
        const parent = keys.slice(0, -1).reduce((o, k) => (o as Record<string, any>)?.[k], node as unknown) as Record<string, unknown> | undefined;
        const last = keys.at(-1)!;
        if (op.op === "test" && JSON.stringify(parent?.[last]) !== JSON.stringify(op.value)) {
          w.patches.push({ path: req.path, ops, applied: false });
          return failure(422, "Invalid", `the server rejected our request due to an error in our request: testing value ${op.path} failed`);
        }
        if (op.op === "replace" && parent) parent[last] = op.value;
        if (op.op !== "test" && op.op !== "replace") return failure(422, "Invalid", `op ${op.op} not supported by the stand-in`);
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
