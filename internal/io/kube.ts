// Reading pods and namespaces from the API server over fetch, with the kubeconfig's server and
// credentials. Every failure becomes a CniError with the code the README documents.
import { CniError } from "../cni/errors.ts";
import { Code } from "../cni/spec.ts";
import { KubeconfigError, type KubeTarget, type Material, parseKubeconfig } from "../kube/kubeconfig.ts";
import { type Namespace, parseNamespace, parsePod, type Pod } from "../kube/objects.ts";
import type { KubeClient } from "../plugin/deps.ts";

function badKubeconfig(path: string, why: string): CniError {
  return new CniError(Code.BadKubeconfig, "cannot use the plugin's kubeconfig",
    `${path}: ${why}; meshcni-installer writes this file: check that the meshcni DaemonSet pod on this node is running`);
}

async function readMaterial(m: Material | undefined, what: string, path: string): Promise<string | undefined> {
  if (!m) return undefined;
  if ("data" in m) return m.data;
  try {
    return await Bun.file(m.file).text();
  } catch (e) {
    throw badKubeconfig(path, `cannot read ${what} ${m.file}: ${(e as Error).message}`);
  }
}

export interface Connection {
  target: KubeTarget;
  ca?: string;
  token?: string;
  cert?: string;
  key?: string;
}

export async function readKubeconfig(path: string | undefined): Promise<Connection> {
  if (!path) throw badKubeconfig("(none)", "the plugin config has no kubernetes.kubeconfig");
  let text: string;
  try {
    text = await Bun.file(path).text();
  } catch (e) {
    throw badKubeconfig(path, `cannot read it (${(e as Error).message})`);
  }
  let target: KubeTarget;
  try {
    target = parseKubeconfig(text, path.slice(0, path.lastIndexOf("/")) || "/");
  } catch (e) {
    if (e instanceof KubeconfigError) throw badKubeconfig(path, e.message);
    throw e;
  }
  const conn: Connection = { target };
  const ca = await readMaterial(target.ca, "certificate-authority", path);
  const token = await readMaterial(target.token, "tokenFile", path);
  const cert = await readMaterial(target.clientCert, "client-certificate", path);
  const key = await readMaterial(target.clientKey, "client-key", path);
  if (ca !== undefined) conn.ca = ca;
  if (token !== undefined) conn.token = token.trim();
  if (cert !== undefined) conn.cert = cert;
  if (key !== undefined) conn.key = key;
  return conn;
}

function statusError(status: number, what: string, server: string): CniError {
  switch (status) {
    case 401:
      return new CniError(Code.Unauthorized, "the API server rejected meshcni's credentials (401 Unauthorized)",
        `reading ${what} from ${server}; the token in the plugin's kubeconfig is stale or revoked: restart the meshcni DaemonSet pod on this node so it writes a fresh one`);
    case 403:
      return new CniError(Code.Forbidden, "the API server refused meshcni access (403 Forbidden)",
        `reading ${what} from ${server}; meshcni's ClusterRole must allow get on pods and namespaces (meshcnictl install-cni renders it)`);
    case 404:
      return new CniError(Code.PodNotFound, "not found in the API (404)",
        `${what} does not exist on ${server}; if the pod was just deleted this is expected, otherwise check that the kubeconfig points at this node's cluster`);
    default:
      return new CniError(Code.TryAgainLater, "try again later",
        `the API server ${server} answered ${status} for ${what}; the runtime will retry the pod`);
  }
}

async function getJson(conn: Connection, path: string, what: string, signal: AbortSignal): Promise<unknown> {
  const server = conn.target.server;
  const headers: Record<string, string> = { Accept: "application/json", "User-Agent": "meshcni" };
  if (conn.token) headers.Authorization = `Bearer ${conn.token}`;
  const tls: Record<string, unknown> = { rejectUnauthorized: !conn.target.insecure };
  if (conn.ca !== undefined) tls.ca = conn.ca;
  if (conn.cert !== undefined) tls.cert = conn.cert;
  if (conn.key !== undefined) tls.key = conn.key;
  let res: Response;
  let body: string;
  try {
    res = await fetch(`${server}${path}`, { headers, signal, tls, redirect: "error" } as RequestInit);
    body = await res.text();
  } catch (e) {
    const err = e as Error;
    if (signal.aborted || err.name === "TimeoutError" || err.name === "AbortError") {
      throw new CniError(Code.TryAgainLater, "try again later",
        `the API server ${server} did not answer for ${what} within the plugin's time bound; the runtime will retry the pod`);
    }
    throw new CniError(Code.TryAgainLater, "try again later",
      `cannot reach the API server ${server} for ${what}: ${err.message}; the runtime will retry the pod`);
  }
  if (res.status !== 200) throw statusError(res.status, what, server);
  try {
    return JSON.parse(body);
  } catch {
    throw new CniError(Code.TryAgainLater, "try again later",
      `the API server ${server} sent a truncated or malformed answer for ${what}; the runtime will retry the pod`);
  }
}

function unexpected(what: string, server: string): CniError {
  return new CniError(Code.TryAgainLater, "try again later", `the API server ${server} sent something that is not a ${what}`);
}

export function kubeClient(conn: Connection): KubeClient {
  return {
    async getPod(namespace, name, signal): Promise<Pod> {
      const what = `pod ${namespace}/${name}`;
      const pod = parsePod(await getJson(conn, `/api/v1/namespaces/${namespace}/pods/${name}`, what, signal));
      if (!pod) throw unexpected("Pod", conn.target.server);
      return pod;
    },
    async getNamespace(name, signal): Promise<Namespace> {
      const ns = parseNamespace(await getJson(conn, `/api/v1/namespaces/${name}`, `namespace ${name}`, signal));
      if (!ns) throw unexpected("Namespace", conn.target.server);
      return ns;
    },
  };
}
