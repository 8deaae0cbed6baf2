// What the node agent's parts offer each other: the watch cache and pod lookup (fed by list+watch
// of the node's pods and of namespaces) on one side, the socket server, /metrics and /status on
// the other.
import type { AgentError } from "../wire/protocol.ts";

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

/**
 * The node as the watch cache sees it: what repair (and /status) read. The cache implements it;
 * repair's tests use an in-memory one. Objects are as the API server sent them.
 */
export interface NodeView {
  /** True once both the pods and the namespaces have been listed and are being watched. */
  synced(): boolean;
  /** Every pod of this node the cache holds. */
  pods(): readonly unknown[];
  /** A namespace by name, when the cache holds it. */
  namespace(name: string): unknown | undefined;
  /** Calls `fn` after each change the watch delivers (and after a relist); returns an unsubscribe. */
  onChange(fn: () => void): () => void;
}

/** A pod the profile redirects with positive evidence that it runs without the mesh's redirect. */
export interface BypassingPod {
  namespace: string;
  name: string;
  uid: string;
  /** e.g. "its linkerd-network-validator init container's latest run failed (exit code 95): ...". */
  reason: string;
  /**
   * What the agent did: "evicted" or "deleted"; "rewritten" (--repair in-place: its rules written
   * back in its namespace); "reported" (--repair off); "waiting" (the grace
   * period, the confirmation delay, the rate limit, a failed try); "refused" (a PodDisruptionBudget
   * refused the eviction: tried again at `refusal.retryAt`).
   */
  action: "evicted" | "deleted" | "rewritten" | "reported" | "waiting" | "refused";
  /** ISO time the agent first saw the evidence. */
  since: string;
  /** The last refusal of its eviction (429): the API server's message and when the agent tries again. */
  refusal?: { message: string; retryAt: string };
}

/** A meshed pod with a sandbox and no record of the ADD of that sandbox: reported, never acted on. */
export interface UnverifiedPod {
  namespace: string;
  name: string;
  uid: string;
  why: string;
}

/** The `repair` member of /status; `meshcnictl check` reads it through the pod proxy. */
export interface RepairStatus {
  mode: "evict" | "delete" | "off" | "in-place";
  /** False until the cache is in sync and the chain has been in place for the grace period. */
  active: boolean;
  /** Why it is not active yet. */
  waitingFor?: string;
  bypassing: BypassingPod[];
  unverified: UnverifiedPod[];
  /** Pods evicted or deleted since the agent started. */
  repaired: number;
  /** Evictions a PodDisruptionBudget refused (429) since the agent started. */
  refusals: number;
}

/** One pod's last finding that was not "ok". */
export interface VerifyFinding {
  namespace: string;
  name: string;
  uid: string;
  via: "record" | "address";
  /** missing: rules missing or altered; unknown: the agent could not tell. */
  verdict: "missing" | "unknown";
  why: string;
  /** What the agent did: rewritten, failed (the write failed), reported (not in-place), none. */
  action: "rewritten" | "failed" | "reported" | "none";
  at: string;
}

export interface VerifyStatus {
  periodSeconds: number;
  mode: "in-place" | "report";
  /** ISO time the last full period ended, and what it saw. */
  lastRound?: { at: string; checked: number; missing: number; rewritten: number; unknown: number; gone: number };
  /** Since the agent started. */
  runs: number;
  missing: number;
  rewritten: number;
  failures: number;
  /** Meshed pods found neither by a record nor by address (unverifiable; never removed for that). */
  unreachable: { namespace: string; name: string; uid: string; why: string }[];
  findings: VerifyFinding[];
}
