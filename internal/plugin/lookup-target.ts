// Which pod an ADD or CHECK asks about, read from stdin and CNI_ARGS before anything else loads:
// the agent's socket, the pod, the kubeconfig and the plugin's time bound. The pre-API decisions
// come first (excluded namespaces, meshcni's own pods and non-Kubernetes containers never reach
// the agent or the API). Pure; on the plugin's hot path, which loads the lookup itself
// (io/early-lookup.ts) only when the agent does not answer.
import { parseK8sArgs } from "../cni/k8s-args.ts";
import { AGENT_APPLY_TIMEOUT_MS, AGENT_TIMEOUT_MS, DEFAULT_AGENT_SOCKET } from "../wire/protocol.ts";
import { peekConf } from "./peek.ts";
import { skipBeforeLookup } from "./pre-api.ts";

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
  /** The wait for the agent's answer to an ADD or CHECK (its apply included), at most half of the bound too. */
  applyTimeoutMs: number;
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
    applyTimeoutMs: Math.min(AGENT_APPLY_TIMEOUT_MS, seconds * 500),
  };
}
