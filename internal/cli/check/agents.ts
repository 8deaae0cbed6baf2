// `meshcnictl check`, node by node: each meshcni-node pod's /status (internal/agent/observe/status.ts
// buildStatus), fetched through the API server's pod proxy, read defensively (agents older
// than the watch cache or repair lack those members), and judged. Reading and judging are
// pure; fetchAgentStatuses asks through the injected ApiClient.
import type { CheckResult } from "./result.ts";
import type { ApiClient, HttpAnswer } from "../context.ts";

type Json = Record<string, unknown>;
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);
const num = (v: unknown): number => (typeof v === "number" && Number.isFinite(v) ? v : 0);

/** One part of the installation as /status names it (chain, binary, kubeconfig). */
export interface PartView {
  current: boolean;
  path?: string;
  file?: string;
  problem?: string;
  /** The binary's: what C library the host has (the plugin brings its own), or why the check was skipped. */
  hostCheck?: string;
}

/** The plugin's kubeconfig: with the token's account and expiry from an agent that gives the plugin its own account. */
export interface KubeconfigView extends PartView {
  token?: { account: string; expiresAt?: string; expired: boolean };
}

/** A pod the plugin handled on the node: one record per sandbox. */
export interface HandledPod {
  namespace: string;
  name: string;
  uid?: string;
  decision: "meshed" | "skipped";
  reason: string;
  containerId?: string;
  /** The time of the ADD (matched against the pod's current sandbox). */
  time?: string;
}

export interface BypassingView {
  namespace: string;
  name: string;
  uid?: string;
  reason: string;
  action: string;
  since?: string;
  /** The API server's message when a PodDisruptionBudget refused the eviction, and the next try. */
  refusal?: string;
}

export interface UnverifiedView {
  namespace: string;
  name: string;
  uid?: string;
  why: string;
}

export type CacheView =
  | { kind: "synced"; objects: number }
  | { kind: "syncing"; detail: string }
  | { kind: "none"; note: string };

/** What meshcnictl reads from one agent's /status; members an older agent lacks are undefined. */
export interface AgentView {
  version?: string;
  node?: string;
  problems: string[];
  chain?: PartView;
  binary?: PartView;
  kubeconfig?: KubeconfigView;
  cache: CacheView;
  pods?: { handled: number; meshed: number; skipped: number; containers: HandledPod[] };
  /** `unverified` and `refusals` are undefined for agents older than evidence-only repair. */
  repair?: {
    mode: string;
    active: boolean;
    bypassing: BypassingView[];
    unverified?: UnverifiedView[];
    repaired: number;
    refusals?: number;
  };
  /** Undefined for an agent that does not apply rules (or is older than verification). */
  verify?: {
    periodSeconds: number;
    runs: number;
    rewritten: number;
    /** Pods whose latest check found rules missing that were not written back (reported, or a failed write). */
    open: { namespace: string; name: string; why: string; action: string }[];
  };
}

function part(v: unknown): PartView | undefined {
  if (!isObj(v) || typeof v.current !== "boolean") return undefined;
  const p: PartView = { current: v.current };
  for (const k of ["path", "file", "problem", "hostCheck"] as const) {
    const s = str(v[k]);
    if (s !== undefined) p[k] = s;
  }
  return p;
}

function cacheView(v: unknown): CacheView {
  if (!isObj(v)) return { kind: "none", note: "/status has no cache member (an agent older than the watch cache)" };
  const watches = [
    ["pods", v.pods],
    ["namespaces", v.namespaces],
  ] as const;
  if (!watches.every(([, w]) => isObj(w))) {
    return { kind: "none", note: str(v.note) ?? "no watch cache: the agent answers each lookup with its own GET" };
  }
  const behind = watches.filter(([, w]) => (w as Json).synced !== true);
  if (behind.length === 0)
    return { kind: "synced", objects: watches.reduce((n, [, w]) => n + num((w as Json).objects), 0) };
  return {
    kind: "syncing",
    detail: behind
      .map(([what, w]) => {
        const err = str((w as Json).lastError);
        return `${what} not in sync${err ? ` (last error: ${err})` : ""}`;
      })
      .join("; "),
  };
}

