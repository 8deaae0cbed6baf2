// The agent's own GETs to the API server (the look before stopping),
// through the agent's one Kubernetes client (internal/kube/client.ts: the in-pod service
// account, token read again when kubelet rotates it). Answers come back as data
// (internal/agent/stop.ts judges them), never as exceptions.
//
// Without a node name the agent has no node to answer for: noNodeLookup answers every pod
// lookup 503, and the plugin reads the pod through its own kubeconfig.
import type { LookupResult, PodLookup } from "./types.ts";
import { Code } from "../cni/spec.ts";
import type { StopFacts } from "./stop.ts";
import type { ApiAnswer } from "../kube/client.ts";
import { type KubeClient, serviceAccountClient } from "../kube/client.ts";
import { namespacePath } from "../plugin/io/kube-http.ts";

/** What the agent's GETs need of the client. */
export type AgentApi = Pick<KubeClient, "server" | "get">;

/** The agent's client with its in-pod service account. */
export const serviceAccountApi = serviceAccountClient;

/**
 * The lookup of an agent that does not know its node: it cannot tell this node's pods from any
 * other's, so it fetches none (a GET by name would hand out any pod of the cluster to whoever
 * reaches the socket) and answers 503; the plugin falls back to its kubeconfig.
 */
export function noNodeLookup(): PodLookup {
  return {
    async lookup(namespace, name): Promise<LookupResult> {
      return {
        ok: false,
        status: 503,
        error: {
          code: Code.TryAgainLater,
          msg: "the agent cannot answer",
          details:
            `the agent has no node name (--node-name, env NODE_NAME) and answers no pod lookup ` +
            `(pod ${namespace}/${name})`,
        },
      };
    },
  };
}

// ---- before stopping ----------------------------------------------------------------------------

/** The whole look at the API server on SIGTERM stays well inside the pod's 30 s grace period. */
export const STOP_LOOK_MS = 10_000;
const STOP_GET_MS = 3000;
const STOP_RETRY_MS = 1000;

export const daemonSetPath = (namespace: string, name: string) =>
  `/apis/apps/v1/namespaces/${namespace}/daemonsets/${name}`;
export const nodePath = (name: string) => `/api/v1/nodes/${name}`;

/**
 * Asks for the DaemonSet (again while the API server does not answer or answers 5xx/429, until
 * STOP_LOOK_MS), then for its namespace and the node, and returns what was learnt.
 */
export async function lookBeforeStopping(
  api: AgentApi | undefined,
  who: { namespace?: string; daemonSetName: string; nodeName?: string },
): Promise<StopFacts> {
  const facts: StopFacts = {
    daemonSetName: who.daemonSetName,
    ...(who.namespace ? { namespace: who.namespace } : {}),
    ...(who.nodeName ? { nodeName: who.nodeName } : {}),
  };
  if (!api || !who.namespace) return facts;
  const deadline = performance.now() + STOP_LOOK_MS;
  const left = () => deadline - performance.now();
  const passing = (a: ApiAnswer) =>
    a.kind === "unreachable" || (a.kind === "status" && (a.status >= 500 || a.status === 429));
  let ds = await api.get(daemonSetPath(who.namespace, who.daemonSetName), Math.min(STOP_GET_MS, left()));
  while (passing(ds) && left() > STOP_RETRY_MS + 500) {
    await Bun.sleep(STOP_RETRY_MS);
    ds = await api.get(daemonSetPath(who.namespace, who.daemonSetName), Math.max(500, Math.min(STOP_GET_MS, left())));
  }
  facts.daemonSet = ds;
  if (ds.kind !== "object") return facts;
  const bound = Math.max(500, Math.min(STOP_GET_MS, left()));
  const [ns, node] = await Promise.all([
    api.get(namespacePath(who.namespace), bound),
    who.nodeName ? api.get(nodePath(who.nodeName), bound) : Promise.resolve(undefined),
  ]);
  facts.namespaceObject = ns;
  if (node) facts.node = node;
  return facts;
}
