// `meshcnictl check [--pre]`: what to ask the API server, and what its answers mean. The
// questions go through an injected ApiClient; judging the answers and rendering the ✓/× list
// are pure.
import { NAMES } from "../../config/entry.ts";
import { type PluginConf, parsePluginConf } from "../../config/plugin-config.ts";
import { buildManifests, CONTAINER, type K8sObject, SELECTOR } from "../manifests/objects.ts";
import { parseValues } from "../manifests/values.ts";
import { agentPods, fetchAgentStatuses, judgeAgent } from "./agents.ts";
import { judgeInitContainers, judgeMeshConfig, meshConfigPath } from "./mesh.ts";
import { judgeMeshedPods } from "./pods.ts";
import type { ApiClient, HttpAnswer } from "../context.ts";
import type { CheckResult } from "./result.ts";

const PLURALS: Record<string, string> = {
  Namespace: "namespaces",
  ServiceAccount: "serviceaccounts",
  ClusterRole: "clusterroles",
  ClusterRoleBinding: "clusterrolebindings",
  Role: "roles",
  RoleBinding: "rolebindings",
  ConfigMap: "configmaps",
  DaemonSet: "daemonsets",
};

/** The objects install-cni renders for this namespace: what --pre must be able to create and check expects. */
export function expectedObjects(namespace: string): K8sObject[] {
  return buildManifests(parseValues({ namespace, createNamespace: true }));
}

function groupVersion(apiVersion: string): { group: string; version: string } {
  const i = apiVersion.indexOf("/");
  return i < 0
    ? { group: "", version: apiVersion }
    : { group: apiVersion.slice(0, i), version: apiVersion.slice(i + 1) };
}

export function objectPath(o: Pick<K8sObject, "apiVersion" | "kind" | "metadata">): string {
  const { group, version } = groupVersion(o.apiVersion);
  const base = group ? `/apis/${group}/${version}` : `/api/${version}`;
  const ns = o.metadata.namespace ? `/namespaces/${o.metadata.namespace}` : "";
  return `${base}${ns}/${PLURALS[o.kind] ?? `${o.kind.toLowerCase()}s`}/${o.metadata.name}`;
}

export function accessReview(verb: string, o: { apiVersion: string; kind: string; namespace?: string; name?: string }) {
  const { group } = groupVersion(o.apiVersion);
  const attrs: Record<string, string> = { verb, group, resource: PLURALS[o.kind] ?? `${o.kind.toLowerCase()}s` };
  if (o.namespace) attrs.namespace = o.namespace;
  if (o.name) attrs.name = o.name;
  return {
    apiVersion: "authorization.k8s.io/v1",
    kind: "SelfSubjectAccessReview",
    spec: { resourceAttributes: attrs },
  };
}

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