function handled(v: unknown): HandledPod | undefined {
  if (!isObj(v)) return undefined;
  const namespace = str(v.namespace);
  const name = str(v.name);
  if (!namespace || !name || (v.decision !== "meshed" && v.decision !== "skipped")) return undefined;
  const h: HandledPod = { namespace, name, decision: v.decision, reason: str(v.reason) ?? "" };
  const uid = str(v.uid);
  if (uid) h.uid = uid;
  const containerId = str(v.containerId);
  if (containerId) h.containerId = containerId;
  const time = str(v.time);
  if (time) h.time = time;
  return h;
}

function bypassing(v: unknown): BypassingView | undefined {
  if (!isObj(v)) return undefined;
  const namespace = str(v.namespace);
  const name = str(v.name);
  if (!namespace || !name) return undefined;
  const b: BypassingView = {
    namespace,
    name,
    reason: str(v.reason) ?? "no reason given",
    action: str(v.action) ?? "reported",
  };
  const uid = str(v.uid);
  if (uid) b.uid = uid;
  const since = str(v.since);
  if (since) b.since = since;
  const refusal = isObj(v.refusal) ? v.refusal : {};
  const message = str(refusal.message);
  const retryAt = str(refusal.retryAt);
  if (message) b.refusal = `${message}${retryAt ? ` (next try ${retryAt})` : ""}`;
  return b;
}

function unverified(v: unknown): UnverifiedView | undefined {
  if (!isObj(v)) return undefined;
  const namespace = str(v.namespace);
  const name = str(v.name);
  if (!namespace || !name) return undefined;
  const u: UnverifiedView = { namespace, name, why: str(v.why) ?? "no reason given" };
  const uid = str(v.uid);
  if (uid) u.uid = uid;
  return u;
}

/** Reads an agent's /status document; undefined when it is not a JSON object. */
export function parseAgentStatus(doc: unknown): AgentView | undefined {
  if (!isObj(doc)) return undefined;
  const view: AgentView = {
    problems: Array.isArray(doc.problems) ? doc.problems.filter((p): p is string => typeof p === "string") : [],
    cache: cacheView(doc.cache),
  };
  const version = str(doc.version);
  if (version) view.version = version;
  const node = str(doc.node);
  if (node) view.node = node;
  const chain = part(doc.chain);
  if (chain) view.chain = chain;
  const binary = part(doc.binary);
  if (binary) view.binary = binary;
  const kubeconfig: KubeconfigView | undefined = part(doc.kubeconfig);
  if (kubeconfig) {
    const t = isObj(doc.kubeconfig) ? doc.kubeconfig.token : undefined;
    const account = isObj(t) ? str(t.account) : undefined;
    if (isObj(t) && account) {
      const expiresAt = str(t.expiresAt);
      kubeconfig.token = { account, expired: t.expired === true, ...(expiresAt ? { expiresAt } : {}) };
    }
    view.kubeconfig = kubeconfig;
  }
  if (isObj(doc.pods)) {
    const containers = Array.isArray(doc.pods.containers)
      ? doc.pods.containers.map(handled).filter((h): h is HandledPod => h !== undefined)
      : [];
    view.pods = {
      handled: num(doc.pods.handled),
      meshed: num(doc.pods.meshed),
      skipped: num(doc.pods.skipped),
      containers,
    };
  }
  if (isObj(doc.verify)) {
    const vf = doc.verify;
    view.verify = {
      periodSeconds: num(vf.periodSeconds),
      runs: num(vf.runs),
      rewritten: num(vf.rewritten),
      open: (Array.isArray(vf.findings) ? vf.findings : [])
        .filter(isObj)
        .filter((f) => f.verdict === "missing" && (f.action === "reported" || f.action === "failed"))
        .map((f) => ({
          namespace: str(f.namespace) ?? "?",
          name: str(f.name) ?? "?",
          why: str(f.why) ?? "",
          action: str(f.action) ?? "",
        })),
    };
  }
  if (isObj(doc.repair)) {
    const r = doc.repair;
    view.repair = {
      mode: str(r.mode) ?? "unknown",
      active: r.active === true,
      bypassing: Array.isArray(r.bypassing)
        ? r.bypassing.map(bypassing).filter((b): b is BypassingView => b !== undefined)
        : [],
      ...(Array.isArray(r.unverified)
        ? { unverified: r.unverified.map(unverified).filter((u): u is UnverifiedView => u !== undefined) }
        : {}),
      repaired: num(r.repaired),
      ...(typeof r.refusals === "number" ? { refusals: num(r.refusals) } : {}),
    };
  }
  return view;
}

/** One meshcni-node pod, as the pod list names it. */
export interface AgentPod {
  pod: string;
  node: string;
  /** The container port named "health", when the pod declares it. */
  port?: number;
  /** Why the pod cannot answer (not running, no address), when it cannot. */
  notRunning?: string;
}

