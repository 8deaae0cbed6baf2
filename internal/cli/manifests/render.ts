// Kubernetes objects as the text `kubectl apply -f -` reads: a YAML stream or a JSON List. Pure.
import { stringify } from "yaml";
import { NAMES } from "../../config/entry.ts";
import { commonLabels, type K8sObject } from "./objects.ts";

export type OutputFormat = "yaml" | "json";

export function renderObjects(objects: readonly K8sObject[], format: OutputFormat): string {
  if (format === "json") {
    return `${JSON.stringify({ apiVersion: "v1", kind: "List", items: objects }, null, 2)}\n`;
  }
  return objects
    .map(
      (o) =>
        `---\n${stringify(o, {
          lineWidth: 0,
          minContentWidth: 0,
          singleQuote: false,
          aliasDuplicateObjects: false,
          version: "1.1",
        })}`,
    )
    .join("");
}

/**
 * What `kubectl delete -f -` needs to remove an installation: each object's identity, the
 * DaemonSet first (its pods find it gone on SIGTERM and undo their node's changes), the
 * Namespace last and only when meshcni created it (`withNamespace`).
 */
export function buildUninstallObjects(namespace: string, withNamespace: boolean): K8sObject[] {
  const meta = (name: string, namespaced: boolean) => ({
    name,
    ...(namespaced ? { namespace } : {}),
    labels: commonLabels(),
  });
  return [
    { apiVersion: "apps/v1", kind: "DaemonSet", metadata: meta(NAMES.daemonSet, true) },
    { apiVersion: "v1", kind: "ConfigMap", metadata: meta(NAMES.configMap, true) },
    { apiVersion: "rbac.authorization.k8s.io/v1", kind: "RoleBinding", metadata: meta(NAMES.role, true) },
    { apiVersion: "rbac.authorization.k8s.io/v1", kind: "Role", metadata: meta(NAMES.role, true) },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: meta(NAMES.pluginClusterRole, false),
    },
    { apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", metadata: meta(NAMES.pluginClusterRole, false) },
    {
      apiVersion: "rbac.authorization.k8s.io/v1",
      kind: "ClusterRoleBinding",
      metadata: meta(NAMES.clusterRole, false),
    },
    { apiVersion: "rbac.authorization.k8s.io/v1", kind: "ClusterRole", metadata: meta(NAMES.clusterRole, false) },
    { apiVersion: "v1", kind: "ServiceAccount", metadata: meta(NAMES.pluginServiceAccount, true) },
    { apiVersion: "v1", kind: "ServiceAccount", metadata: meta(NAMES.serviceAccount, true) },
    ...(withNamespace ? [{ apiVersion: "v1", kind: "Namespace", metadata: meta(namespace, false) }] : []),
  ];
}
