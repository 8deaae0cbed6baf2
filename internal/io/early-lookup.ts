// The pod lookup, started as soon as the plugin has read stdin, so that it overlaps with loading
// and validating the rest of the plugin. It makes the same pre-API decisions as the plugin (so
// excluded namespaces, meshcni's own pods and non-Kubernetes containers still never reach the
// agent or the API), and the plugin checks everything again before it uses the answer.
//
// The node agent is asked first, over its Unix socket (agent-client.ts): a pod it holds costs no
// API request and loads no fetch or TLS code. Its 404 is final (CNI error 106). Anything else (no
// socket, refused, no answer within AGENT_TIMEOUT_MS, 503) falls back to the plugin's own GET
// through its kubeconfig, loaded only then; failing closed is unchanged.
import { AGENT_TIMEOUT_MS, DEFAULT_AGENT_SOCKET, type LookupSource } from "../agent/protocol.ts";
import { CniError } from "../cni/errors.ts";
import { parseK8sArgs } from "../cni/k8s-args.ts";
import { Code } from "../cni/spec.ts";
import { skipBeforeLookup } from "../plugin/pre-api.ts";
import { askAgent } from "./agent-client.ts";
import type { Connection } from "./kube-http.ts";

export interface PodFound {
  body: unknown;
  /** The namespace object when the agent sent it; otherwise the plugin GETs it if it needs it. */
  namespace?: unknown;
  source: LookupSource;
  /** Why the agent was not used, when it was not. */
  fallback?: string;
}

export interface EarlyLookup {
  kubeconfig: string | undefined;
  namespace: string;
  name: string;
  uid: string | undefined;
  /** The kubeconfig's connection: read when the fallback needs it, or later for a namespace. */
  connection(): Promise<Connection>;
  pod: Promise<PodFound>;
}

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : []);

/** The UID in a pod object, if any. */
function podUid(pod: unknown): string | undefined {
  const uid = (pod as { metadata?: { uid?: unknown } } | undefined)?.metadata?.uid;
  return typeof uid === "string" ? uid : undefined;
}

/** A pod that is not the runtime's (deleted and recreated under the same name) is never used. */
export function checkUid(pod: unknown, uid: string | undefined, namespace: string, name: string, from: string): void {
  const found = podUid(pod);
  if (uid !== undefined && found !== undefined && found !== uid) {
    throw new CniError(Code.PodNotFound, "pod not found",
      `pod ${namespace}/${name} ${from} has UID ${found}, not ${uid} (K8S_POD_UID): it was deleted and recreated; the runtime will tear this sandbox down`);
  }
}

export function startEarlyLookup(stdin: string, env: Record<string, string | undefined>): EarlyLookup | undefined {
  if (env.CNI_COMMAND !== "ADD" && env.CNI_COMMAND !== "CHECK") return undefined;
  let conf: { kubernetes?: Record<string, unknown>; timeout_seconds?: unknown; agent_socket?: unknown };
  let args: ReturnType<typeof parseK8sArgs>;
  try {
    conf = JSON.parse(stdin);
    args = parseK8sArgs(env.CNI_ARGS);
  } catch {
    return undefined; // the plugin will answer with the error
  }
  if (typeof conf !== "object" || conf === null) return undefined;
  const k = conf.kubernetes;
  const kubeconfig = typeof k?.kubeconfig === "string" ? k.kubeconfig : undefined;
  if (!args.podName || !args.podNamespace) return undefined;
  const podNamespace = typeof k?.pod_namespace === "string" ? k.pod_namespace : undefined;
  if (skipBeforeLookup({ exclude_namespaces: strings(k?.exclude_namespaces), pod_namespace: podNamespace }, args.podNamespace, args.podName)) {
    return undefined;
  }
  const seconds = typeof conf.timeout_seconds === "number" && conf.timeout_seconds > 0 ? Math.min(conf.timeout_seconds, 60) : 5;
  const signal = AbortSignal.timeout(seconds * 1000);
  const socket = typeof conf.agent_socket === "string" && conf.agent_socket.startsWith("/") ? conf.agent_socket : DEFAULT_AGENT_SOCKET;
  const { podNamespace: ns, podName: name, podUid: uid } = args;

  let conn: Promise<Connection> | undefined;
  const connection = () => {
    conn ??= import("./kube-http.ts").then((m) => m.readKubeconfig(kubeconfig, k?.allow_insecure_http === true));
    return conn;
  };
  const pod = (async (): Promise<PodFound> => {
    // At most half of the plugin's own bound, so the fallback GET always has the other half.
    const answer = await askAgent(socket, ns, name, uid, Math.min(AGENT_TIMEOUT_MS, seconds * 500));
    if (answer.kind === "pod") {
      checkUid(answer.pod, uid, ns, name, "the agent sent");
      const found: PodFound = { body: answer.pod, source: answer.source };
      if (answer.namespace !== undefined && answer.namespace !== null) found.namespace = answer.namespace;
      return found;
    }
    if (answer.kind === "gone") throw new CniError(Code.PodNotFound, answer.error.msg, answer.error.details);
    const c = await connection();
    const { getJson, podPath } = await import("./kube-http.ts");
    const body = await getJson(c, podPath(ns, name), `pod ${ns}/${name}`, signal);
    checkUid(body, uid, ns, name, "on the API server");
    return { body, source: "kubeconfig", fallback: answer.why };
  })();
  // Whoever uses this sees its failure; an unused one must not end the process.
  pod.catch(() => {});
  return { kubeconfig, namespace: ns, name, uid, connection, pod };
}
