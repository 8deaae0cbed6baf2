// The agent's watch cache: one informer for the node's pods (fieldSelector=spec.nodeName=NODE,
// all namespaces) and one for namespaces, each a list and then a watch from the list's
// resourceVersion with bookmarks, feeding a pure Store (internal/agent/cache/store.ts).
//
// - A watch the server closes (its timeoutSeconds) is started again at once from the last
//   resourceVersion (events or bookmarks); one that fails (a dropped connection, a refused or
//   failing request, nothing arriving for too long) is started again after a jittered
//   exponential back-off, capped.
// - 410 Gone (an ERROR event or a 410 answer: the resourceVersion was compacted away) means a
//   relist; the old objects are served until the new list lands and replaces them.
// - While the API server is away the cache keeps serving what it holds.
//
// On top: the PodLookup (internal/agent/cache/lookup.ts), NodeView and CacheStatus (types.ts).
import { CachePodLookup, type CachedResource } from "./lookup.ts";
import { Store, trimNamespace, trimPod } from "./store.ts";
import type { CacheStatus, NodeView, WatchStatus } from "../types.ts";
import type { KubeClient } from "../../kube/client.ts";
import type { Logger } from "../../log/logger.ts";

export interface InformerTiming {
  /** First back-off after a failure (ms); doubles per failure in a row, jittered to 50-100 %. */
  backoffBaseMs: number;
  backoffCapMs: number;
  /** Each watch asks the server to close it after a random time in this range (s). */
  watchSeconds: [number, number];
  listTimeoutMs: number;
}

export const DEFAULT_TIMING: InformerTiming = {
  backoffBaseMs: 500,
  backoffCapMs: 30_000,
  watchSeconds: [300, 600],
  listTimeoutMs: 30_000,
};

/** The jittered exponential back-off after `failures` failures in a row (pure; `random` in [0, 1)). */
export function backoffMs(
  failures: number,
  t: Pick<InformerTiming, "backoffBaseMs" | "backoffCapMs">,
  random = Math.random(),
): number {
  const full = Math.min(t.backoffCapMs, t.backoffBaseMs * 2 ** Math.min(failures, 30));
  return Math.round(full * (0.5 + random / 2));
}

const abortableSleep = (ms: number, signal: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });

type Log = Pick<Logger, "info" | "warn">;

export class Informer implements CachedResource {
  readonly store: Store;
  private synced_ = false;
  private lists = 0;
  private watches = 0;
  private expired = 0;
  private lastError: string | undefined;
  private readonly listeners = new Set<() => void>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly syncWaiters = new Set<() => void>();

  constructor(
    private readonly client: KubeClient,
    private readonly o: {
      resource: string;
      path: string;
      fieldSelector?: string;
      trim: (o: unknown) => unknown;
      timing?: InformerTiming;
      log?: Log;
    },
  ) {
    this.store = new Store(o.trim);
  }

  private get timing(): InformerTiming {
    return this.o.timing ?? DEFAULT_TIMING;
  }

  synced(): boolean {
    return this.synced_;
  }

  get(key: string): unknown | undefined {
    return this.store.get(key);
  }

  /** Resolves once listed (at once when it is). */
  whenSynced(signal?: AbortSignal): Promise<void> {
    if (this.synced_) return Promise.resolve();
    return new Promise((resolve) => {
      const fn = () => {
        this.syncWaiters.delete(fn);
        resolve();
      };
      this.syncWaiters.add(fn);
      signal?.addEventListener("abort", fn, { once: true });
    });
  }

