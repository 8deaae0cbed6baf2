// The agent's answer to "which pod is this?" on top of the watch cache (PodLookup, types.ts):
//
// - a cached pod whose UID matches (or no UID asked) is answered at once, from the cache;
// - a pod the cache does not hold yet (just bound to the node) gets one short wait for the watch
//   (AGENT_WATCH_WAIT_MS), then ONE request by the agent (AGENT_GET_TIMEOUT_MS), shared by every
//   ask for the same pod meanwhile;
// - a cached pod with another UID is never answered from the cache: the request decides (that UID
//   in the API: answered; otherwise 404, code 106: deleted and created again under the same name);
// - the namespace comes from the namespaces' cache, or one shared GET when it is not there.
//
// Only this node's pods, ever: the cache holds nothing else (its list and watch select
// spec.nodeName), and the agent's own request is a list of the pod's namespace selecting the
// pod's name AND this node (kube-apiserver reads a metadata.name selector as one key), never a
// GET by name, which would fetch a pod of any node with the agent's credentials. A pod of
// another node is answered 404 (code 106), as a missing one: to this node it does not exist.
//
// The cache and the API client come in as interfaces; internal/agent/cache/watch-cache.ts wires them.
import { Code } from "../../cni/spec.ts";
import { AGENT_GET_TIMEOUT_MS, AGENT_WATCH_WAIT_MS } from "../../wire/protocol.ts";
import type { ApiAnswer } from "../../kube/client.ts";
import { keyOf, uidOf } from "./store.ts";
import type { LookupResult, PodLookup } from "../types.ts";

/** One resource of the watch cache, as the lookup reads it. */
export interface CachedResource {
  /** Listed once and watching (a relist keeps serving the old data). */
  synced(): boolean;
  get(key: string): unknown | undefined;
  /** Resolves with the object once the watch delivers one under `key` that `accept`s, or undefined after `ms`. */
  wait(key: string, accept: (o: unknown) => boolean, ms: number, signal: AbortSignal): Promise<unknown | undefined>;
}

export interface LookupApi {
  server: string;
  get(path: string, timeoutMs: number, signal?: AbortSignal): Promise<ApiAnswer>;
}

export interface LookupCounts {
  cache: number;
  api: number;
  failed: number;
}

/** The list that finds pod NAMESPACE/NAME only when it is bound to `node`. */
export const podOfNodePath = (namespace: string, name: string, node: string) => {
  const selector = encodeURIComponent(`metadata.name=${name},spec.nodeName=${node}`);
  return `/api/v1/namespaces/${namespace}/pods?fieldSelector=${selector}`;
};
const namespacePath = (name: string) => `/api/v1/namespaces/${name}`;

function failed(status: 404 | 503, msg: string, details: string): LookupResult {
  return { ok: false, status, error: { code: status === 404 ? Code.PodNotFound : Code.TryAgainLater, msg, details } };
}

/** Rejects when `signal` aborts, so one asker can give up on a GET others still wait for. */
function orAbort<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason ?? new Error("aborted"));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason instanceof Error ? signal.reason : new Error("the lookup was given up"));
    signal.addEventListener("abort", onAbort, { once: true });
    p.then(resolve, reject).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

const nodeOf = (o: unknown): unknown => (o as { spec?: { nodeName?: unknown } } | undefined)?.spec?.nodeName;

export class CachePodLookup implements PodLookup {
  readonly counts: LookupCounts = { cache: 0, api: 0, failed: 0 };
  private readonly inflight = new Map<string, Promise<ApiAnswer>>();

  constructor(
    private readonly d: {
      /** This node: the only node whose pods are answered. */
      node: string;
      pods: CachedResource;
      namespaces: CachedResource;
      api: LookupApi;
      watchWaitMs?: number;
      getTimeoutMs?: number;
    },
  ) {}

  /** One GET per path at a time, whoever asks; bounded by the GET timeout, not by any one asker. */
  private sharedGet(path: string): Promise<ApiAnswer> {
    let p = this.inflight.get(path);
    if (!p) {
      p = this.d.api.get(path, this.d.getTimeoutMs ?? AGENT_GET_TIMEOUT_MS).finally(() => this.inflight.delete(path));
      this.inflight.set(path, p);
    }
    return p;
  }

  async lookup(namespace: string, name: string, uid: string | undefined, signal: AbortSignal): Promise<LookupResult> {
    const r = await this.answer(namespace, name, uid, signal);
    if (r.ok) this.counts[r.source]++;
    else this.counts.failed++;
    return r;
  }

  private async answer(
    namespace: string,
    name: string,
    uid: string | undefined,
    signal: AbortSignal,
  ): Promise<LookupResult> {
    const key = `${namespace}/${name}`;
    const what = `pod ${key}`;
    const here = (o: unknown) => nodeOf(o) === this.d.node;
    const accept = (o: unknown) => here(o) && (uid === undefined || uidOf(o) === uid);
    let pod = this.d.pods.get(key);
    let source: "cache" | "api" = "cache";
    if (pod !== undefined && !accept(pod)) {
      pod = undefined; // another UID: never from the cache
    } else if (pod === undefined && this.d.pods.synced()) {
      pod = await this.d.pods.wait(key, accept, this.d.watchWaitMs ?? AGENT_WATCH_WAIT_MS, signal);
    }
    const nsCached = this.d.namespaces.get(namespace);
    const nsAnswer = nsCached === undefined ? this.sharedGet(namespacePath(namespace)) : undefined;
    if (pod === undefined) {
      source = "api";
      const a = await orAbort(this.sharedGet(podOfNodePath(namespace, name, this.d.node)), signal);
      const bad = this.judge(a, what);
      if (bad) return bad;
      const items = (a as { object: { items?: unknown } }).object.items;
      if (!Array.isArray(items)) {
        const why = `the API server ${this.d.api.server} answered something that is not a list for ${what}`;
        return failed(503, "the agent cannot read the pod", why);
      }
      // The selector said so; the answer is checked all the same.
      pod = items.find((o) => keyOf(o) === key && here(o));
      if (pod === undefined) {
        const why = `${what} does not exist on node ${this.d.node} (the agent's list on ${this.d.api.server})`;
        return failed(404, "not found in the API (404)", why);
      }
      if (!accept(pod)) {
        return failed(
          404,
          "not found in the API (404)",
          `${what} has UID ${uidOf(pod) ?? "(none)"} on ${this.d.api.server}, ` +
            `not ${uid}: it was deleted and created again`,
        );
      }
    }
    let ns = nsCached;
    if (nsAnswer) {
      const a = await orAbort(nsAnswer, signal);
      const bad = this.judge(a, `namespace ${namespace}`);
      if (bad) return bad;
      ns = (a as { object: unknown }).object;
      source = "api";
    }
    return { ok: true, pod, namespace: ns, source };
  }

  private judge(a: ApiAnswer, which: string): LookupResult | undefined {
    if (a.kind === "object") return undefined;
    if (a.kind === "status" && a.status === 404)
      return failed(
        404,
        "not found in the API (404)",
        `${which} does not exist on ${this.d.api.server} (the agent's GET)`,
      );
    const why =
      a.kind === "status" ? `answered ${a.status}${a.message ? `: ${a.message}` : ""}` : `did not answer: ${a.reason}`;
    return failed(503, "the agent cannot read the pod", `the API server ${this.d.api.server} ${why} for ${which}`);
  }
}
