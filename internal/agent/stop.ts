// What the agent does on SIGTERM or SIGINT: leave the chain, the plugin binary and its kubeconfig
// in place (a rollout, an eviction or a node drain: a new agent comes back, and meanwhile meshed
// pods fail closed instead of starting unmeshed), or undo everything (meshcni is being removed
// from the cluster, or from this node). Pure: the answers of the API server come in as data.
//
// Undo when, and only when, the API server says so:
// - the DaemonSet is gone (404) or being deleted (deletionTimestamp);
// - its namespace is being deleted (or gone);
// - the API server rejects the agent's own service account token (401) or refuses it the GET of
//   its own DaemonSet or of its namespace (403). A rollout, an eviction and a crash loop keep the ServiceAccount and
//   the RBAC objects; only a removal (`kubectl delete -f`, `helm uninstall`) deletes them, and
//   often before the pod gets its SIGTERM. With them gone, the plugin left behind could not read
//   any pod either (its kubeconfig's token is of meshcni's plugin account, which goes with them,
//   and no agent would renew it), so keeping it would fail every pod that needs a lookup on this
//   node, for good;
// - the DaemonSet no longer runs on this node (its nodeSelector, required node affinity or
//   tolerations exclude it now): no agent will come back here.
// Anything else keeps everything: the DaemonSet is there; the API server cannot be reached,
// times out, answers 5xx or 429 or garbage; the agent does not know its namespace. When in doubt
// the node stays meshed; `--uninstall` always undoes.

import type { ApiAnswer } from "../kube/client.ts";

export interface StopFacts {
  /** POD_NAMESPACE and --daemonset-name; undefined namespace: the agent cannot look. */
  namespace?: string;
  daemonSetName: string;
  nodeName?: string;
  /** The answers; undefined when not asked. */
  daemonSet?: ApiAnswer;
  namespaceObject?: ApiAnswer;
  node?: ApiAnswer;
}

export interface StopDecision {
  undo: boolean;
  why: string;
}

type Obj = Record<string, unknown>;
const isObj = (x: unknown): x is Obj => typeof x === "object" && x !== null && !Array.isArray(x);
const get = (o: unknown, ...keys: string[]): unknown =>
  keys.reduce<unknown>((at, k) => (isObj(at) ? at[k] : undefined), o);
const deletionTimestamp = (o: unknown): string | undefined => {
  const t = get(o, "metadata", "deletionTimestamp");
  return typeof t === "string" && t !== "" ? t : undefined;
};

function describe(a: ApiAnswer): string {
  if (a.kind === "unreachable") return `the API server did not answer (${a.reason})`;
  if (a.kind === "status") return `the API server answered ${a.status}${a.message ? ` (${a.message})` : ""}`;
  return "the API server answered";
}

export function decideOnStop(f: StopFacts): StopDecision {
  const keep = (why: string): StopDecision => ({ undo: false, why });
  const undo = (why: string): StopDecision => ({ undo: true, why });
  if (f.namespace === undefined) return keep("POD_NAMESPACE is not set, so the agent cannot look at its DaemonSet");
  const ds = `DaemonSet ${f.namespace}/${f.daemonSetName}`;
  const a = f.daemonSet;
  if (a === undefined) return keep(`the agent could not ask the API server about its ${ds}`);
  if (a.kind === "status") {
    if (a.status === 404) return undo(`its ${ds} is gone (404)`);
    if (a.status === 401)
      return undo(
        `the API server no longer accepts the agent's service account token (401): ` +
          `its ServiceAccount was deleted, which only a removal of meshcni does`,
      );
    if (a.status === 403)
      return undo(
        `the agent may no longer read its ${ds} (403): its RBAC was deleted, which only a removal of meshcni does`,
      );
    return keep(`cannot tell whether its ${ds} still exists: ${describe(a)}`);
  }
  if (a.kind === "unreachable") return keep(`cannot tell whether its ${ds} still exists: ${describe(a)}`);
  if (!isObj(a.object) || get(a.object, "kind") !== "DaemonSet")
    return keep(`cannot tell whether its ${ds} still exists: the API server sent something that is not a DaemonSet`);
  const dsGone = deletionTimestamp(a.object);
  if (dsGone) return undo(`its ${ds} is being deleted (deletionTimestamp ${dsGone})`);
  const ns = f.namespaceObject;
  if (ns?.kind === "object") {
    const nsGone = deletionTimestamp(ns.object);
    if (nsGone) return undo(`its namespace ${f.namespace} is being deleted (deletionTimestamp ${nsGone})`);
  } else if (ns?.kind === "status" && ns.status === 404) {
    return undo(`its namespace ${f.namespace} is gone (404)`);
  } else if (ns?.kind === "status" && (ns.status === 401 || ns.status === 403)) {
    // The ClusterRole (or the account) went before the Role: a removal under way.
    return undo(
      `the agent may no longer read its namespace ${f.namespace} (${ns.status}): ` +
        `its ClusterRole or ServiceAccount was deleted, which only a removal of meshcni does`,
    );
  }
  if (f.nodeName !== undefined && f.node?.kind === "object") {
    const fit = targetsNode(a.object, f.node.object);
    if (!fit.runs) return undo(`its ${ds} no longer runs on node ${f.nodeName}: ${fit.why}`);
  }
  const where = f.nodeName !== undefined ? ` and runs on node ${f.nodeName}` : "";
  return keep(`its ${ds} exists${where}: a new agent will take over`);
}

