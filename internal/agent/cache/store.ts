// The watch cache's store: the objects of one list+watch by key (NAMESPACE/NAME for pods, NAME
// for namespaces) and the resourceVersion they are at. Pure: a list replaces everything, each
// watch event changes one object. Objects are trimmed to what the mesh profiles and repair read,
// so 110 pods and 1,000 namespaces stay small.

export interface Meta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
}

const metaOf = (o: unknown): Meta => {
  const m = (o as { metadata?: unknown } | null | undefined)?.metadata;
  return typeof m === "object" && m !== null ? (m as Meta) : {};
};

export const uidOf = (o: unknown): string | undefined => {
  const uid = metaOf(o).uid;
  return typeof uid === "string" ? uid : undefined;
};

/** NAMESPACE/NAME, or NAME for a cluster-scoped object; undefined when the object has no name. */
export function keyOf(o: unknown): string | undefined {
  const m = metaOf(o);
  if (typeof m.name !== "string" || m.name === "") return undefined;
  return typeof m.namespace === "string" && m.namespace !== "" ? `${m.namespace}/${m.name}` : m.name;
}

function pick(o: unknown, keys: readonly string[]): Record<string, unknown> | undefined {
  if (typeof o !== "object" || o === null || Array.isArray(o)) return undefined;
  const out: Record<string, unknown> = {};
  for (const k of keys) {
    const val = (o as Record<string, unknown>)[k];
    if (val !== undefined) out[k] = val;
  }
  return out;
}

/** What of the metadata anyone reads: managedFields and ownerReferences are most of its bytes. */
const META_KEYS = [
  "name",
  "namespace",
  "uid",
  "resourceVersion",
  "labels",
  "annotations",
  "creationTimestamp",
  "deletionTimestamp",
  "generateName",
] as const;
/** What the profiles read of a container (internal/kube/objects.ts), and what repair names. */
const CONTAINER_KEYS = [
  "name",
  "image",
  "command",
  "args",
  "env",
  "ports",
  "restartPolicy",
  "securityContext",
] as const;
const SPEC_KEYS = ["nodeName", "hostNetwork", "securityContext", "serviceAccountName"] as const;
const STATUS_KEYS = [
  "phase",
  "conditions",
  "containerStatuses",
  "initContainerStatuses",
  "podIP",
  "podIPs",
  "startTime",
] as const;

const containers = (list: unknown) => (Array.isArray(list) ? list.map((c) => pick(c, CONTAINER_KEYS) ?? c) : list);

/** A pod as the cache keeps it: metadata, the containers' fields the profiles read, the status repair reads. */
export function trimPod(pod: unknown): unknown {
  const p = pod as {
    apiVersion?: unknown;
    kind?: unknown;
    metadata?: unknown;
    spec?: Record<string, unknown>;
    status?: unknown;
  };
  if (typeof p !== "object" || p === null) return pod;
  const spec = pick(p.spec, SPEC_KEYS) ?? {};
  if (p.spec?.containers !== undefined) spec.containers = containers(p.spec.containers);
  if (p.spec?.initContainers !== undefined) spec.initContainers = containers(p.spec.initContainers);
  const out: Record<string, unknown> = {
    apiVersion: p.apiVersion ?? "v1",
    kind: p.kind ?? "Pod",
    metadata: pick(p.metadata, META_KEYS) ?? {},
    spec,
  };
  const status = pick(p.status, STATUS_KEYS);
  if (status) out.status = status;
  return out;
}

/** A namespace as the cache keeps it: its metadata (labels and annotations are what the profiles read). */
export function trimNamespace(ns: unknown): unknown {
  const n = ns as { metadata?: unknown; status?: unknown };
  if (typeof n !== "object" || n === null) return ns;
  const out: Record<string, unknown> = {
    apiVersion: "v1",
    kind: "Namespace",
    metadata: pick(n.metadata, META_KEYS) ?? {},
  };
  const phase = (n.status as { phase?: unknown } | undefined)?.phase;
  if (phase !== undefined) out.status = { phase };
  return out;
}

export type EventResult = "changed" | "bookmark" | "expired" | "ignored";

export class Store {
  private readonly objects = new Map<string, unknown>();
  /** The resourceVersion of the last list, event or bookmark; "" before the first list. */
  resourceVersion = "";

  constructor(private readonly trim: (o: unknown) => unknown = (o) => o) {}

  /** Replaces everything with a list's items (a relist: objects not in it are gone). */
  replace(items: readonly unknown[], resourceVersion: string): void {
    this.objects.clear();
    for (const item of items) {
      const key = keyOf(item);
      if (key !== undefined) this.objects.set(key, this.trim(item));
    }
    this.resourceVersion = resourceVersion;
  }

  /**
   * Applies one watch event. ERROR with code 410 is "expired" (the caller relists); other ERRORs
   * and events it cannot use are "ignored".
   */
  apply(event: { type: string; object: unknown }): EventResult {
    const rv = metaOf(event.object).resourceVersion;
    switch (event.type) {
      case "ADDED":
      case "MODIFIED": {
        const key = keyOf(event.object);
        if (key === undefined) return "ignored";
        this.objects.set(key, this.trim(event.object));
        break;
      }
      case "DELETED": {
        const key = keyOf(event.object);
        if (key === undefined) return "ignored";
        this.objects.delete(key);
        break;
      }
      case "BOOKMARK":
        if (typeof rv === "string" && rv !== "") this.resourceVersion = rv;
        return "bookmark";
      case "ERROR":
        return (event.object as { code?: unknown } | undefined)?.code === 410 ? "expired" : "ignored";
      default:
        return "ignored";
    }
    if (typeof rv === "string" && rv !== "") this.resourceVersion = rv;
    return "changed";
  }

  get(key: string): unknown | undefined {
    return this.objects.get(key);
  }

  values(): unknown[] {
    return [...this.objects.values()];
  }

  get size(): number {
    return this.objects.size;
  }
}
