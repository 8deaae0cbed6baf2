// A small in-memory PodLookup (internal/agent/types.ts) for the agent's socket tests: pods and
// namespaces held in maps, answering per wire/protocol.ts (200 from "cache", 404 with code 106 for a
// missing pod or another UID, 503 when told to be unavailable), recording every question. The
// agent's real lookup (its watch cache) implements the same interface.
import type { LookupResult, PodLookup } from "../../internal/agent/types.ts";

export interface Question {
  namespace: string;
  name: string;
  uid?: string;
}

export class MemoryPodLookup implements PodLookup {
  readonly pods = new Map<string, unknown>();
  readonly namespaces = new Map<string, unknown>();
  readonly questions: Question[] = [];
  /** When set, every answer is a 503 with this reason. */
  unavailable?: string;
  /** When set, answers wait this long (or until the caller gives up). */
  delayMs = 0;

  addPod(pod: { metadata: { namespace: string; name: string; uid?: string } }): void {
    this.pods.set(`${pod.metadata.namespace}/${pod.metadata.name}`, pod);
    if (!this.namespaces.has(pod.metadata.namespace))
      this.namespaces.set(pod.metadata.namespace, { metadata: { name: pod.metadata.namespace } });
  }

  async lookup(namespace: string, name: string, uid: string | undefined, signal: AbortSignal): Promise<LookupResult> {
    this.questions.push({ namespace, name, ...(uid !== undefined ? { uid } : {}) });
    if (this.delayMs > 0) {
      await new Promise<void>((resolve, reject) => {
        const t = setTimeout(resolve, this.delayMs);
        signal.addEventListener(
          "abort",
          () => {
            clearTimeout(t);
            reject(signal.reason);
          },
          { once: true },
        );
      });
    }
    if (this.unavailable)
      return { ok: false, status: 503, error: { code: 11, msg: "the agent cannot answer", details: this.unavailable } };
    const pod = this.pods.get(`${namespace}/${name}`) as { metadata: { uid?: string } } | undefined;
    if (!pod)
      return {
        ok: false,
        status: 404,
        error: { code: 106, msg: "not found in the API (404)", details: `pod ${namespace}/${name} does not exist` },
      };
    if (uid !== undefined && pod.metadata.uid !== uid) {
      return {
        ok: false,
        status: 404,
        error: {
          code: 106,
          msg: "not found in the API (404)",
          details: `pod ${namespace}/${name} has UID ${pod.metadata.uid}, not ${uid}`,
        },
      };
    }
    return { ok: true, pod, namespace: this.namespaces.get(namespace), source: "cache" };
  }
}
