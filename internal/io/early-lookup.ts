// The pod lookup, started as soon as the plugin has read stdin: reading the kubeconfig and the
// TLS handshake with the API server then overlap with loading and validating the rest of the
// plugin. It is only a head start: it makes the same pre-API decisions as the plugin (so
// excluded namespaces and meshcni's own pods still never touch the API), and the plugin checks
// everything again before it uses the answer.
import { parseK8sArgs } from "../cni/k8s-args.ts";
import { skipBeforeLookup } from "../plugin/pre-api.ts";
import { type Connection, getJson, podPath, readKubeconfig } from "./kube-http.ts";

export interface EarlyLookup {
  kubeconfig: string;
  namespace: string;
  name: string;
  connection: Promise<Connection>;
  pod: Promise<unknown>;
}

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : []);

export function startEarlyLookup(stdin: string, env: Record<string, string | undefined>): EarlyLookup | undefined {
  if (env.CNI_COMMAND !== "ADD" && env.CNI_COMMAND !== "CHECK") return undefined;
  let conf: { kubernetes?: Record<string, unknown>; timeout_seconds?: unknown };
  let args: ReturnType<typeof parseK8sArgs>;
  try {
    conf = JSON.parse(stdin);
    args = parseK8sArgs(env.CNI_ARGS);
  } catch {
    return undefined; // the plugin will answer with the error
  }
  const k = conf?.kubernetes;
  const kubeconfig = k?.kubeconfig;
  if (typeof kubeconfig !== "string" || !args.podName || !args.podNamespace) return undefined;
  const podNamespace = typeof k?.pod_namespace === "string" ? k.pod_namespace : undefined;
  if (skipBeforeLookup({ exclude_namespaces: strings(k?.exclude_namespaces), pod_namespace: podNamespace }, args.podNamespace, args.podName)) {
    return undefined;
  }
  const seconds = typeof conf.timeout_seconds === "number" && conf.timeout_seconds > 0 ? Math.min(conf.timeout_seconds, 60) : 5;
  const signal = AbortSignal.timeout(seconds * 1000);
  const { podNamespace: ns, podName: name } = args;
  // Synchronous up to fetch(): the TLS handshake then runs on Bun's HTTP thread while the main
  // thread loads and validates the rest of the plugin.
  let connection: Promise<Connection>;
  let pod: Promise<unknown>;
  try {
    const c = readKubeconfig(kubeconfig);
    connection = Promise.resolve(c);
    pod = getJson(c, podPath(ns, name), `pod ${ns}/${name}`, signal);
  } catch (e) {
    connection = Promise.reject(e);
    pod = connection;
  }
  // Whoever uses these sees their failures; unused ones must not end the process.
  connection.catch(() => {});
  pod.catch(() => {});
  return { kubeconfig, namespace: ns, name, connection, pod };
}
