// listedNodeView: a NodeView made of one LIST of the node's pods every few seconds, the simple
// stand-in the agent uses while no watch cache implements NodeView (internal/agent/types.ts).
// In sync once a list has succeeded, and again out of sync when the latest list failed.
import type { NodeView } from "../agent/types.ts";
import type { Log } from "../installer/deps.ts";
import type { AgentApi } from "./agent-api.ts";

/** resourceVersion=0: served from the API server's watch cache, not from etcd. */
export const nodePodsPath = (node: string) => `/api/v1/pods?fieldSelector=${encodeURIComponent(`spec.nodeName=${node}`)}&resourceVersion=0`;

export interface ListedNodeView extends NodeView {
  stop(): void;
}

export function listedNodeView(api: AgentApi, node: string, intervalMs: number, log: Log): ListedNodeView {
  let pods: unknown[] = [];
  let synced = false;
  let stopped = false;
  let lastProblem = "";
  const listeners = new Set<() => void>();
  const list = async () => {
    const a = await api.get(nodePodsPath(node), Math.max(1000, intervalMs));
    if (stopped) return;
    const items = a.kind === "object" ? (a.object as { items?: unknown })?.items : undefined;
    if (Array.isArray(items)) {
      pods = items;
      synced = true;
      lastProblem = "";
    } else {
      synced = false;
      const problem = a.kind === "status" ? `answered ${a.status}${a.message ? `: ${a.message}` : ""}` : a.kind === "unreachable" ? a.reason : "answered without items";
      if (problem !== lastProblem) log.warn(`cannot list the pods of node ${node} (repair waits): ${problem}`);
      lastProblem = problem;
    }
    for (const fn of listeners) fn();
  };
  let timer: ReturnType<typeof setTimeout> | undefined;
  const loop = async () => {
    await list().catch(() => {});
    if (!stopped) timer = setTimeout(loop, intervalMs);
  };
  void loop();
  return {
    synced: () => synced,
    pods: () => pods,
    namespace: () => undefined,
    onChange(fn) {
      listeners.add(fn);
      return () => listeners.delete(fn);
    },
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
