// The plugin's view of a kubeconfig: which server, and with which credentials. Pure: file
// references are returned as paths for the I/O layer to read.
import { parseYamlSubset, type YamlValue } from "./mini-yaml.ts";

export type Material = { data: string } | { file: string };

export interface KubeTarget {
  server: string;
  ca?: Material;
  insecure: boolean;
  token?: Material;
  clientCert?: Material;
  clientKey?: Material;
}

export class KubeconfigError extends Error {}

type Obj = Record<string, YamlValue>;
const isObj = (v: YamlValue | undefined): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

function str(o: Obj, key: string): string | undefined {
  const v = o[key];
  return typeof v === "string" && v !== "" ? v : undefined;
}

function named(list: YamlValue | undefined, name: string | undefined, kind: string): Obj | undefined {
  if (!Array.isArray(list)) return undefined;
  const items = list.filter(isObj);
  const hit = name === undefined ? (items.length === 1 ? items[0] : undefined) : items.find((x) => x.name === name);
  const inner = hit?.[kind];
  return isObj(inner) ? inner : undefined;
}

function decodeBase64(b64: string, what: string): string {
  try {
    return Buffer.from(b64.replace(/\s+/g, ""), "base64").toString("utf8");
  } catch {
    throw new KubeconfigError(`${what} is not valid base64`);
  }
}

function material(o: Obj, dataKey: string, fileKey: string, base: string): Material | undefined {
  const data = str(o, dataKey);
  if (data) return { data: decodeBase64(data, dataKey) };
  const file = str(o, fileKey);
  if (file) return { file: file.startsWith("/") ? file : `${base}/${file}` };
  return undefined;
}

/**
 * Picks the cluster and user of the current context (or the only one there is). `dir` is the
 * kubeconfig's folder, against which relative file names resolve, as kubectl does.
 */
export function parseKubeconfig(text: string, dir: string): KubeTarget {
  let doc: YamlValue;
  try {
    doc = parseYamlSubset(text);
  } catch (e) {
    throw new KubeconfigError((e as Error).message);
  }
  if (!isObj(doc)) throw new KubeconfigError("not a kubeconfig: expected a mapping at the top");
  const ctxName = str(doc, "current-context");
  const ctx = named(doc.contexts, ctxName, "context");
  const clusterName = ctx ? str(ctx, "cluster") : undefined;
  const userName = ctx ? str(ctx, "user") : undefined;
  if (ctxName && !ctx) throw new KubeconfigError(`current-context ${JSON.stringify(ctxName)} is not among the contexts`);
  const cluster = named(doc.clusters, clusterName, "cluster");
  if (!cluster) throw new KubeconfigError("no cluster for the current context");
  const user = named(doc.users, userName, "user") ?? {};
  const server = str(cluster, "server");
  if (!server) throw new KubeconfigError("the cluster has no server");
  if (!/^https?:\/\/[^/\s]+\/?$/.test(server)) {
    throw new KubeconfigError(`server ${JSON.stringify(server)} must be http(s)://HOST[:PORT]`);
  }
  const token = str(user, "token");
  const target: KubeTarget = {
    server: server.replace(/\/$/, ""),
    insecure: cluster["insecure-skip-tls-verify"] === true,
  };
  const ca = material(cluster, "certificate-authority-data", "certificate-authority", dir);
  if (ca) target.ca = ca;
  if (token) target.token = { data: token };
  else {
    const tf = str(user, "tokenFile");
    if (tf) target.token = { file: tf.startsWith("/") ? tf : `${dir}/${tf}` };
  }
  const cert = material(user, "client-certificate-data", "client-certificate", dir);
  const key = material(user, "client-key-data", "client-key", dir);
  if (cert) target.clientCert = cert;
  if (key) target.clientKey = key;
  return target;
}
