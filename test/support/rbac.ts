// Kubernetes RBAC for the stand-in API server (test/support/apiserver.ts): a request's attributes
// read from its method, path and query as kube-apiserver reads them (verb, API group, resource
// and subresource, namespace, name), and the answer of a set of Roles, ClusterRoles and their
// bindings (meshcnictl install-cni's own objects, for instance) for one user. Pure.

export interface RequestAttributes {
  /** get, list, watch, create, update, patch, delete, deletecollection; undefined for a non-resource path. */
  verb?: string;
  group: string;
  resource: string;
  subresource?: string;
  namespace?: string;
  name?: string;
}

interface Rule {
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  verbs?: string[];
}

interface Obj {
  kind?: string;
  metadata?: { name?: string; namespace?: string };
  rules?: Rule[];
  roleRef?: { kind?: string; name?: string };
  subjects?: { kind?: string; name?: string; namespace?: string }[];
}

/** The user name a service account's token authenticates as. */
export const serviceAccountUser = (namespace: string, name: string) => `system:serviceaccount:${namespace}:${name}`;

/** What a request asks to do, as the API server's request-info resolver reads it. */
export function requestAttributes(method: string, path: string, query: string): RequestAttributes | undefined {
  const parts = path.split("/").filter((p) => p !== "");
  let rest: string[];
  let group: string;
  if (parts[0] === "api" && parts.length >= 2) {
    group = "";
    rest = parts.slice(2);
  } else if (parts[0] === "apis" && parts.length >= 3) {
    group = parts[1]!;
    rest = parts.slice(3);
  } else {
    return undefined;
  }
  if (rest.length === 0) return undefined;
  let namespace: string | undefined;
  // namespaces/NS/RESOURCE...: namespaced; namespaces[/NAME[/SUB]]: the Namespace object itself.
  if (rest[0] === "namespaces" && rest.length >= 3) {
    namespace = rest[1];
    rest = rest.slice(2);
  }
  const [resource = "", rawName, subresource] = rest;
  // The pod proxy names pod:port.
  const name = rawName?.split(":")[0];
  const watching = /(^|&)watch=(1|true)(&|$)/.test(query);
  const verb = (
    {
      GET: name === undefined ? (watching ? "watch" : "list") : "get",
      POST: "create",
      PUT: "update",
      PATCH: "patch",
      DELETE: name === undefined ? "deletecollection" : "delete",
    } as Record<string, string>
  )[method.toUpperCase()];
  return {
    group,
    resource,
    ...(verb ? { verb } : {}),
    ...(subresource ? { subresource } : {}),
    ...(namespace !== undefined ? { namespace } : {}),
    ...(name !== undefined ? { name } : {}),
  };
}

function ruleAllows(rule: Rule, a: RequestAttributes): boolean {
  const has = (list: string[] | undefined, v: string) => (list ?? []).includes(v) || (list ?? []).includes("*");
  const resource = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
  if (!has(rule.apiGroups, a.group) || !has(rule.resources, resource) || !has(rule.verbs, a.verb ?? "")) return false;
  if (rule.resourceNames?.length) return a.name !== undefined && rule.resourceNames.includes(a.name);
  return true;
}

function subjectIs(s: NonNullable<Obj["subjects"]>[number], user: string, bindingNamespace?: string): boolean {
  if (s.kind === "ServiceAccount") {
    return user === serviceAccountUser(s.namespace ?? bindingNamespace ?? "", s.name ?? "");
  }
  return s.kind === "User" && s.name === user;
}

/**
 * Whether `user` may do what `a` asks under the RBAC objects `objects`: a ClusterRoleBinding's
 * ClusterRole everywhere, a RoleBinding's Role or ClusterRole in the binding's namespace only.
 * Non-resource paths (/version) and access reviews of oneself are every user's.
 */
export function rbacAllows(objects: readonly unknown[], user: string, a: RequestAttributes | undefined): boolean {
  if (!a || a.verb === undefined) return true;
  if (a.group === "authorization.k8s.io" && a.resource.startsWith("selfsubject")) return true;
  const objs = objects as Obj[];
  const role = (kind: string, name: string, namespace?: string) =>
    objs.find(
      (o) =>
        o.kind === kind && o.metadata?.name === name && (kind === "ClusterRole" || o.metadata?.namespace === namespace),
    );
  for (const b of objs) {
    if (b.kind !== "ClusterRoleBinding" && b.kind !== "RoleBinding") continue;
    const ns = b.kind === "RoleBinding" ? b.metadata?.namespace : undefined;
    if (!(b.subjects ?? []).some((s) => subjectIs(s, user, ns))) continue;
    if (ns !== undefined && a.namespace !== ns) continue;
    const r = role(b.roleRef?.kind ?? "", b.roleRef?.name ?? "", ns);
    if ((r?.rules ?? []).some((rule) => ruleAllows(rule, a))) return true;
  }
  return false;
}

/** kube-apiserver's words for a refusal. */
export function forbiddenMessage(user: string, a: RequestAttributes): string {
  const resource = a.subresource ? `${a.resource}/${a.subresource}` : a.resource;
  const what = a.name !== undefined ? `${a.resource} "${a.name}" is forbidden` : `${a.resource} is forbidden`;
  const where = a.namespace !== undefined ? ` in the namespace "${a.namespace}"` : " at the cluster scope";
  return `${what}: User "${user}" cannot ${a.verb} resource "${resource}" in API group "${a.group}"${where}`;
}
