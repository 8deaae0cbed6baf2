// GET from the API server over fetch, with the kubeconfig's server and credentials. Every
// failure becomes a CniError with the code docs/error-codes.md documents. No schema library here: the
// plugin starts its pod lookup with this module before the rest of it has loaded.
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import { KubeconfigError, type KubeTarget, type Material, parseKubeconfig } from "../../kube/kubeconfig.ts";

function badKubeconfig(path: string, why: string): CniError {
  return new CniError(
    Code.BadKubeconfig,
    "cannot use the plugin's kubeconfig",
    `${path}: ${why}; meshcni-installer writes this file: check that the meshcni DaemonSet pod on this node is running`,
  );
}

/**
 * Reads a small file synchronously through a memory map: no event-loop round trip, so the
 * plugin's API request can start before the rest of the plugin has loaded (node:fs costs more to
 * load than the read itself; perf: see docs/benchmarks.md).
 */
function readText(path: string): string {
  try {
    return new TextDecoder().decode(Bun.mmap(path, { shared: false }));
  } catch (e) {
    // An empty file cannot be mapped (EINVAL); it reads as "".
    if ((e as { code?: string }).code === "EINVAL") return "";
    throw e;
  }
}

function readMaterial(m: Material | undefined, what: string, path: string): string | undefined {
  if (!m) return undefined;
  if ("data" in m) return m.data;
  try {
    return readText(m.file);
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

/**
 * Reads the kubeconfig and the files it names; synchronous (see readText). A plain http:// server
 * is refused unless `allowHttp` (the entry's kubernetes.allow_insecure_http).
 */
export function readKubeconfig(path: string | undefined, allowHttp = false): Connection {
  if (!path) throw badKubeconfig("(none)", "the plugin config has no kubernetes.kubeconfig");
  let text: string;
  try {
    text = readText(path);
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
  if (!allowHttp && /^http:/i.test(target.server)) {
    throw badKubeconfig(
      path,
      `its server ${target.server} is plain http, so the token would travel in clear; use https, ` +
        `or set "allow_insecure_http": true in the kubernetes section of meshcni's conflist entry`,
    );
  }
  const conn: Connection = { target };
  const ca = readMaterial(target.ca, "certificate-authority", path);
  const token = readMaterial(target.token, "tokenFile", path);
  const cert = readMaterial(target.clientCert, "client-certificate", path);
  const key = readMaterial(target.clientKey, "client-key", path);
  if (ca !== undefined) conn.ca = ca;
  if (token !== undefined) conn.token = token.trim();
  if (cert !== undefined) conn.cert = cert;
  if (key !== undefined) conn.key = key;
  return conn;
}

function statusError(status: number, what: string, server: string): CniError {
  switch (status) {
    case 401:
      return new CniError(
        Code.Unauthorized,
        "the API server rejected meshcni's credentials (401 Unauthorized)",
        `reading ${what} from ${server}; the token in the plugin's kubeconfig has expired or was revoked: ` +
          "the meshcni-node agent on this node renews it, so check that it runs (its log says why a renewal fails)",
      );
    case 403:
      return new CniError(
        Code.Forbidden,
        "the API server refused meshcni access (403 Forbidden)",
        `reading ${what} from ${server}; the plugin's ClusterRole (meshcni-plugin) must allow get on pods and ` +
          "namespaces (meshcnictl install-cni renders it)",
      );
    case 404:
      return new CniError(
        Code.PodNotFound,
        "not found in the API (404)",
        `${what} does not exist on ${server}; if the pod was just deleted this is expected, ` +
          `otherwise check that the kubeconfig points at this node's cluster`,
      );
    default:
      return new CniError(
        Code.TryAgainLater,
        "try again later",
        `the API server ${server} answered ${status} for ${what}; the runtime will retry the pod`,
      );
  }
}

/** API paths of the objects the plugin reads (names already checked as Kubernetes names). */
export const podPath = (namespace: string, name: string) => `/api/v1/namespaces/${namespace}/pods/${name}`;
export const namespacePath = (name: string) => `/api/v1/namespaces/${name}`;

export async function getJson(conn: Connection, path: string, what: string, signal: AbortSignal): Promise<unknown> {
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
      throw new CniError(
        Code.TryAgainLater,
        "try again later",
        `the API server ${server} did not answer for ${what} within the plugin's time bound; ` +
          `the runtime will retry the pod`,
      );
    }
    throw new CniError(
      Code.TryAgainLater,
      "try again later",
      `cannot reach the API server ${server} for ${what}: ${err.message}; the runtime will retry the pod`,
    );
  }
  if (res.status !== 200) throw statusError(res.status, what, server);
  try {
    return JSON.parse(body);
  } catch {
    throw new CniError(
      Code.TryAgainLater,
      "try again later",
      `the API server ${server} sent a truncated or malformed answer for ${what}; the runtime will retry the pod`,
    );
  }
}