/** What came back from one agent: its /status, or why there is none. */
export type AgentAnswer = { agent: AgentPod; view: AgentView } | { agent: AgentPod; unreachable: string };

/** The meshcni-node pods of a PodList, with their node and health port. */
export function agentPods(list: unknown): AgentPod[] {
  const items = isObj(list) && Array.isArray(list.items) ? list.items.filter(isObj) : [];
  const out: AgentPod[] = [];
  for (const p of items) {
    const meta = isObj(p.metadata) ? p.metadata : {};
    const spec = isObj(p.spec) ? p.spec : {};
    const st = isObj(p.status) ? p.status : {};
    const a: AgentPod = { pod: str(meta.name) ?? "?", node: str(spec.nodeName) ?? "" };
    const containers = Array.isArray(spec.containers) ? spec.containers.filter(isObj) : [];
    for (const c of containers) {
      for (const port of Array.isArray(c.ports) ? c.ports.filter(isObj) : []) {
        if (port.name === "health" && typeof port.containerPort === "number") a.port = port.containerPort;
      }
    }
    if (!a.node) a.notRunning = "not scheduled to a node yet";
    else if (st.phase !== "Running") a.notRunning = `the pod is ${str(st.phase) ?? "not running"}`;
    else if (isObj(meta) && meta.deletionTimestamp) a.notRunning = "the pod is being deleted";
    out.push(a);
  }
  return out.sort((x, y) => x.node.localeCompare(y.node) || x.pod.localeCompare(y.pod));
}

/** The pod proxy path to an agent's /status. */
export function statusPath(namespace: string, a: AgentPod): string {
  return `/api/v1/namespaces/${namespace}/pods/${a.pod}:${a.port}/proxy/status`;
}

function proxyFailure(a: HttpAnswer): string {
  if (a.status === 0) return a.body;
  let message = a.body.trim().slice(0, 300);
  try {
    const s = JSON.parse(a.body);
    if (isObj(s) && typeof s.message === "string") message = s.message;
  } catch {
    // not a Status object: the agent's own answer, or a proxy's page
  }
  return `${a.status}${message ? `: ${message}` : ""}`;
}

/** How many agents are asked at once: a large cluster must not flood its API server. */
export const PROXY_CONCURRENCY = 16;

/** Maps with at most `limit` calls in flight; results in the input's order. */
async function mapLimited<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/** Asks every agent for its /status through the pod proxy, PROXY_CONCURRENCY at a time. */
export async function fetchAgentStatuses(
  api: ApiClient,
  namespace: string,
  agents: readonly AgentPod[],
): Promise<AgentAnswer[]> {
  return mapLimited(agents, PROXY_CONCURRENCY, async (agent): Promise<AgentAnswer> => {
    if (agent.notRunning) return { agent, unreachable: agent.notRunning };
    if (agent.port === undefined)
      return {
        agent,
        unreachable: "the pod declares no container port named health (a DaemonSet from before /status?)",
      };
    let a: HttpAnswer;
    try {
      a = await api.get(statusPath(namespace, agent));
    } catch (e) {
      a = { status: 0, body: (e as Error).message };
    }
    if (a.status === 404 && !a.body.includes('"kind":"Status"')) {
      return { agent, unreachable: "the agent answers 404 for /status (an agent older than /status)" };
    }
    if (a.status !== 200) return { agent, unreachable: `the pod proxy answered ${proxyFailure(a)}` };
    let doc: unknown;
    try {
      doc = JSON.parse(a.body);
    } catch {
      return { agent, unreachable: `/status is not JSON: ${a.body.slice(0, 80)}` };
    }
    const view = parseAgentStatus(doc);
    return view ? { agent, view } : { agent, unreachable: "/status is not a JSON object" };
  });
}

// ---- judging ------------------------------------------------------------------------------------

