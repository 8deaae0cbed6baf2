import { CniError } from "./errors.ts";
import { Code } from "./spec.ts";
import { quote } from "../text/escape.ts";
import { isDnsLabel, isDnsSubdomain } from "../kube/names.ts";

/** What meshcni reads from CNI_ARGS. Other keys are ignored. */
export interface K8sArgs {
  podName?: string;
  podNamespace?: string;
  podUid?: string;
  infraContainerId?: string;
}

// Kubernetes object names (internal/kube/names.ts): checking them here keeps anything else out
// of the API request path.

/**
 * Parses `K1=V1;K2=V2` as libcni does: pairs split on `;`, each on its one `=`; the last of a
 * repeated key wins; empty values count as absent.
 */
export function parseK8sArgs(raw: string | undefined): K8sArgs {
  const out: K8sArgs = {};
  if (raw === undefined || raw === "") return out;
  for (const pair of raw.split(";")) {
    if (pair === "") continue;
    const eq = pair.indexOf("=");
    if (eq <= 0 || pair.indexOf("=", eq + 1) !== -1) {
      throw new CniError(Code.InvalidEnvironment, "invalid CNI_ARGS", `pair ${quote(pair)} is not KEY=VALUE`);
    }
    const key = pair.slice(0, eq);
    const val = pair.slice(eq + 1);
    const v = val === "" ? undefined : val;
    switch (key) {
      case "K8S_POD_NAME":
        out.podName = v;
        break;
      case "K8S_POD_NAMESPACE":
        out.podNamespace = v;
        break;
      case "K8S_POD_UID":
        out.podUid = v;
        break;
      case "K8S_POD_INFRA_CONTAINER_ID":
        out.infraContainerId = v;
        break;
      default:
        break; // IgnoreUnknown and anything else
    }
  }
  // Only a pod with both a name and a namespace is a Kubernetes pod; others pass through
  // untouched (podman, for one, sends its container name alone), so only those are checked.
  if (out.podName === undefined || out.podNamespace === undefined) return out;
  if (!isDnsLabel(out.podNamespace)) {
    throw new CniError(
      Code.InvalidEnvironment,
      "invalid K8S_POD_NAMESPACE in CNI_ARGS",
      `${quote(out.podNamespace)} is not a Kubernetes namespace name`,
    );
  }
  if (!isDnsSubdomain(out.podName)) {
    throw new CniError(
      Code.InvalidEnvironment,
      "invalid K8S_POD_NAME in CNI_ARGS",
      `${quote(out.podName)} is not a Kubernetes pod name`,
    );
  }
  return out;
}
