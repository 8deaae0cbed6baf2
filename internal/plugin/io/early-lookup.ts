// The pod lookup, started as soon as the plugin has read stdin, so that it overlaps with loading
// and validating the rest of the plugin. It makes the same pre-API decisions as the plugin (so
// excluded namespaces, meshcni's own pods and non-Kubernetes containers still never reach the
// agent or the API), and the plugin checks everything again before it uses the answer.
//
// The node agent is asked first, over its Unix socket (../agent/client.ts): a pod it holds costs no
// API request and loads no fetch or TLS code. Its 404 is final (CNI error 106). Anything else (no
// socket, refused, no answer within AGENT_TIMEOUT_MS, 503) falls back to the plugin's own GET
// through its kubeconfig, loaded only then; failing closed is unchanged.
import { AGENT_TIMEOUT_MS, DEFAULT_AGENT_SOCKET, type LookupSource } from "../../wire/protocol.ts";
import { CniError } from "../../cni/errors.ts";
import { parseK8sArgs } from "../../cni/k8s-args.ts";
import { Code } from "../../cni/spec.ts";
import { peekConf } from "../peek.ts";
import { checkUid } from "../pod-uid.ts";
import { skipBeforeLookup } from "../pre-api.ts";
import { askAgent } from "../agent/client.ts";
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

function strings(v: unknown): string[] {
  const out: string[] = [];
  if (Array.isArray(v)) for (const x of v) if (typeof x === "string") out.push(x);
  return out;
}

/** What the plugin needs to ask for a pod before its config is validated; undefined when no ask is due. */
export interface LookupTarget {
  socket: string;
  namespace: string;
  name: string;
  uid: string | undefined;
  kubeconfig: string | undefined;
  allowHttp: boolean;
  /** The plugin's own bound (timeout_seconds, at most 60). */
  seconds: number;
  /** At most half of the plugin's bound, so the fallback GET always has the other half. */
  agentTimeoutMs: number;
}

/**
 * The pod an ADD or CHECK is for, when it is a Kubernetes pod the pre-API decisions do not pass
 * through (excluded namespaces, meshcni's own pods and non-Kubernetes containers never reach
 * the agent or the API). Undefined otherwise, and for input the plugin will answer with an error.
 */
export function lookupTarget(stdin: string, env: Record<string, string | undefined>): LookupTarget | undefined {
  if (env.CNI_COMMAND !== "ADD" && env.CNI_COMMAND !== "CHECK") return undefined;
  const conf = peekConf(stdin) as
    | { kubernetes?: Record<string, unknown>; timeout_seconds?: unknown; agent_socket?: unknown }
    | undefined;
  if (!conf) return undefined; // the plugin will answer with the error
  let args: ReturnType<typeof parseK8sArgs>;
  try {
    args = parseK8sArgs(env.CNI_ARGS);
  } catch {
    return undefined; // the plugin will answer with the error
  }
  const k = conf.kubernetes;
  if (!args.podName || !args.podNamespace) return undefined;
  const podNamespace = typeof k?.pod_namespace === "string" ? k.pod_namespace : undefined;
  if (
    skipBeforeLookup(
      { exclude_namespaces: strings(k?.exclude_namespaces), pod_namespace: podNamespace },
      args.podNamespace,
      args.podName,
    )
  ) {
    return undefined;
  }
  const seconds =
    typeof conf.timeout_seconds === "number" && conf.timeout_seconds > 0 ? Math.min(conf.timeout_seconds, 60) : 5;
  return {
    socket:
      typeof conf.agent_socket === "string" && conf.agent_socket.startsWith("/")
        ? conf.agent_socket
        : DEFAULT_AGENT_SOCKET,
    namespace: args.podNamespace,
    name: args.podName,
    uid: args.podUid,
    kubeconfig: typeof k?.kubeconfig === "string" ? k.kubeconfig : undefined,
    allowHttp: k?.allow_insecure_http === true,
    seconds,
    agentTimeoutMs: Math.min(AGENT_TIMEOUT_MS, seconds * 500),
  };
}

/**
 * Starts the lookup for `t`. `agentDown`: the agent did not answer a moment ago (the planned
 * ADD, ../agent/add.ts), so the kubeconfig GET goes first, with that as the reason.
 */
export function startEarlyLookup(
  t: LookupTarget | undefined,
  agentDown?: string,
  deadline?: AbortSignal,
): EarlyLookup | undefined {
  if (!t) return undefined;
  // The command's bound, started with the command (the agent's part, if any, counted).
  const signal = deadline ?? AbortSignal.timeout(t.seconds * 1000);
  const { socket, namespace: ns, name, uid, kubeconfig } = t;

  let conn: Promise<Connection> | undefined;
  const connection = () => {
    conn ??= import("./kube-http.ts").then((m) => m.readKubeconfig(kubeconfig, t.allowHttp));
    return conn;
  };
  const pod = (async (): Promise<PodFound> => {
    const answer =
      agentDown !== undefined
        ? { kind: "unavailable" as const, why: agentDown }
        : await askAgent(socket, ns, name, uid, t.agentTimeoutMs);
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
