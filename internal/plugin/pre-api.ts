// The decisions the plugin makes before any API call. Pure and light (no schema library), so
// the plugin can make them the moment it has read stdin.
import { OWN_POD_PREFIX } from "../config/entry.ts";

export interface PreApiSettings {
  exclude_namespaces: readonly string[];
  pod_namespace?: string | undefined;
}

/**
 * Why a pod gets no rules before any API call, if it does not: excluded namespaces and
 * meshcni's own DaemonSet pods. A stale token or an API outage can never stop these pods (the
 * ones that would repair the node among them). `meshcnictl explain` asks the same question.
 */
export function skipBeforeLookup(k: PreApiSettings, podNamespace: string, podName: string): string | undefined {
  if (k.exclude_namespaces.includes(podNamespace)) return `namespace ${podNamespace} is excluded`;
  if (podNamespace === k.pod_namespace && podName.startsWith(OWN_POD_PREFIX)) {
    return "one of meshcni's own DaemonSet pods";
  }
  return undefined;
}
