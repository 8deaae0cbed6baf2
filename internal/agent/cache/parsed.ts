// The agent's pods and namespaces, checked against the schema once per object. The watch cache
// (store.ts) never changes an object it holds: each list and each ADDED or MODIFIED event stores
// a new one, trimmed (and the objects the lookup GETs are new too). So the same object is the
// same parse, and a WeakMap keyed on it forgets it once the cache lets the object go. The ADD
// planner (../socket/plan-add.ts) and repair's rounds (../repair/plan.ts) share it, so a round
// parses only the pods that changed: a watch change is one pod, and each change kicks a round
// (perf: see docs/benchmarks.md).
import { type Namespace, parseNamespace, parsePod, type Pod } from "../../kube/objects.ts";

const pods = new WeakMap<object, Pod | undefined>();
const namespaces = new WeakMap<object, Namespace | undefined>();

function once<T>(
  memo: WeakMap<object, T | undefined>,
  raw: unknown,
  parse: (x: unknown) => T | undefined,
): T | undefined {
  if (typeof raw !== "object" || raw === null) return parse(raw);
  if (memo.has(raw)) return memo.get(raw);
  const out = parse(raw);
  memo.set(raw, out);
  return out;
}

/** parsePod of an object the agent holds, once per object (undefined: not a pod, also once). */
export const cachedPod = (raw: unknown): Pod | undefined => once(pods, raw, parsePod);
/** parseNamespace of an object the agent holds, once per object. */
export const cachedNamespace = (raw: unknown): Namespace | undefined => once(namespaces, raw, parseNamespace);
