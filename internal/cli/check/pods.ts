// `meshcnictl check --pods`: every pod the mesh profile redirects, and whether it runs with
// meshcni's rules. The decision is the plugin's own (skipBeforeLookup, then the profile's decide)
// under the configuration the ConfigMap carries. A pod bypasses the mesh on positive evidence
// only: its node's agent lists it as bypassing, or its mesh validator's latest run found no
// redirect (internal/agent/repair/validator.ts). A pod with no record of the ADD of its current sandbox
// in its node's /status (internal/agent/repair/record-match.ts) is unverified: a warning, since the
// records can be lost (a reinstall of an older meshcni, a wiped state folder). Pure.
import type { PodRecord } from "../../wire/state.ts";
import { matchRecord, recordOfPod, type SandboxRef } from "../../agent/repair/record-match.ts";
import { describeValidatorFailure, sandboxReadyAt, validatorFailure } from "../../agent/repair/validator.ts";
import type { PluginConf } from "../../config/plugin-config.ts";
import { parsePod, type Pod } from "../../kube/objects.ts";
import { profileFor } from "../../mesh/index.ts";
import { ISTIO_INIT } from "../../mesh/istio/options.ts";
import { LINKERD_INIT } from "../../mesh/linkerd/profile.ts";
import { skipBeforeLookup } from "../../plugin/pre-api.ts";
import type { AgentAnswer, AgentView, HandledPod } from "./agents.ts";
import type { CheckResult } from "./result.ts";

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** The init container each mesh injects when its CNI mode is off. */
export const MESH_INIT: Record<PluginConf["mesh"], string> = { linkerd: LINKERD_INIT, istio: ISTIO_INIT };

/** Whether the pod's sandbox exists: a container started, PodReadyToStartContainers, or Running. */
export function podStarted(raw: Json): boolean {
  const st = isObj(raw.status) ? raw.status : {};
  if (st.phase === "Running") return true;
  const conditions = Array.isArray(st.conditions) ? st.conditions.filter(isObj) : [];
  if (conditions.some((c) => c.type === "PodReadyToStartContainers" && c.status === "True")) return true;
  const statuses = [st.initContainerStatuses, st.containerStatuses].flatMap((l) =>
    Array.isArray(l) ? l.filter(isObj) : [],
  );
  return statuses.some((cs) => isObj(cs.state) && (isObj(cs.state.running) || isObj(cs.state.terminated)));
}

export interface PodFinding {
  namespace: string;
  name: string;
  uid?: string;
  node: string;
  reason: string;
  /**
   * "bypassing": evidence that traffic skips the proxy; "unverified": no record of the ADD of its
   * sandbox (a warning); "init": the mesh's own init container set the rules.
   */
  kind: "bypassing" | "unverified" | "init";
}

export interface PodsJudgement {
  results: CheckResult[];
  findings: PodFinding[];
  /** Pods the profile redirects whose rules are meshcni's to give (not those with the mesh's init container). */
  considered: number;
}

const key = (ns: string, name: string) => `${ns}/${name}`;
const sameUid = (a: string | undefined, b: string | undefined) => a === undefined || b === undefined || a === b;

/** A pod without the mesh's init container, to ask the profile whether it would be redirected otherwise. */
function withoutInit(pod: Pod, init: string): Pod {
  return {
    ...pod,
    spec: {
      ...pod.spec,
      initContainers: (pod.spec.initContainers ?? []).filter((c) => c.name !== init),
      containers: pod.spec.containers.filter((c) => c.name !== init),
    },
  };
}

type Found = Pick<PodFinding, "kind" | "reason">;

/** A record as /status lists it, in the form internal/agent/repair/record-match.ts reads. */
const asRecord = (h: HandledPod): PodRecord => ({
  v: 1,
  containerId: h.containerId ?? "",
  namespace: h.namespace,
  name: h.name,
  ...(h.uid ? { uid: h.uid } : {}),
  decision: h.decision,
  reason: h.reason,
  time: h.time ?? "",
});

function judgeOnNode(view: AgentView, raw: Json, ns: string, name: string, uid: string | undefined): Found | undefined {
  const bypass = view.repair?.bypassing.find((b) => b.namespace === ns && b.name === name && sameUid(b.uid, uid));
  if (bypass) {
    const refused = bypass.refusal ? `; refused: ${bypass.refusal}` : "";
    return {
      kind: "bypassing",
      reason: `the agent on its node lists it as bypassing: ${bypass.reason} (${bypass.action}${refused})`,
    };
  }
  const failed = validatorFailure(raw.status);
  if (failed) return { kind: "bypassing", reason: describeValidatorFailure(failed) };
  const pod: SandboxRef = { namespace: ns, name, ...(uid ? { uid } : {}) };
  const records = (view.pods?.containers ?? []).map(asRecord).filter((r) => recordOfPod(r, pod));
  // Without the records' times (an older agent's /status) the UID alone decides.
  const readyAt = sandboxReadyAt(raw.status);
  if (readyAt !== undefined && records.every((r) => r.time)) pod.readyAt = readyAt;
  const match = matchRecord(pod, records);
  if (match.kind === "current") {
    return match.record.decision === "skipped"
      ? { kind: "bypassing", reason: `the plugin skipped it: ${match.record.reason}` }
      : undefined;
  }
  if (match.kind === "older") {
    const at = match.record.time;
    return {
      kind: "unverified",
      reason: `unverified: the plugin's newest record of it on its node (ADD at ${at}) is of an earlier sandbox`,
    };
  }
  const why = "it started before meshcni was chained, or the records were lost";
  return { kind: "unverified", reason: `unverified: no record of an ADD for its sandbox on its node (${why})` };
}