  wait(key: string, accept: (o: unknown) => boolean, ms: number, signal: AbortSignal): Promise<unknown | undefined> {
    const now = this.store.get(key);
    if (now !== undefined && accept(now)) return Promise.resolve(now);
    return new Promise((resolve) => {
      let set = this.waiters.get(key);
      if (!set) this.waiters.set(key, (set = new Set()));
      const finish = (value: unknown | undefined) => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        set!.delete(check);
        if (set!.size === 0 && this.waiters.get(key) === set) this.waiters.delete(key);
        resolve(value);
      };
      const check = () => {
        const o = this.store.get(key);
        if (o !== undefined && accept(o)) finish(o);
      };
      const onAbort = () => finish(undefined);
      const timer = setTimeout(() => finish(undefined), ms);
      signal.addEventListener("abort", onAbort, { once: true });
      set.add(check);
    });
  }

  onChange(fn: () => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  status(): WatchStatus {
    return {
      synced: this.synced_,
      ...(this.store.resourceVersion ? { resourceVersion: this.store.resourceVersion } : {}),
      objects: this.store.size,
      lists: this.lists,
      watchRestarts: Math.max(0, this.watches - 1),
      expired: this.expired,
      ...(this.lastError ? { lastError: this.lastError } : {}),
    };
  }

  private changed(key: string | undefined): void {
    const keys = key === undefined ? [...this.waiters.keys()] : [key];
    for (const k of keys) for (const check of [...(this.waiters.get(k) ?? [])]) check();
    for (const fn of [...this.listeners]) {
      try {
        fn();
      } catch {
        // a listener's failure is its own
      }
    }
  }

  /**
   * A list or watch request. The first list asks for resourceVersion=0, which kube-apiserver
   * serves from its own watch cache (a node agent restarting on every node at once reads no
   * etcd); a relist after 410 asks for the newest data (no resourceVersion), since the server's
   * cache may be behind what this cache already held.
   */
  private query(watch: boolean, fresh = false): string {
    const q = new URLSearchParams();
    if (this.o.fieldSelector) q.set("fieldSelector", this.o.fieldSelector);
    if (!watch && !fresh) q.set("resourceVersion", "0");
    if (watch) {
      const [lo, hi] = this.timing.watchSeconds;
      q.set("watch", "1");
      q.set("resourceVersion", this.store.resourceVersion);
      q.set("allowWatchBookmarks", "true");
      q.set("timeoutSeconds", String(Math.round(lo + Math.random() * (hi - lo))));
    }
    const s = q.toString();
    return s ? `${this.o.path}?${s}` : this.o.path;
  }

  private fail(why: string): void {
    if (this.lastError !== why) this.o.log?.warn(`watch cache (${this.o.resource}): ${why}`);
    this.lastError = why;
  }

  /** Lists and watches until `signal` aborts. */
  async run(signal: AbortSignal): Promise<void> {
    const t = this.timing;
    let failures = 0;
    let needList = true;
    const backoff = () => abortableSleep(backoffMs(failures++, t), signal);
    while (!signal.aborted) {
      if (needList) {
        const a = await this.client.list(this.query(false, this.expired > 0), t.listTimeoutMs, signal);
        if (signal.aborted) break;
        const list =
          a.kind === "object" ? (a.object as { items?: unknown; metadata?: { resourceVersion?: unknown } }) : undefined;
        const rv = list?.metadata?.resourceVersion;
        if (!list || !Array.isArray(list.items) || typeof rv !== "string") {
          this.fail(
            `listing ${this.o.path} failed: ` +
              (a.kind === "status"
                ? `${a.status}${a.message ? ` ${a.message}` : ""}`
                : a.kind === "unreachable"
                  ? a.reason
                  : "not a list"),
          );
          await backoff();
          continue;
        }
        this.lists++;
        this.store.replace(list.items, rv);
        needList = false;
        const first = !this.synced_;
        this.synced_ = true;
        if (first)
          this.o.log?.info(`watch cache (${this.o.resource}): listed ${this.store.size} at resourceVersion ${rv}`);
        for (const fn of [...this.syncWaiters]) fn();
        this.changed(undefined);
      }
      const stop = new AbortController();
      let expired = false;
      let broken: string | undefined;
      const started = performance.now();
      this.watches++;
      const end = await this.client.watch(
        this.query(true),
        (e) => {
          const key =
            e.type === "ADDED" || e.type === "MODIFIED" || e.type === "DELETED" ? keyOfEvent(e.object) : undefined;
          const r = this.store.apply(e);
          if (r === "changed") this.changed(key);
          else if (r === "expired") {
            expired = true;
            stop.abort();
          } else if (e.type === "ERROR") {
            broken = `the watch answered an error: ${JSON.stringify(e.object).slice(0, 200)}`;
            stop.abort();
          }
        },
        AbortSignal.any([signal, stop.signal]),
        (t.watchSeconds[1] + 60) * 1000,
      );
      if (signal.aborted) break;
      const healthy = end.kind !== "status" && (end.events > 0 || performance.now() - started >= 1000);
      if (healthy) failures = 0;
      if (expired || (end.kind === "status" && end.status === 410)) {
        this.expired++;
        this.o.log?.info(
          `watch cache (${this.o.resource}): resourceVersion ${this.store.resourceVersion} ` +
            `expired (410 Gone): listing again, serving the cached objects meanwhile`,
        );
        needList = true;
        continue;
      }
      if (broken) {
        this.fail(broken);
        await backoff();
      } else if (end.kind === "status") {
        this.fail(`watching ${this.o.path} was answered ${end.status}${end.message ? `: ${end.message}` : ""}`);
        await backoff();
      } else if (end.kind === "failed") {
        this.fail(`the watch of ${this.o.path} broke: ${end.reason}`);
        await backoff();
      } else if (!healthy) {
        await backoff(); // closed at once with nothing in it: do not spin
      } else if (this.lastError) {
        this.o.log?.info(
          `watch cache (${this.o.resource}): watching again at resourceVersion ${this.store.resourceVersion}`,
        );
        this.lastError = undefined;
      }
    }
  }
}

