// `meshcnictl explain`: what the plugin would do for a pod, offline. It runs the plugin's own
// steps (parsePluginConf, skipBeforeLookup, profileFor, decide, needsNamespace, plan, the
// backend's render) on a Pod, or on the pod template of a workload. Pure (the backend's code is
// loaded; nothing is read or run).
import { parseAllDocuments } from "yaml";
import { CniError } from "../cni/errors.ts";
import { parsePluginConf } from "../config/plugin-config.ts";
import { type Namespace, parseNamespace, parsePod, type Pod } from "../kube/objects.ts";
import { profileFor } from "../mesh/index.ts";
import { needsNamespace } from "../mesh/profile.ts";
import { BACKEND_NAMES, backendOfMode, kindNamed } from "../firewall/registry.ts";
import { skipBeforeLookup } from "../plugin/pre-api.ts";
import { CliError } from "./errors.ts";

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

export interface PodCase {
  /** How the output names it, e.g. "Deployment emojivoto/web". */
  source: string;
  namespace: string;
  /** The pod's name, or for a template the prefix its pods get ("web-"). */
  podName: string;
  pod: Pod;
  /** status.podIPs of a live pod, as prevResult would carry them. */
  addresses: string[];
}

/** Parses YAML or JSON text holding one or more documents (a `---` stream, or a List). */
export function parseDocuments(text: string, what: string): Json[] {
  const out: Json[] = [];
  for (const doc of parseAllDocuments(text)) {
    if ("errors" in doc && doc.errors.length) {
      throw new CliError(`${what}: not valid YAML or JSON: ${doc.errors[0]!.message.split("\n")[0]}`);
    }
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) continue;
    if (!isObj(value)) throw new CliError(`${what}: each document must be a Kubernetes object`);
    if (typeof value.kind === "string" && value.kind.endsWith("List") && Array.isArray(value.items)) {
      for (const item of value.items) if (isObj(item)) out.push(item);
    } else out.push(value);
  }
  if (out.length === 0) throw new CliError(`${what}: no Kubernetes object in it`);
  return out;
}

/** Where each workload kind keeps its pod template. */
const TEMPLATE_PATH: Record<string, string[]> = {
  Deployment: ["spec", "template"],
  StatefulSet: ["spec", "template"],
  DaemonSet: ["spec", "template"],
  ReplicaSet: ["spec", "template"],
  ReplicationController: ["spec", "template"],
  Job: ["spec", "template"],
  CronJob: ["spec", "jobTemplate", "spec", "template"],
  PodTemplate: ["template"],
};

function dig(o: Json, path: readonly string[]): unknown {
  let cur: unknown = o;
  for (const k of path) cur = isObj(cur) ? cur[k] : undefined;
  return cur;
}

/**
 * The pods (or pod templates) in some Kubernetes objects. Other kinds are passed over (listed
 * in `ignored`), unless nothing else is there.
 */
export function extractPods(
  docs: readonly Json[],
  what: string,
  defaultNamespace?: string,
): { cases: PodCase[]; ignored: string[] } {
  const known = (d: Json) => d.kind === "Pod" || (typeof d.kind === "string" && TEMPLATE_PATH[d.kind] !== undefined);
  const ignored = docs
    .filter((d) => !known(d))
    .map((d) =>
      `${String(d.kind ?? "document without kind")} ${String((isObj(d.metadata) && d.metadata.name) || "")}`.trim(),
    );
  const pods = docs.filter(known);
  if (pods.length === 0) {
    throw new CliError(
      `${what}: no Pod or workload with a pod template ` +
        `(${["Pod", ...Object.keys(TEMPLATE_PATH)].join(", ")}); found ${ignored.join(", ")}`,
    );
  }
  return {
    cases: pods.map((doc, i) =>
      extractOne(doc, pods.length > 1 ? `${what} (workload ${i + 1})` : what, defaultNamespace),
    ),
    ignored,
  };
}

