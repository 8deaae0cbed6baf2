// A pod object is used only when it is the runtime's pod: when the runtime names the pod's UID
// (K8S_POD_UID), a pod of that name with another UID was deleted and created again, and the
// sandbox being set up belongs to the old one. Pure; the plugin and the agent both check it.
import { CniError } from "../cni/errors.ts";
import { Code } from "../cni/spec.ts";

/** The UID in a pod object, if any. */
function podUid(pod: unknown): string | undefined {
  const uid = (pod as { metadata?: { uid?: unknown } } | undefined)?.metadata?.uid;
  return typeof uid === "string" ? uid : undefined;
}

/** A pod that is not the runtime's (deleted and recreated under the same name) is never used. */
export function checkUid(pod: unknown, uid: string | undefined, namespace: string, name: string, from: string): void {
  const found = podUid(pod);
  if (uid !== undefined && found !== undefined && found !== uid) {
    throw new CniError(
      Code.PodNotFound,
      "pod not found",
      `pod ${namespace}/${name} ${from} has UID ${found}, not ${uid} (K8S_POD_UID): ` +
        `it was deleted and recreated; the runtime will tear this sandbox down`,
    );
  }
}
