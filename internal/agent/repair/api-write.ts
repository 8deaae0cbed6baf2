// The agent's writes to the API server, through its Kubernetes client (kube/client.ts): a pod's
// eviction (POST of an Eviction) or DELETE, each with the pod's UID as a precondition, POST of an
// Event, PATCH of its node. Answers come back as data, never as exceptions.
import type { KubeClient } from "../../kube/client.ts";

export type WriteAnswer =
  | { ok: true; status: number; object: unknown }
  /** `message`: the Status body's message, when the server sent one. */
  | { ok: false; status?: number; reason: string; message?: string };

export interface AgentWriter {
  send(
    method: "DELETE" | "POST" | "PATCH",
    path: string,
    body: unknown,
    contentType: string,
    timeoutMs: number,
  ): Promise<WriteAnswer>;
}

export function clientWriter(api: Pick<KubeClient, "request">): AgentWriter {
  return {
    async send(method, path, body, contentType, timeoutMs) {
      const a = await api.request(method, path, timeoutMs, { body, contentType });
      if (a.kind === "unreachable") return { ok: false, reason: `${method} ${path}: ${a.reason}` };
      let parsed: unknown;
      try {
        parsed = JSON.parse(a.body);
      } catch {
        parsed = undefined;
      }
      if (a.status >= 200 && a.status < 300) return { ok: true, status: a.status, object: parsed };
      const m = (parsed as { message?: unknown })?.message;
      const message = typeof m === "string" ? m.slice(0, 300) : undefined;
      const reason = `${method} ${path} answered ${a.status}${message ? `: ${message}` : ""}`;
      return { ok: false, status: a.status, reason, ...(message ? { message } : {}) };
    },
  };
}

/** The bound on one write to the API server. */
export const WRITE_TIMEOUT_MS = 5000;

/** A Warning Event on a pod, posted as this node's agent. */
export function postPodEvent(
  writer: AgentWriter,
  pod: { namespace: string; name: string; uid: string },
  e: { reason: string; message: string; node: string },
): Promise<WriteAnswer> {
  const now = new Date().toISOString();
  return writer.send(
    "POST",
    `/api/v1/namespaces/${pod.namespace}/events`,
    {
      apiVersion: "v1",
      kind: "Event",
      metadata: { generateName: `${pod.name}.meshcni-`, namespace: pod.namespace },
      involvedObject: { apiVersion: "v1", kind: "Pod", namespace: pod.namespace, name: pod.name, uid: pod.uid },
      reason: e.reason,
      message: e.message,
      type: "Warning",
      source: { component: "meshcni-node", host: e.node },
      reportingComponent: "meshcni.io/meshcni-node",
      reportingInstance: e.node,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    },
    "application/json",
    WRITE_TIMEOUT_MS,
  );
}
