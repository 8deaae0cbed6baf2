// Pods and namespaces from the API server, parsed into the shapes the profiles read.
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import { type Namespace, parseNamespace, parsePod, parseService, type Pod, type Service } from "../../kube/objects.ts";
import type { KubeClient } from "../deps.ts";
import { type Connection, getJson, namespacePath, podPath } from "./kube-http.ts";

/** A pod lookup already under way (started by the early lookup), handed over to the client. */
export interface PendingPod {
  namespace: string;
  name: string;
  body: Promise<unknown>;
}

function unexpected(what: string, server: string): CniError {
  return new CniError(
    Code.TryAgainLater,
    "try again later",
    `the API server ${server} sent something that is not a ${what}`,
  );
}

export function kubeClient(conn: Connection, pending?: PendingPod): KubeClient {
  return {
    async getPod(namespace, name, signal): Promise<Pod> {
      const what = `pod ${namespace}/${name}`;
      const early = pending && pending.namespace === namespace && pending.name === name ? pending.body : undefined;
      pending = undefined;
      const pod = parsePod(await (early ?? getJson(conn, podPath(namespace, name), what, signal)));
      if (!pod) throw unexpected("Pod", conn.target.server);
      return pod;
    },
    async getNamespace(name, signal): Promise<Namespace> {
      const ns = parseNamespace(await getJson(conn, namespacePath(name), `namespace ${name}`, signal));
      if (!ns) throw unexpected("Namespace", conn.target.server);
      return ns;
    },
    async getService(namespace, name, signal): Promise<Service> {
      const path = `${namespacePath(namespace)}/services/${encodeURIComponent(name)}`;
      const svc = parseService(await getJson(conn, path, `service ${namespace}/${name}`, signal));
      if (!svc) throw unexpected("Service", conn.target.server);
      return svc;
    },
  };
}
