// HTTP to a Kubernetes API server with a kubeconfig's credentials (CA, client certificate,
// bearer token or basic auth), through the Kubernetes client the agent uses too
// (internal/kube/client.ts).
import { readFile } from "node:fs/promises";
import { kubeClient } from "../../kube/client.ts";
import type { ApiClient, HttpAnswer } from "../context.ts";
import type { Material, ResolvedKubeconfig } from "../kubeconfig.ts";

async function readMaterial(m: Material | undefined, what: string): Promise<string | undefined> {
  if (!m) return undefined;
  if ("data" in m) return m.data;
  try {
    return await readFile(m.file, "utf8");
  } catch (e) {
    throw new Error(`cannot read the ${what} ${m.file}: ${(e as Error).message}`);
  }
}

export async function openApiClient(target: ResolvedKubeconfig, timeoutMs: number): Promise<ApiClient> {
  const ca = await readMaterial(target.ca, "certificate-authority");
  const cert = await readMaterial(target.clientCert, "client-certificate");
  const key = await readMaterial(target.clientKey, "client-key");
  const token = (await readMaterial(target.token, "tokenFile"))?.trim();
  const headers: Record<string, string> = {};
  if (token) headers.Authorization = `Bearer ${token}`;
  else if (target.basic) {
    const credentials = `${target.basic.username}:${target.basic.password}`;
    headers.Authorization = `Basic ${Buffer.from(credentials).toString("base64")}`;
  }
  const tls: Record<string, unknown> = { rejectUnauthorized: !target.insecure };
  if (ca !== undefined) tls.ca = ca;
  if (cert !== undefined) tls.cert = cert;
  if (key !== undefined) tls.key = key;
  const client = kubeClient(target.server, () => ({ headers, tls }), "meshcnictl");

  async function send(method: string, path: string, body?: unknown): Promise<HttpAnswer> {
    const a = await client.request(method, path, timeoutMs, body !== undefined ? { body } : {});
    if (a.kind === "unreachable") throw new Error(a.timedOut ? `no answer within ${timeoutMs / 1000} s` : a.reason);
    return { status: a.status, body: a.body };
  }
  return { server: target.server, get: (path) => send("GET", path), post: (path, body) => send("POST", path, body) };
}
