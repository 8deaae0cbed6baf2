// The agent's own GETs to the API server (the pod lookup's fallback, the look before stopping),
// through the agent's one Kubernetes client (internal/io/kube-client.ts: the in-pod service
// account, token read again when kubelet rotates it). Answers come back as data
// (internal/agent/stop.ts judges them), never as exceptions.
//
// apiPodLookup is the agent's lookup when it has no node name to watch (cmd/installer.ts): one GET
// of the pod and of its namespace per question.
import type { LookupResult, PodLookup } from "../agent/types.ts";
import { Code } from "../cni/spec.ts";
import { AGENT_GET_TIMEOUT_MS } from "../agent/protocol.ts";
import type { ApiAnswer, StopFacts } from "../agent/stop.ts";
import { type KubeClient, serviceAccountClient } from "./kube-client.ts";
import { namespacePath, podPath } from "./kube-http.ts";

/** What the agent's GETs need of the client. */
export type AgentApi = Pick<KubeClient, "server" | "get">;

/** The agent's client with its in-pod service account. */
export const serviceAccountApi = serviceAccountClient;

const uidOf = (o: unknown): string | undefined => {
  const uid = (o as { metadata?: { uid?: unknown } })?.metadata?.uid;
  return typeof uid === "string" ? uid : undefined;
};

function failed(status: 404 | 503, msg: string, details: string): LookupResult {
  return { ok: false, status, error: { code: status === 404 ? Code.PodNotFound : Code.TryAgainLater, msg, details } };
}

/**
 * Answers every question with the agent's own GET of the pod and its namespace (source "api"):
 * what the agent does before it has a watch cache. 404 from the API server is a 404 answer
 * (code 106); anything else that fails is 503, and the plugin falls back to its kubeconfig.
 */
export function apiPodLookup(api: AgentApi): PodLookup {
  return {
    async lookup(namespace, name, uid, signal): Promise<LookupResult> {
      const what = `pod ${namespace}/${name}`;
      const [pod, ns] = await Promise.all([
        api.get(podPath(namespace, name), AGENT_GET_TIMEOUT_MS, signal),
        api.get(namespacePath(namespace), AGENT_GET_TIMEOUT_MS, signal),
      ]);
      for (const [a, which] of [[pod, what], [ns, `namespace ${namespace}`]] as const) {
        if (a.kind === "status" && a.status === 404) return failed(404, "not found in the API (404)", `${which} does not exist on ${api.server} (the agent's GET)`);
        if (a.kind !== "object") {
          const why = a.kind === "status" ? `answered ${a.status}${a.message ? `: ${a.message}` : ""}` : `did not answer: ${a.reason}`;
          return failed(503, "the agent cannot read the pod", `the API server ${api.server} ${why} for ${which}`);
        }
      }
      const podObj = (pod as { object: unknown }).object;
      const found = uidOf(podObj);
      if (uid !== undefined && found !== uid) {
        return failed(404, "not found in the API (404)", `${what} has UID ${found ?? "(none)"} on ${api.server}, not ${uid}: it was deleted and created again`);
      }
      return { ok: true, pod: podObj, namespace: (ns as { object: unknown }).object, source: "api" };
    },
  };
}

// ---- before stopping ----------------------------------------------------------------------------

/** The whole look at the API server on SIGTERM stays well inside the pod's 30 s grace period. */
export const STOP_LOOK_MS = 10_000;
const STOP_GET_MS = 3000;
const STOP_RETRY_MS = 1000;

export const daemonSetPath = (namespace: string, name: string) => `/apis/apps/v1/namespaces/${namespace}/daemonsets/${name}`;
export const nodePath = (name: string) => `/api/v1/nodes/${name}`;

/**
 * Asks for the DaemonSet (again while the API server does not answer or answers 5xx/429, until
 * STOP_LOOK_MS), then for its namespace and the node, and returns what was learnt.
 */
export async function lookBeforeStopping(api: AgentApi | undefined, who: { namespace?: string; daemonSetName: string; nodeName?: string }): Promise<StopFacts> {
  const facts: StopFacts = { daemonSetName: who.daemonSetName, ...(who.namespace ? { namespace: who.namespace } : {}), ...(who.nodeName ? { nodeName: who.nodeName } : {}) };
  if (!api || !who.namespace) return facts;
  const deadline = performance.now() + STOP_LOOK_MS;
  const left = () => deadline - performance.now();
  const passing = (a: ApiAnswer) => a.kind === "unreachable" || (a.kind === "status" && (a.status >= 500 || a.status === 429));
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
