// Linkerd test cases as files: testdata/linkerd/rules/<case>.input.json names a pod fixture from
// testdata/pods/ and what differs from it (labels, annotations, linkerd-proxy's
// securityContext, the namespace, the `kubernetes` Service, the conflist's linkerd section).
import { readdirSync, readFileSync } from "node:fs";
import { parsePluginConf, type PluginConf } from "../../internal/config/plugin-config.ts";
import { type Namespace, parseNamespace, parsePod, type Pod } from "../../internal/kube/objects.ts";
import { repoPath } from "../support/golden.ts";

export const RULES_DIR = "testdata/linkerd/rules";
const PODS_DIR = "testdata/pods";

type Patch = Record<string, string | number | null>;

export interface CaseInput {
  about?: string;
  pod: string;
  /** A namespace fixture under testdata/pods/ (annotations the pod lacks are read from it). */
  namespace?: string;
  linkerd?: Record<string, unknown>;
  labels?: Patch;
  annotations?: Patch;
  proxySecurityContext?: Patch;
  /**
   * The `default/kubernetes` Service as the API returns it; null when it cannot be read. Absent:
   * the profile must not ask for it.
   */
  kubernetesService?: unknown;
  podAddresses?: string[];
}

function patch(target: Record<string, unknown>, p: Patch | undefined): Record<string, unknown> {
  const out = { ...target };
  for (const [k, v] of Object.entries(p ?? {})) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

/** The conflist entry `install-cni` writes for Linkerd, as the protocol goldens use it. */
export function linkerdEntry(linkerd: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    cniVersion: "1.0.0",
    name: "k8s-pod-network",
    type: "meshcni",
    log_level: "info",
    mesh: "linkerd",
    kubernetes: {
      kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig",
      exclude_namespaces: ["kube-system"],
      pod_namespace: "meshcni",
    },
    linkerd: {
      "incoming-proxy-port": 4143,
      "outgoing-proxy-port": 4140,
      "proxy-uid": 2102,
      "inbound-ports-to-ignore": ["4191", "4190"],
      "iptables-mode": "auto",
      ...linkerd,
    },
  };
}

export function buildCasePod(input: CaseInput): any {
  const pod = structuredClone(JSON.parse(readFileSync(repoPath(PODS_DIR, input.pod), "utf8")));
  pod.metadata.labels = patch(pod.metadata.labels ?? {}, input.labels);
  pod.metadata.annotations = patch(pod.metadata.annotations ?? {}, input.annotations);
  const proxy = [...(pod.spec.initContainers ?? []), ...pod.spec.containers].find(
    (c: any) => c.name === "linkerd-proxy",
  );
  if (proxy && input.proxySecurityContext)
    proxy.securityContext = patch(proxy.securityContext ?? {}, input.proxySecurityContext);
  return pod;
}

export function listCases(): string[] {
  return readdirSync(repoPath(RULES_DIR))
    .filter((f) => f.endsWith(".input.json"))
    .map((f) => f.replace(/\.input\.json$/, ""))
    .sort();
}

export function readCase(name: string): { input: CaseInput; pod: Pod; namespace?: Namespace; conf: PluginConf } {
  const input = JSON.parse(readFileSync(repoPath(RULES_DIR, `${name}.input.json`), "utf8")) as CaseInput;
  const pod = parsePod(buildCasePod(input));
  if (!pod) throw new Error(`${name}: the pod does not parse`);
  const conf = parsePluginConf(JSON.stringify(linkerdEntry(input.linkerd)));
  if (!input.namespace) return { input, pod, conf };
  const namespace = parseNamespace(JSON.parse(readFileSync(repoPath(PODS_DIR, input.namespace), "utf8")));
  if (!namespace) throw new Error(`${name}: the namespace does not parse`);
  return { input, pod, namespace, conf };
}