const plural = (n: number, one: string, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** The check results for one node, from its agent's answer. `cliVersion` is meshcnictl's own. */
export function judgeAgent(answer: AgentAnswer, cliVersion: string, namespace: string): CheckResult[] {
  const { agent } = answer;
  const category = `node ${agent.node || "(none)"}`;
  const r = (name: string, ok: boolean, more: Partial<CheckResult> = {}): CheckResult => ({
    category,
    name,
    ok,
    node: agent.node,
    ...more,
  });
  if ("unreachable" in answer) {
    const forbidden = answer.unreachable.startsWith("the pod proxy answered 403");
    return [
      r("the agent answers /status", false, {
        detail: `${agent.pod}: ${answer.unreachable}`,
        hint: forbidden
          ? `your kubeconfig's user needs get on pods/proxy in namespace ${namespace} to read the agents' /status`
          : `kubectl -n ${namespace} describe pod ${agent.pod}; kubectl -n ${namespace} logs ${agent.pod}`,
      }),
    ];
  }
  const v = answer.view;
  const out: CheckResult[] = [];
  out.push(
    r("the agent answers /status", true, { detail: `${agent.pod}${v.version ? `, meshcni ${v.version}` : ""}` }),
  );

  const partCheck = (name: string, p: PartView | undefined, hint: string, oldAgent: string) => {
    if (!p) return r(name, false, { warning: true, detail: oldAgent });
    if (p.current) return r(name, true, { detail: p.file ?? p.path ?? "" });
    return r(name, false, { detail: p.problem ?? `${p.file ?? p.path ?? "it"} is not current`, hint });
  };
  out.push(
    partCheck(
      "meshcni is chained in the runtime's CNI configuration",
      v.chain,
      `the agent re-chains on its own; if this stays, kubectl -n ${namespace} logs ${agent.pod} says why`,
      "/status does not say (an older agent)",
    ),
  );
  out.push(
    partCheck(
      "the plugin binary on the node is current",
      v.binary,
      `the agent reinstalls it on its own; if this stays, kubectl -n ${namespace} logs ${agent.pod} says why`,
      "/status does not say (an older agent)",
    ),
  );
  // A host the check could not judge got the plugin unchecked: a warning, with the reason.
  const hostCheck = v.binary?.hostCheck;
  const hostName = "the host check judged the plugin binary";
  if (hostCheck?.startsWith("host check skipped")) {
    out.push(
      r(hostName, false, {
        warning: true,
        detail: hostCheck,
        hint:
          'the plugin was installed unchecked; docs/operations.md, "Which hosts run the plugin", ' +
          "says what the agent sees of the host",
      }),
    );
  } else if (hostCheck?.startsWith("this host can run")) out.push(r(hostName, true, { detail: hostCheck }));

  const tokenName = "the plugin's kubeconfig holds a current token of its own account";
  const k = v.kubeconfig;
  if (!k) out.push(r(tokenName, false, { warning: true, detail: "/status does not say (an older agent)" }));
  else if (!k.token) {
    out.push(
      r(tokenName, false, {
        warning: true,
        detail:
          `${k.path ?? "the kubeconfig"}: the agent names no account for its token (an agent older than the ` +
          "plugin's own account writes its own token there, which may delete pods)",
        hint: "upgrade with the same release: meshcnictl install-cni | kubectl apply -f -",
      }),
    );
  } else if (k.current) {
    const until = k.token.expiresAt ? `, valid until ${k.token.expiresAt}` : "";
    out.push(r(tokenName, true, { detail: `${k.token.account}${until}` }));
  } else {
    out.push(
      r(tokenName, false, {
        detail: k.problem ?? `${k.path ?? "the kubeconfig"} is not current`,
        hint:
          "until it is, the plugin's fallback fails closed when the agent does not answer; the agent asks for a " +
          `token on its own and kubectl -n ${namespace} logs ${agent.pod} says why it gets none ` +
          "(a 403: its Role lacks create on serviceaccounts/token)",
      }),
    );
  }

  const versionName = "the node runs the same meshcni version as meshcnictl";
  if (!v.version) out.push(r(versionName, false, { warning: true, detail: "/status names no version" }));
  else if (v.version === cliVersion) out.push(r(versionName, true, { detail: v.version }));
  else {
    out.push(
      r(versionName, false, {
        warning: true,
        detail: `node: meshcni ${v.version}, meshcnictl: ${cliVersion}`,
        hint:
          "upgrade with the same release: meshcnictl install-cni | " +
          "kubectl apply -f - (or use the meshcnictl of the installed release)",
      }),
    );
  }

  const cacheName = "the agent's watch cache is in sync";
  if (v.cache.kind === "synced") out.push(r(cacheName, true, { detail: plural(v.cache.objects, "object") }));
  else if (v.cache.kind === "syncing") {
    out.push(
      r(cacheName, false, {
        detail: v.cache.detail,
        hint:
          `until it is, lookups go to the API server one by one; ` +
          `kubectl -n ${namespace} logs ${agent.pod} says why`,
      }),
    );
  } else out.push(r(cacheName, false, { warning: true, detail: v.cache.note }));

  if (v.pods) {
    out.push(
      r("pods the plugin handled on this node", true, {
        detail: `${plural(v.pods.handled, "pod")}: ${v.pods.meshed} meshed, ${v.pods.skipped} skipped`,
      }),
    );
  }

  const bypassName = "no meshed pod bypasses the mesh";
  if (!v.repair) {
    out.push(
      r(bypassName, false, {
        warning: true,
        detail: "the agent does not report bypassing pods (it is older than repair)",
        hint: "meshcnictl check --pods looks for them from the API server's side",
      }),
    );
  } else {
    const rep = v.repair;
    const refusals = rep.refusals ? `, ${plural(rep.refusals, "eviction")} refused` : "";
    const state = `repair ${rep.mode}${rep.active ? "" : ", not active yet"}, ${rep.repaired} repaired${refusals}`;
    const acted = (b: BypassingView) => b.action === "deleted" || b.action === "evicted" || b.action === "rewritten";
    const open = rep.bypassing.filter((b) => !acted(b));
    const lines = rep.bypassing.map((b) => {
      const when = `${b.since ? ` since ${b.since}` : ""}${b.refusal ? `; refused: ${b.refusal}` : ""}`;
      return `${b.namespace}/${b.name}: ${b.reason} (${b.action}${when})`;
    });
    if (rep.bypassing.length === 0) out.push(r(bypassName, true, { detail: state }));
    else if (open.length === 0) {
      const just =
        rep.mode === "in-place"
          ? `${state}; their rules just written back in place (evicted where the agent could not reach them):`
          : `${state}; just ${rep.mode === "delete" ? "deleted" : "evicted"}, their controllers recreate them:`;
      out.push(r(bypassName, false, { warning: true, detail: [just, ...lines].join("\n") }));
    } else {
      out.push(
        r(bypassName, false, {
          detail: [
            `${plural(open.length, "pod")} ${open.length === 1 ? "runs" : "run"} without meshcni's rules (${state}):`,
            ...lines,
          ].join("\n"),
          hint:
            rep.mode === "off"
              ? "delete them (kubectl delete pod): their controllers recreate " +
                "them with meshcni's rules; or run the agent with --repair in-place or evict"
              : open.some((b) => b.action === "refused")
                ? "the API server refused the eviction (429: a PodDisruptionBudget, " +
                  "or its rate limits): the agent tries again " +
                  "later; kubectl get pdb -A shows the budgets"
                : "the agent evicts them once its cache is in sync and " +
                  "its grace period is over; their controllers recreate them",
        }),
      );
    }
    if (v.verify) {
      const vf = v.verify;
      const verifyName = "meshed pods' rules are in their namespaces";
      const every = vf.periodSeconds > 0 ? `checked every ${vf.periodSeconds} s` : "checked after each ADD";
      const state = `${every}, ${plural(vf.runs, "check")}, ${vf.rewritten} written back in place`;
      if (vf.open.length === 0) out.push(r(verifyName, true, { detail: state }));
      else
        out.push(
          r(verifyName, false, {
            detail: [
              `${plural(vf.open.length, "pod")} without meshcni's rules in ${vf.open.length === 1 ? "its" : "their"} namespace (${state}):`,
              ...vf.open.map((f) => `${f.namespace}/${f.name}: ${f.why} (${f.action})`),
            ].join("\n"),
            hint: "the agent writes them back with --repair in-place; kubectl delete pod recreates them with meshcni's rules",
          }),
        );
    }
    if (rep.unverified) {
      const unverifiedName = "every meshed pod has a record of meshcni's ADD";
      if (rep.unverified.length === 0) {
        out.push(r(unverifiedName, true, { detail: `${plural(v.pods?.handled ?? 0, "record")} on this node` }));
      } else {
        out.push(
          r(unverifiedName, false, {
            warning: true,
            detail: [
              `${plural(rep.unverified.length, "pod")} unverified (reported, never removed for that):`,
              ...rep.unverified.map((u) => `${u.namespace}/${u.name}: ${u.why}`),
            ].join("\n"),
            hint:
              "records go with a wiped state folder or --uninstall " +
              "(and an older meshcni's removal); pods that started " +
              "before meshcni was chained have none: restart their workloads if they should be meshed",
          }),
        );
      }
    }
  }
  return out;
}