function extractOne(doc: Json, where: string, defaultNamespace?: string): PodCase {
  const kind = typeof doc.kind === "string" ? doc.kind : "";
  const meta = isObj(doc.metadata) ? doc.metadata : {};
  const name = typeof meta.name === "string" ? meta.name : "";
  let raw: unknown;
  let podName: string;
  if (kind === "Pod") {
    raw = doc;
    podName = name || (typeof meta.generateName === "string" ? meta.generateName : "");
  } else if (TEMPLATE_PATH[kind]) {
    raw = dig(doc, TEMPLATE_PATH[kind]);
    if (!isObj(raw))
      throw new CliError(`${where}: ${kind} ${name} has no pod template at ${TEMPLATE_PATH[kind].join(".")}`);
    raw = { ...raw, metadata: { name: `${name}-`, ...(isObj(raw.metadata) ? raw.metadata : {}) } };
    podName = `${name}-`;
  } else {
    throw new CliError(`${where}: a ${kind} is not a Pod or a workload with a pod template`);
  }
  const pod = parsePod(raw);
  if (!pod) throw new CliError(`${where}: ${kind} ${name}: not a valid pod (needs metadata.name and spec.containers)`);
  const namespace =
    pod.metadata.namespace ??
    (typeof meta.namespace === "string" ? meta.namespace : undefined) ??
    defaultNamespace ??
    "default";
  const status = isObj(doc.status) && kind === "Pod" ? doc.status : {};
  const addresses = Array.isArray(status.podIPs)
    ? status.podIPs.map((p) => (isObj(p) && typeof p.ip === "string" ? p.ip : "")).filter(Boolean)
    : typeof status.podIP === "string"
      ? [status.podIP]
      : [];
  return { source: `${kind} ${namespace}/${name || podName}`, namespace, podName, pod, addresses };
}

export function parseNamespaceDoc(text: string, what: string): Namespace {
  const docs = parseDocuments(text, what);
  const ns = docs.length === 1 && docs[0]!.kind === "Namespace" ? parseNamespace(docs[0]) : undefined;
  if (!ns) throw new CliError(`${what}: expected one Namespace object`);
  return ns;
}

export interface Explanation {
  text: string;
  /** An invalid annotation or setting: the plugin would fail the pod's ADD. */
  failed: boolean;
}

/**
 * What the plugin would do for each pod under a conflist entry (as JSON text, the way the
 * runtime hands it over). `namespace` stands in for the API's answer about the pod's namespace.
 */
export async function explainPods(
  confText: string,
  cases: readonly PodCase[],
  namespace: Namespace | undefined,
  ignored: readonly string[] = [],
  backendName?: string,
): Promise<Explanation> {
  const conf = parsePluginConf(confText);
  const profile = profileFor(conf);
  if (!profile) throw new CliError(`mesh ${conf.mesh} is not available in this build of meshcni`, 1);
  // --backend, else what the mode names (auto renders iptables: the host decides the rest).
  const kind = backendName !== undefined ? kindNamed(backendName) : undefined;
  if (backendName !== undefined && !kind) {
    throw new CliError(`--backend ${JSON.stringify(backendName)}: must be one of ${BACKEND_NAMES.join(", ")}`);
  }
  const backend = await (kind ? kind.load() : backendOfMode(profile.firewall(conf).mode));
  const parts: string[] = [];
  let failed = false;
  for (const c of cases) {
    const lines = [`# ${c.source} (mesh ${conf.mesh})`];
    const skip = skipBeforeLookup(conf.kubernetes, c.namespace, c.podName);
    const decision = skip ? { redirect: false, reason: skip } : profile.decide(c.pod, conf);
    if (!decision.redirect) {
      parts.push([...lines, `# no rules: ${decision.reason}`, ""].join("\n"));
      continue;
    }
    lines.push(`# redirect: ${decision.reason}`);
    let ns: Namespace | undefined;
    if (needsNamespace(profile, c.pod)) {
      if (namespace && namespace.metadata.name === c.namespace) {
        ns = namespace;
        lines.push(`# namespace ${c.namespace}: annotations from the --namespace-file`);
      } else if (namespace) {
        lines.push(
          `# namespace ${c.namespace}: the --namespace-file is for ` +
            `${namespace.metadata.name}, so only the pod's own annotations apply`,
        );
      } else {
        lines.push(`# namespace ${c.namespace}: not given (--namespace-file), so only the pod's own annotations apply`);
      }
    }
    if (profile.needsKubernetesService?.(c.pod)) {
      lines.push(
        "# the API server's ports: 443 and 6443 here; the plugin reads " +
          "them from the Service default/kubernetes (port and targetPort)",
      );
    }
    try {
      const input = { conf, pod: c.pod, podAddresses: c.addresses };
      const redirect = profile.plan(ns ? { ...input, namespace: ns } : input);
      parts.push(`${lines.join("\n")}\n${backend.render(redirect)}`);
    } catch (e) {
      if (!(e instanceof CniError)) throw e;
      failed = true;
      parts.push([...lines, `# the plugin fails ADD: ${e.msg}${e.details ? `: ${e.details}` : ""}`, ""].join("\n"));
    }
  }
  if (ignored.length) parts.push(`# not pods or workloads, passed over: ${ignored.join(", ")}\n`);
  return { text: parts.join("\n"), failed };
}