function keyOfEvent(o: unknown): string | undefined {
  const m = (o as { metadata?: { name?: unknown; namespace?: unknown } } | undefined)?.metadata;
  if (typeof m?.name !== "string") return undefined;
  return typeof m.namespace === "string" && m.namespace ? `${m.namespace}/${m.name}` : m.name;
}

/** The node's pods and every namespace, watched; the lookup, NodeView and status on top. */
export class WatchCache implements NodeView {
  readonly podInformer: Informer;
  readonly namespaceInformer: Informer;
  readonly lookup: CachePodLookup;

  constructor(
    client: KubeClient,
    o: { nodeName: string; timing?: InformerTiming; log?: Log; watchWaitMs?: number; getTimeoutMs?: number },
  ) {
    const common = { ...(o.timing ? { timing: o.timing } : {}), ...(o.log ? { log: o.log } : {}) };
    this.podInformer = new Informer(client, {
      resource: "pods",
      path: "/api/v1/pods",
      fieldSelector: `spec.nodeName=${o.nodeName}`,
      trim: trimPod,
      ...common,
    });
    this.namespaceInformer = new Informer(client, {
      resource: "namespaces",
      path: "/api/v1/namespaces",
      trim: trimNamespace,
      ...common,
    });
    this.lookup = new CachePodLookup({
      node: o.nodeName,
      pods: this.podInformer,
      namespaces: this.namespaceInformer,
      api: client,
      ...(o.watchWaitMs !== undefined ? { watchWaitMs: o.watchWaitMs } : {}),
      ...(o.getTimeoutMs !== undefined ? { getTimeoutMs: o.getTimeoutMs } : {}),
    });
  }

  /** Runs both informers until `signal` aborts. */
  run(signal: AbortSignal): Promise<void> {
    return Promise.all([this.podInformer.run(signal), this.namespaceInformer.run(signal)]).then(() => undefined);
  }

  synced(): boolean {
    return this.podInformer.synced() && this.namespaceInformer.synced();
  }

  pods(): readonly unknown[] {
    return this.podInformer.store.values();
  }

  namespace(name: string): unknown | undefined {
    return this.namespaceInformer.get(name);
  }

  onChange(fn: () => void): () => void {
    const a = this.podInformer.onChange(fn);
    const b = this.namespaceInformer.onChange(fn);
    return () => {
      a();
      b();
    };
  }

  status(): CacheStatus {
    return {
      pods: this.podInformer.status(),
      namespaces: this.namespaceInformer.status(),
      lookups: { ...this.lookup.counts },
    };
  }
}
