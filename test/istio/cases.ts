// Istio test cases as files: testdata/istio/rules/<case>.input.json names a pod fixture from
// testdata/istio/pods/ and what differs from it (annotations, labels, istio-proxy env and
// securityContext, the pod's addresses, the conflist's istio section).
import { readdirSync, readFileSync } from "node:fs";
import { parsePluginConf, type PluginConf } from "../../internal/config/plugin-config.ts";
import { parsePod, type Pod } from "../../internal/kube/objects.ts";
import { repoPath } from "../support/golden.ts";

export const RULES_DIR = "testdata/istio/rules";
export const PODS_DIR = "testdata/istio/pods";

type Patch = Record<string, string | number | null>;

export interface CaseInput {
  about?: string;
  pod: string;
  podAddresses: string[];
  istio?: Record<string, unknown>;
  labels?: Patch;
  annotations?: Patch;
  proxyEnv?: Patch;
  /** Env entries appended to istio-proxy's env as they are, duplicates included. */
  proxyEnvList?: { name: string; value: string }[];
  proxySecurityContext?: Patch;
}

export function readPodFixture(file: string): any {
  return JSON.parse(readFileSync(repoPath(PODS_DIR, file), "utf8"));
}

function patch(target: Record<string, unknown>, p: Patch | undefined): Record<string, unknown> {
  const out = { ...target };
  for (const [k, v] of Object.entries(p ?? {})) {
    if (v === null) delete out[k];
    else out[k] = v;
  }
  return out;
}

/** The pod object (as the API would return it) for a case. */
export function buildCasePod(input: Omit<CaseInput, "podAddresses"> & { name?: string }): any {
  const pod = structuredClone(readPodFixture(input.pod));
  if (input.name) pod.metadata.name = input.name;
  pod.metadata.labels = patch(pod.metadata.labels ?? {}, input.labels);
  pod.metadata.annotations = patch(pod.metadata.annotations ?? {}, input.annotations);
  const containers = [...(pod.spec.initContainers ?? []), ...pod.spec.containers];
  const proxy = containers.find((c: any) => c.name === "istio-proxy");
  if (proxy && input.proxyEnv) {
    for (const [name, value] of Object.entries(input.proxyEnv)) {
      proxy.env = (proxy.env ?? []).filter((e: any) => e.name !== name);
      if (value !== null) proxy.env.push({ name, value: String(value) });
    }
  }
  if (proxy && input.proxyEnvList) proxy.env = [...(proxy.env ?? []), ...input.proxyEnvList];
  if (proxy && input.proxySecurityContext)
    proxy.securityContext = patch(proxy.securityContext ?? {}, input.proxySecurityContext);
  return pod;
}

/** The conflist entry an Istio install writes, era-B shaped, with `type` and `mesh` for meshcni. */
export function istioEntry(extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    cniVersion: "1.0.0",
    name: "k8s-pod-network",
    type: "meshcni",
    mesh: "istio",
    log_level: "debug",
    kubernetes: {
      kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig",
      exclude_namespaces: ["istio-system", "kube-system"],
    },
    ...extra,
  };
}

export function confFor(istio: Record<string, unknown> = {}): PluginConf {
  return parsePluginConf(JSON.stringify(istioEntry({ istio })));
}

export function listCases(): string[] {
  return readdirSync(repoPath(RULES_DIR))
    .filter((f) => f.endsWith(".input.json"))
    .map((f) => f.replace(/\.input\.json$/, ""))
    .sort();
}

export function readCase(name: string): { input: CaseInput; pod: Pod; conf: PluginConf } {
  const input = JSON.parse(readFileSync(repoPath(RULES_DIR, `${name}.input.json`), "utf8")) as CaseInput;
  const pod = parsePod(buildCasePod(input));
  if (!pod) throw new Error(`${name}: the pod does not parse`);
  return { input, pod, conf: confFor(input.istio) };
}

/** The payload part of a rules golden (after its two comment lines): what the plugin writes. */
export function goldenPayload(name: string): string {
  return readFileSync(repoPath(RULES_DIR, `${name}.golden`), "utf8")
    .split("\n")
    .slice(2)
    .join("\n");
}
