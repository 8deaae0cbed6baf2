// What the node agent's parts offer each other: the watch cache and pod lookup (fed by list+watch
// of the node's pods and of namespaces) on one side, the socket server, /metrics and /status on
// the other.
import type { AgentError } from "./protocol.ts";

export type LookupResult =
  | { ok: true; pod: unknown; namespace: unknown; source: "cache" | "api" }
  | { ok: false; status: 404 | 503; error: AgentError };

/**
 * Answers the plugin's question "which pod is this?". A cached pod whose UID matches (or no UID
 * asked) is answered at once; a pod the cache does not hold yet gets one short wait for the
 * watch, then one GET, shared by concurrent asks for the same pod; a cached pod with another
 * UID is never answered from the cache.
 */
export interface PodLookup {
  lookup(namespace: string, name: string, uid: string | undefined, signal: AbortSignal): Promise<LookupResult>;
}

/** One list+watch (pods of this node, or namespaces). */
export interface WatchStatus {
  /** Listed once and watching (or re-listing after a 410 with the old data still served). */
  synced: boolean;
  resourceVersion?: string;
  objects: number;
  lists: number;
  /** Watches (re)started after the first. */
  watchRestarts: number;
  /** 410 Gone answers that forced a relist. */
  expired: number;
  lastError?: string;
}

export interface CacheStatus {
  pods: WatchStatus;
  namespaces: WatchStatus;
  /** Lookups answered from the cache, by the agent's own GET, and not at all. */
  lookups: { cache: number; api: number; failed: number };
}
