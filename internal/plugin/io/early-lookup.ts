// The pod lookup, started as soon as the plugin has read stdin, so that it overlaps with loading
// and validating the rest of the plugin. It makes the same pre-API decisions as the plugin (so
// excluded namespaces, meshcni's own pods and non-Kubernetes containers still never reach the
// agent or the API), and the plugin checks everything again before it uses the answer.
//
// The node agent is asked first, over its Unix socket (../agent/client.ts): a pod it holds costs no
// API request and loads no fetch or TLS code. Its 404 is final (CNI error 106). Anything else (no
// socket, refused, no answer within AGENT_TIMEOUT_MS, 503) falls back to the plugin's own GET
// through its kubeconfig, loaded only then; failing closed is unchanged.
import type { LookupSource } from "../../wire/protocol.ts";
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import { checkUid } from "../pod-uid.ts";
import { askAgent } from "../agent/client.ts";
import type { Connection } from "./kube-http.ts";
import type { LookupTarget } from "../lookup-target.ts";

export { type LookupTarget, lookupTarget } from "../lookup-target.ts";

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