function parseJson(a: HttpAnswer): Json | undefined {
  try {
    const v = JSON.parse(a.body);
    return isObj(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** A short reason for an answer that is not 2xx, from the API's Status object when there is one. */
export function describeFailure(a: HttpAnswer): string {
  const status = parseJson(a);
  const message = typeof status?.message === "string" ? status.message : a.body.slice(0, 200).trim();
  const reason = typeof status?.reason === "string" ? status.reason : "";
  return `${a.status}${reason ? ` ${reason}` : ""}${message ? `: ${message}` : ""}`;
}

const FORBIDDEN_HINT =
  "your kubeconfig's user lacks this permission; run check as " +
  "a user who may read meshcni's objects (e.g. a cluster admin)";

/** Asks; transport failures come back as status 0 with the reason as the body. */
async function ask(api: ApiClient, path: string): Promise<HttpAnswer> {
  try {
    return await api.get(path);
  } catch (e) {
    return { status: 0, body: (e as Error).message };
  }
}

export async function checkApi(api: ApiClient): Promise<CheckResult> {
  const a = await ask(api, "/version");
  const base = { category: "kubernetes-api", name: "can reach the Kubernetes API" };
  if (a.status === 200) {
    const v = parseJson(a);
    return {
      ...base,
      ok: true,
      detail: `${typeof v?.gitVersion === "string" ? `Kubernetes ${v.gitVersion} at ` : ""}${api.server}`,
    };
  }
  if (a.status === 0)
    return {
      ...base,
      ok: false,
      detail: `${api.server}: ${a.body}`,
      hint: "check the server address, the network and the CA in your kubeconfig",
    };
  if (a.status === 401)
    return {
      ...base,
      ok: false,
      detail: describeFailure(a),
      hint: "the API server rejected your credentials; refresh them (kubectl config view)",
    };
  // /version may be closed to this user; a non-401 answer still proves the server is there.
  return { ...base, ok: true, detail: `${api.server} (/version: ${a.status})` };
}

// ---- --pre ----------------------------------------------------------------------------------

async function canI(
  api: ApiClient,
  review: ReturnType<typeof accessReview>,
): Promise<{ allowed: boolean; detail: string }> {
  let a: HttpAnswer;
  try {
    a = await api.post("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", review);
  } catch (e) {
    return { allowed: false, detail: (e as Error).message };
  }
  if (a.status !== 200 && a.status !== 201)
    return { allowed: false, detail: `access review failed: ${describeFailure(a)}` };
  const status = parseJson(a)?.status;
  const allowed = isObj(status) && status.allowed === true;
  const reason =
    isObj(status) && typeof status.reason === "string" && status.reason
      ? status.reason
      : allowed
        ? "allowed"
        : "not allowed";
  return { allowed, detail: reason };
}

export async function checkCanCreate(api: ApiClient, namespace: string): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  for (const o of expectedObjects(namespace)) {
    const r = await canI(
      api,
      accessReview("create", {
        apiVersion: o.apiVersion,
        kind: o.kind,
        ...(o.metadata.namespace ? { namespace: o.metadata.namespace } : {}),
      }),
    );
    out.push({
      category: "pre-install",
      name: `can create ${o.kind} ${o.metadata.name}`,
      ok: r.allowed,
      ...(r.allowed
        ? {}
        : {
            detail: r.detail,
            hint:
              "install-cni renders this object; ask a cluster " +
              "admin to install meshcni or to grant you create on it",
          }),
    });
  }
  // RBAC's escalation rule: a role can only grant what its creator holds.
  for (const role of expectedObjects(namespace).filter((o) => o.kind === "ClusterRole" || o.kind === "Role")) {
    for (const rule of role.rules as {
      apiGroups: string[];
      resources: string[];
      resourceNames?: string[];
      verbs: string[];
    }[]) {
      for (const resource of rule.resources) {
        const group = rule.apiGroups[0] ?? "";
        const denied: string[] = [];
        for (const verb of rule.verbs) {
          // A rule's "pods/eviction" or "serviceaccounts/token": a resource and a subresource in a review.
          const [res, subresource] = resource.split("/", 2) as [string, string | undefined];
          const attrs: Record<string, string> = { verb, group, resource: res, ...(subresource ? { subresource } : {}) };
          if (role.metadata.namespace) attrs.namespace = role.metadata.namespace;
          if (rule.resourceNames?.[0]) attrs.name = rule.resourceNames[0];
          const r = await canI(api, {
            apiVersion: "authorization.k8s.io/v1",
            kind: "SelfSubjectAccessReview",
            spec: { resourceAttributes: attrs },
          });
          if (!r.allowed) denied.push(`${verb}: ${r.detail}`);
        }
        out.push({
          category: "pre-install",
          name:
            `you hold ${rule.verbs.join(", ")} on ${resource}, ` +
            `which meshcni's ${role.kind} ${role.metadata.name} grants`,
          ok: denied.length === 0,
          ...(denied.length === 0
            ? {}
            : {
                detail: denied.join("; "),
                hint: "RBAC lets you grant only permissions you hold (or with escalate/bind)",
              }),
        });
      }
    }
  }
  return out;
}

/** DaemonSets of another mesh CNI plugin (linkerd-cni, istio-cni) in a DaemonSetList. */
export function findOtherMeshCni(list: unknown): string[] {
  const items = isObj(list) && Array.isArray(list.items) ? list.items : [];
  const found: string[] = [];
  for (const ds of items) {
    if (!isObj(ds) || !isObj(ds.metadata)) continue;
    const name = String(ds.metadata.name ?? "");
    const ns = String(ds.metadata.namespace ?? "");
    const labels = isObj(ds.metadata.labels) ? ds.metadata.labels : {};
    if (name === "linkerd-cni" || labels["linkerd.io/cni-resource"] !== undefined)
      found.push(`linkerd-cni (DaemonSet ${ns}/${name})`);
    else if (name === "istio-cni-node" || labels["k8s-app"] === "istio-cni-node")
      found.push(`istio-cni (DaemonSet ${ns}/${name})`);
  }
  return found;
}

export async function checkNoOtherMeshCni(api: ApiClient): Promise<CheckResult> {
  const base = { category: "pre-install", name: "no other mesh CNI plugin is installed" };
  const a = await ask(api, "/apis/apps/v1/daemonsets");
  if (a.status !== 200) {
    return {
      ...base,
      ok: false,
      detail: `cannot list DaemonSets: ${a.status ? describeFailure(a) : a.body}`,
      hint: a.status === 403 ? FORBIDDEN_HINT : "try again",
    };
  }
  const others = findOtherMeshCni(parseJson(a));
  if (others.length === 0) return { ...base, ok: true };
  return {
    ...base,
    ok: false,
    detail: `found ${others.join(", ")}`,
    hint:
      "two CNI plugins rewriting the same pods' iptables fight " +
      "each other; uninstall the other one before installing meshcni",
  };
}

// ---- installed ------------------------------------------------------------------------------

export async function checkObjectsExist(
  api: ApiClient,
  namespace: string,
): Promise<{ results: CheckResult[]; found: Map<string, Json> }> {
  const results: CheckResult[] = [];
  const found = new Map<string, Json>();
  for (const o of expectedObjects(namespace)) {
    const name = `${o.kind} ${o.metadata.name} exists`;
    const a = await ask(api, objectPath(o));
    const base = { category: "meshcni", name };
    if (a.status === 200) {
      const obj = parseJson(a);
      if (obj) found.set(o.kind, obj);
      results.push({ ...base, ok: true });
    } else if (a.status === 404) {
      results.push({
        ...base,
        ok: false,
        detail: `missing ${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ""}${o.metadata.name}`,
        hint: "run: meshcnictl install-cni | kubectl apply -f -",
      });
    } else {
      results.push({
        ...base,
        ok: false,
        detail: a.status ? describeFailure(a) : a.body,
        hint: a.status === 403 ? FORBIDDEN_HINT : "try again",
      });
    }
  }
  return { results, found };
}

/**
 * The plugin's configuration from the ConfigMap's entry, parsed by the plugin's own parser, with
 * meshcni's namespace as the agent adds it (the plugin passes its own pods over).
 */
export function confFromConfigMap(cm: Json | undefined, namespace: string): { conf: PluginConf } | { error: string } {
  const data = isObj(cm?.data) ? cm.data : {};
  const text = data[CONTAINER.configKey];
  if (typeof text !== "string") return { error: `no ${CONTAINER.configKey} in ConfigMap ${NAMES.configMap}` };
  try {
    const raw = JSON.parse(text) as Json;
    const kubernetes = { pod_namespace: namespace, ...(isObj(raw.kubernetes) ? raw.kubernetes : {}) };
    return { conf: parsePluginConf(JSON.stringify({ cniVersion: "1.1.0", ...raw, kubernetes })) };
  } catch (e) {
    return { error: (e as Error).message };
  }
}

/** Whether the ConfigMap's entry is one the plugin accepts. */
export function judgeConfigMap(cm: Json | undefined, namespace = "meshcni"): CheckResult {
  const base = { category: "meshcni", name: "the ConfigMap holds a configuration the plugin accepts" };
  const r = confFromConfigMap(cm, namespace);
  if ("conf" in r) return { ...base, ok: true, detail: `mesh ${r.conf.mesh}, log level ${r.conf.log_level}` };
  if (r.error.startsWith("no "))
    return { ...base, ok: false, detail: r.error, hint: "re-apply meshcnictl install-cni" };
  return {
    ...base,
    ok: false,
    detail: r.error,
    hint: "fix the ConfigMap, or re-render it with meshcnictl install-cni",
  };
}

const num = (v: unknown) => (typeof v === "number" ? v : 0);

/** Whether the DaemonSet runs a ready pod on every node it is scheduled to. */
export function judgeDaemonSet(ds: Json | undefined): CheckResult {
  const base = { category: "meshcni", name: "the DaemonSet is ready on every scheduled node" };
  const st = isObj(ds?.status) ? ds.status : {};
  const desired = num(st.desiredNumberScheduled);
  const ready = num(st.numberReady);
  const updated = st.updatedNumberScheduled === undefined ? desired : num(st.updatedNumberScheduled);
  if (desired === 0) {
    return {
      ...base,
      ok: false,
      detail: "scheduled on no node",
      hint: "check the nodes: linux nodes (kubernetes.io/os=linux) get a meshcni-node pod",
    };
  }
  if (ready < desired)
    return {
      ...base,
      ok: false,
      detail: `number ready: ${ready}, number scheduled: ${desired}`,
      hint: "see the not-ready pods below; kubectl -n <ns> describe ds meshcni-node",
    };
  if (updated < desired)
    return {
      ...base,
      ok: false,
      detail: `${updated} of ${desired} pods run the current template (rollout in progress)`,
      hint: "wait for: kubectl -n <ns> rollout status ds/meshcni-node",
    };
  return { ...base, ok: true, detail: `${ready} of ${desired} nodes` };
}

function podProblem(pod: Json): string | undefined {
  const meta = isObj(pod.metadata) ? pod.metadata : {};
  const spec = isObj(pod.spec) ? pod.spec : {};
  const st = isObj(pod.status) ? pod.status : {};
  const conditions = Array.isArray(st.conditions) ? st.conditions.filter(isObj) : [];
  if (conditions.some((c) => c.type === "Ready" && c.status === "True")) return undefined;
  const where = `${String(meta.name ?? "?")}${spec.nodeName ? ` on ${String(spec.nodeName)}` : ""}`;
  const statuses = Array.isArray(st.containerStatuses) ? st.containerStatuses.filter(isObj) : [];
  for (const cs of statuses) {
    const state = isObj(cs.state) ? cs.state : {};
    const waiting = isObj(state.waiting) ? state.waiting : undefined;
    if (waiting)
      return (
        `${where}: ${String(cs.name)} waiting ` +
        `(${String(waiting.reason ?? "unknown")}${waiting.message ? `: ${String(waiting.message)}` : ""})`
      );
    const term = isObj(state.terminated) ? state.terminated : undefined;
    if (term)
      return (
        `${where}: ${String(cs.name)} terminated ` +
        `(${String(term.reason ?? "")} exit ${String(term.exitCode ?? "?")})`
      );
    if (cs.ready !== true) return `${where}: ${String(cs.name)} running but not ready (its /readyz fails)`;
  }
  return `${where}: ${String(st.phase ?? "not ready")}`;
}

/** Whether every meshcni-node pod is ready; names the ones that are not. */
export function judgePods(list: Json | undefined): CheckResult {
  const base = { category: "meshcni", name: "every meshcni-node pod is ready" };
  const items = Array.isArray(list?.items) ? list.items.filter(isObj) : [];
  if (items.length === 0)
    return {
      ...base,
      ok: false,
      detail: "no meshcni-node pods",
      hint: "check the DaemonSet's events: kubectl -n <ns> describe ds meshcni-node",
    };
  const problems = items.map(podProblem).filter((p): p is string => p !== undefined);
  if (problems.length === 0) return { ...base, ok: true, detail: `${items.length} pods` };
  return {
    ...base,
    ok: false,
    detail: problems.join("\n"),
    hint: "kubectl -n <ns> logs <pod> shows the agent's reasons",
  };
}

export const POD_SELECTOR = Object.entries(SELECTOR)
  .map(([k, v]) => `${k}=${v}`)
  .join(",");

const podsPath = (namespace: string) =>
  `/api/v1/namespaces/${namespace}/pods?labelSelector=${encodeURIComponent(POD_SELECTOR)}`;

const cannot = (category: string, name: string, a: HttpAnswer): CheckResult => ({
  category,
  name,
  ok: false,
  detail: a.status ? describeFailure(a) : a.body,
  hint: a.status === 403 ? FORBIDDEN_HINT : "try again",
});

/** Each node's agent, through the pod proxy: one group of results per node. */
async function checkNodes(
  api: ApiClient,
  namespace: string,
  agentList: Json | undefined,
  cliVersion: string,
): Promise<{ results: CheckResult[]; answers: Awaited<ReturnType<typeof fetchAgentStatuses>> }> {
  const agents = agentPods(agentList);
  const answers = await fetchAgentStatuses(api, namespace, agents);
  return { results: answers.flatMap((a) => judgeAgent(a, cliVersion, namespace)), answers };
}

/** All pods, or the pods of one namespace. */
const allPodsPath = (podNamespace?: string) =>
  podNamespace ? `/api/v1/namespaces/${podNamespace}/pods` : "/api/v1/pods";

/** The mesh's side: its injector in CNI mode, and no pod still carrying its init container. */
async function checkMeshSide(
  api: ApiClient,
  mesh: PluginConf["mesh"],
  pods: HttpAnswer | undefined,
): Promise<{ results: CheckResult[]; cniMode: boolean | undefined }> {
  const { result, cniMode } = judgeMeshConfig(mesh, await ask(api, meshConfigPath(mesh)));
  const results = [result];
  if (pods) {
    if (pods.status === 200) results.push(...judgeInitContainers(mesh, parseJson(pods)));
    else results.push(cannot("mesh", "can list the cluster's pods", pods));
  }
  return { results, cniMode };
}

export async function checkInstalled(api: ApiClient, namespace: string, cliVersion = "0.0.0"): Promise<CheckResult[]> {
  const { results, found } = await checkObjectsExist(api, namespace);
  let conf: PluginConf | undefined;
  if (found.has("ConfigMap")) {
    results.push(judgeConfigMap(found.get("ConfigMap"), namespace));
    const c = confFromConfigMap(found.get("ConfigMap"), namespace);
    if ("conf" in c) conf = c.conf;
  }
  if (found.has("DaemonSet")) {
    results.push(judgeDaemonSet(found.get("DaemonSet")));
    const a = await ask(api, podsPath(namespace));
    if (a.status === 200) {
      const list = parseJson(a);
      results.push(judgePods(list));
      results.push(...(await checkNodes(api, namespace, list, cliVersion)).results);
    } else results.push(cannot("meshcni", "every meshcni-node pod is ready", a));
  }
  if (conf) results.push(...(await checkMeshSide(api, conf.mesh, await ask(api, allPodsPath()))).results);
  return results.map((r) => (r.hint ? { ...r, hint: r.hint.replaceAll("<ns>", namespace) } : r));
}

/**
 * `check --pods`: the configuration from the ConfigMap, each agent's /status, the mesh's CNI
 * mode, then every started pod (of `podNamespace`, or of the cluster) the profile redirects.
 */
export async function checkMeshedPods(
  api: ApiClient,
  namespace: string,
  podNamespace: string | undefined,
  cliVersion = "0.0.0",
): Promise<CheckResult[]> {
  const cmPath = objectPath({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: NAMES.configMap, namespace } });
  const cmAnswer = await ask(api, cmPath);
  const confName = "the ConfigMap holds a configuration the plugin accepts";
  if (cmAnswer.status !== 200) {
    const r =
      cmAnswer.status === 404
        ? {
            category: "meshcni",
            name: confName,
            ok: false,
            detail: `missing ConfigMap ${namespace}/${NAMES.configMap}`,
            hint: "is meshcni installed? meshcnictl check; -n names meshcni's namespace",
          }
        : cannot("meshcni", confName, cmAnswer);
    return [r];
  }
  const cm = parseJson(cmAnswer);
  const c = confFromConfigMap(cm, namespace);
  const results: CheckResult[] = [judgeConfigMap(cm, namespace)];
  if (!("conf" in c)) return results;
  const agentsAnswer = await ask(api, podsPath(namespace));
  if (agentsAnswer.status !== 200)
    return [...results, cannot("meshcni", "can list the meshcni-node pods", agentsAnswer)];
  const { answers } = await checkNodes(api, namespace, parseJson(agentsAnswer), cliVersion);
  const mesh = await checkMeshSide(api, c.conf.mesh, undefined);
  results.push(...mesh.results);
  const podsAnswer = await ask(api, allPodsPath(podNamespace));
  if (podsAnswer.status !== 200)
    return [
      ...results,
      cannot("pods", `can list the pods${podNamespace ? ` of namespace ${podNamespace}` : ""}`, podsAnswer),
    ];
  const list = parseJson(podsAnswer);
  const items = Array.isArray(list?.items) ? list.items : [];
  results.push(...judgeMeshedPods(c.conf, items, answers, mesh.cniMode).results);
  return results;
}

// ---- report ---------------------------------------------------------------------------------

const mark = (r: CheckResult) => (r.ok ? "✓" : r.warning ? "‼" : "×");

/** Whether the results pass: no failure other than warnings. */
export const passed = (results: readonly CheckResult[]) => results.every((r) => r.ok || r.warning);

/** The ✓/‼/× list, grouped by category, with a closing status line. */
export function renderCheckReport(results: readonly CheckResult[]): string {
  const lines: string[] = [];
  let category = "";
  for (const r of results) {
    if (r.category !== category) {
      if (category) lines.push("");
      category = r.category;
      lines.push(category, "-".repeat(category.length));
    }
    lines.push(`${mark(r)} ${r.name}${r.ok && r.detail ? ` (${r.detail})` : ""}`);
    if (!r.ok) {
      for (const d of (r.detail ?? "").split("\n").filter(Boolean)) lines.push(`    ${d}`);
      if (r.hint) lines.push(`    hint: ${r.hint}`);
    }
  }
  const failed = results.filter((r) => !r.ok && !r.warning).length;
  const warned = results.filter((r) => !r.ok && r.warning).length;
  const warnings = warned ? `, ${warned} ${warned === 1 ? "warning" : "warnings"}` : "";
  lines.push(
    "",
    failed === 0
      ? `Status check results are ✓ (${results.length} checks${warnings})`
      : `Status check results are × (${failed} of ${results.length} checks failed${warnings})`,
  );
  return `${lines.join("\n")}\n`;
}

/** The same results as one JSON document (`-o json`). */
export function renderCheckJson(results: readonly CheckResult[]): string {
  const failed = results.filter((r) => !r.ok && !r.warning).length;
  const warnings = results.filter((r) => !r.ok && r.warning).length;
  const checks = results.map((r) => ({
    category: r.category,
    name: r.name,
    result: r.ok ? "ok" : r.warning ? "warning" : "error",
    ...(r.detail !== undefined && r.detail !== "" ? { detail: r.detail } : {}),
    ...(r.hint ? { hint: r.hint } : {}),
    ...(r.node !== undefined ? { node: r.node } : {}),
    ...(r.pod ? { pod: r.pod } : {}),
  }));
  return (
    JSON.stringify({ success: failed === 0, summary: { checks: results.length, failed, warnings }, checks }, null, 2) +
    "\n"
  );
}