// ---- does the DaemonSet run on this node? -------------------------------------------------------

interface Toleration {
  key?: string;
  operator?: string;
  value?: string;
  effect?: string;
}
interface Taint {
  key: string;
  value?: string;
  effect: string;
}

/**
 * The tolerations the DaemonSet controller adds to every pod it makes (Kubernetes' DaemonSet
 * documentation, "Taints and tolerations"); network-unavailable only for host-network pods.
 */
function controllerTolerations(hostNetwork: boolean): Toleration[] {
  const exists = (key: string, effect: string): Toleration => ({
    key: `node.kubernetes.io/${key}`,
    operator: "Exists",
    effect,
  });
  return [
    exists("not-ready", "NoExecute"),
    exists("unreachable", "NoExecute"),
    exists("disk-pressure", "NoSchedule"),
    exists("memory-pressure", "NoSchedule"),
    exists("pid-pressure", "NoSchedule"),
    exists("unschedulable", "NoSchedule"),
    ...(hostNetwork ? [exists("network-unavailable", "NoSchedule")] : []),
  ];
}

function tolerates(t: Toleration, taint: Taint): boolean {
  if (t.effect && t.effect !== taint.effect) return false;
  if (t.operator === "Exists") return !t.key || t.key === taint.key;
  return t.key === taint.key && (t.value ?? "") === (taint.value ?? "");
}

function matchesRequirement(req: unknown, value: string | undefined): boolean | undefined {
  const op = get(req, "operator");
  const values = get(req, "values");
  const list = Array.isArray(values) ? values.filter((x): x is string => typeof x === "string") : [];
  switch (op) {
    case "In":
      return value !== undefined && list.includes(value);
    case "NotIn":
      return value === undefined || !list.includes(value);
    case "Exists":
      return value !== undefined;
    case "DoesNotExist":
      return value === undefined;
    case "Gt":
    case "Lt": {
      if (value === undefined || list.length !== 1 || !/^-?\d+$/.test(value) || !/^-?\d+$/.test(list[0]!)) return false;
      return op === "Gt" ? Number(value) > Number(list[0]) : Number(value) < Number(list[0]);
    }
    default:
      return undefined; // an operator this code does not know: cannot tell
  }
}

/**
 * Whether the DaemonSet's pods may run on the node: its nodeSelector, its required node affinity,
 * and every NoSchedule/NoExecute taint tolerated. Anything it cannot read counts as "runs": a
 * wrong "no" would unmesh a node that keeps its agent.
 */
export function targetsNode(daemonSet: unknown, node: unknown): { runs: true } | { runs: false; why: string } {
  const spec = get(daemonSet, "spec", "template", "spec");
  const labelsRaw = get(node, "metadata", "labels");
  const labels: Record<string, string> = isObj(labelsRaw)
    ? Object.fromEntries(Object.entries(labelsRaw).filter((e): e is [string, string] => typeof e[1] === "string"))
    : {};
  const nodeName = get(node, "metadata", "name");

  const selector = get(spec, "nodeSelector");
  if (isObj(selector)) {
    for (const [k, want] of Object.entries(selector)) {
      if (typeof want === "string" && labels[k] !== want)
        return {
          runs: false,
          why:
            `its nodeSelector wants ${k}=${want}, the node has ` +
            `${k in labels ? `${k}=${labels[k]}` : `no label ${k}`}`,
        };
    }
  }

  const terms = get(
    spec,
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
  );
  if (Array.isArray(terms) && terms.length > 0) {
    let unknown = false;
    const termMatches = (term: unknown): boolean => {
      const exprs = get(term, "matchExpressions");
      const fields = get(term, "matchFields");
      const all = [
        ...(Array.isArray(exprs) ? exprs.map((e) => matchesRequirement(e, labels[String(get(e, "key"))])) : []),
        ...(Array.isArray(fields)
          ? fields.map((e) =>
              get(e, "key") === "metadata.name"
                ? matchesRequirement(e, typeof nodeName === "string" ? nodeName : undefined)
                : undefined,
            )
          : []),
      ];
      if (all.length === 0) return false; // an empty term matches no node
      if (all.includes(undefined)) unknown = true;
      return all.every((m) => m === true);
    };
    if (!terms.some(termMatches) && !unknown)
      return { runs: false, why: "no term of its required node affinity matches the node" };
  }

  const taintsRaw = get(node, "spec", "taints");
  if (Array.isArray(taintsRaw)) {
    const own = get(spec, "tolerations");
    const tolerations = [
      ...(Array.isArray(own) ? (own.filter(isObj) as Toleration[]) : []),
      ...controllerTolerations(get(spec, "hostNetwork") === true),
    ];
    for (const t of taintsRaw) {
      const key = get(t, "key");
      const effect = get(t, "effect");
      if (typeof key !== "string" || (effect !== "NoSchedule" && effect !== "NoExecute")) continue;
      const value = get(t, "value");
      const taint: Taint = { key, effect, ...(typeof value === "string" ? { value } : {}) };
      if (!tolerations.some((tol) => tolerates(tol, taint))) {
        return {
          runs: false,
          why: `it does not tolerate the node's taint ${key}${taint.value ? `=${taint.value}` : ""}:${effect}`,
        };
      }
    }
  }
  return { runs: true };
}
