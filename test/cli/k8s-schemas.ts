// Validates rendered objects against Kubernetes' OpenAPI schemas (npm kubernetes-models):
// required fields, types, enums and formats. Those schemas allow unknown fields, so the tests
// assert the fields that matter by name as well.
import { DaemonSet } from "kubernetes-models/apps/v1/DaemonSet";
import { ClusterRole } from "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRole";
import { ClusterRoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1/ClusterRoleBinding";
import { Role } from "kubernetes-models/rbac.authorization.k8s.io/v1/Role";
import { RoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Namespace } from "kubernetes-models/v1/Namespace";
import { ServiceAccount } from "kubernetes-models/v1/ServiceAccount";

const MODELS: Record<string, new (data: never) => { validate(): void }> = {
  "v1/Namespace": Namespace,
  "v1/ServiceAccount": ServiceAccount,
  "v1/ConfigMap": ConfigMap,
  "rbac.authorization.k8s.io/v1/ClusterRole": ClusterRole,
  "rbac.authorization.k8s.io/v1/ClusterRoleBinding": ClusterRoleBinding,
  "rbac.authorization.k8s.io/v1/Role": Role,
  "rbac.authorization.k8s.io/v1/RoleBinding": RoleBinding,
  "apps/v1/DaemonSet": DaemonSet,
};

/** Throws, naming the object, when it does not fit its kind's schema. */
export function validateObject(obj: { apiVersion?: unknown; kind?: unknown; metadata?: { name?: unknown } }): void {
  const key = `${String(obj.apiVersion)}/${String(obj.kind)}`;
  const Model = MODELS[key];
  if (!Model) throw new Error(`no schema for ${key}`);
  try {
    new Model(obj as never).validate();
  } catch (e) {
    throw new Error(`${key} ${String(obj.metadata?.name)} does not fit the Kubernetes schema: ${(e as Error).message}`);
  }
}