/**
 * Judges a list of pods. `conf` is the plugin's configuration, `answers` each agent's /status
 * (or why there is none), `cniMode` whether the mesh's injector runs in CNI mode (undefined:
 * not known).
 */
export function judgeMeshedPods(
  conf: PluginConf,
  rawPods: readonly unknown[],
  answers: readonly AgentAnswer[],
  cniMode: boolean | undefined,
): PodsJudgement {
  const profile = profileFor(conf);
  const init = MESH_INIT[conf.mesh];
  const byNode = new Map(answers.map((a) => [a.agent.node, a]));
  const findings: PodFinding[] = [];
  const unchecked = new Map<string, { why: string; pods: string[] }>();
  let considered = 0;
  const nodes = new Set<string>();
  for (const raw of rawPods) {
    if (!isObj(raw) || !profile) continue;
    const spec = isObj(raw.spec) ? raw.spec : {};
    const meta = isObj(raw.metadata) ? raw.metadata : {};
    const st = isObj(raw.status) ? raw.status : {};
    if (spec.hostNetwork === true || meta.deletionTimestamp || st.phase === "Succeeded" || st.phase === "Failed")
      continue;
    const node = typeof spec.nodeName === "string" ? spec.nodeName : "";
    if (!node || !podStarted(raw)) continue;
    const pod = parsePod(raw);
    if (!pod) continue;
    const ns = pod.metadata.namespace ?? "default";
    const name = pod.metadata.name;
    const uid = typeof meta.uid === "string" ? meta.uid : undefined;
    if (skipBeforeLookup(conf.kubernetes, ns, name)) continue;
    const hasInit = [...(pod.spec.initContainers ?? []), ...pod.spec.containers].some((c) => c.name === init);
    const decision = profile.decide(hasInit ? withoutInit(pod, init) : pod, conf);
    if (!decision.redirect) continue;
    const base = { namespace: ns, name, node, ...(uid ? { uid } : {}) };
    if (hasInit) {
      if (cniMode === true)
        findings.push({
          ...base,
          kind: "init",
          reason:
            `started with ${init} although the mesh's CNI mode is on ` +
            `(injected before it was turned on): ${init} set its rules, with NET_ADMIN`,
        });
      continue;
    }
    considered++;
    const answer = byNode.get(node);
    const why = !answer
      ? `no meshcni-node pod runs on node ${node}`
      : "unreachable" in answer
        ? `the agent on node ${node} does not answer (${answer.unreachable})`
        : undefined;
    if (why || !answer || "unreachable" in answer) {
      const u = unchecked.get(node) ?? { why: why ?? "", pods: [] };
      u.pods.push(key(ns, name));
      unchecked.set(node, u);
      continue;
    }
    nodes.add(node);
    const found = judgeOnNode(answer.view, raw, ns, name, uid);
    if (found) findings.push({ ...base, ...found });
  }

  const category = "pods";
  const results: CheckResult[] = [];
  for (const f of findings) {
    const pod = { namespace: f.namespace, name: f.name, node: f.node, ...(f.uid ? { uid: f.uid } : {}) };
    if (f.kind === "bypassing") {
      results.push({
        category,
        name: `pod ${key(f.namespace, f.name)} on ${f.node} runs with meshcni's rules`,
        ok: false,
        node: f.node,
        pod,
        detail: f.reason,
        hint:
          `delete it (kubectl -n ${f.namespace} delete pod ${f.name}): ` +
          `its controller recreates it, and the plugin gives the new pod its rules`,
      });
    } else if (f.kind === "unverified") {
      results.push({
        category,
        name: `pod ${key(f.namespace, f.name)} on ${f.node} has a record of meshcni's ADD`,
        ok: false,
        warning: true,
        node: f.node,
        pod,
        detail: f.reason,
        hint:
          "the agent never removes a pod for a missing record; if it started before meshcni was chained, " +
          "restart its workload (kubectl rollout restart) so the plugin meshes the new pods",
      });
    } else {
      results.push({
        category,
        name: `pod ${key(f.namespace, f.name)} on ${f.node} is redirected by meshcni, not by ${init}`,
        ok: false,
        warning: true,
        node: f.node,
        pod,
        detail: f.reason,
        hint:
          `restart its workload (kubectl -n ${f.namespace} ` +
          `rollout restart ...): the injector leaves ${init} out now`,
      });
    }
  }
  for (const [node, u] of [...unchecked].sort(([a], [b]) => a.localeCompare(b))) {
    results.push({
      category,
      name: `pods on node ${node} checked`,
      ok: false,
      warning: true,
      node,
      detail: `${u.why}; not checked: ${u.pods.join(", ")}`,
      hint: "see the node's checks (meshcnictl check)",
    });
  }
  if (!findings.some((f) => f.kind === "bypassing")) {
    const notChecked = [...unchecked.values()].reduce((n, u) => n + u.pods.length, 0);
    const unverified = findings.filter((f) => f.kind === "unverified").length;
    const checked = considered - notChecked;
    const checkedNodes = nodes.size;
    const where =
      `${checked} ${checked === 1 ? "pod" : "pods"} on ${checkedNodes} ${checkedNodes === 1 ? "node" : "nodes"}` +
      `${unverified ? `; ${unverified} unverified, see below` : ""}` +
      `${notChecked ? `; ${notChecked} not checked, see below` : ""}`;
    const name = unverified
      ? "no pod the profile redirects is known to bypass the mesh"
      : "every pod the profile redirects runs with meshcni's rules";
    results.unshift({ category, name, ok: true, detail: where });
  }
  return { results, findings, considered };
}
