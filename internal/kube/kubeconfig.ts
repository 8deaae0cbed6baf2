// The one kubeconfig reader: which server, and with which credentials. Pure: file references are
// returned as paths for the I/O layer to read. readCluster and readUser read one cluster and one
// user entry, with the same checks for everyone; parseKubeconfig picks them from one file (the
// plugin's, parsed with the small YAML subset reader to keep yaml off its hot path);
// meshcnictl's internal/cli/kubeconfig.ts merges the user's files and contexts on top of them.
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
  const decoded = Buffer.from(b64.replace(/\s+/g, ""), "base64").toString("utf8");
  if (!decoded) throw new KubeconfigError(`${what} is not base64`);
  return decoded;
}

type Entry = Record<string, unknown>;

function text(o: Entry, key: string): string | undefined {
  const v = o[key];
  return typeof v === "string" && v !== "" ? v : undefined;
}

const inDir = (file: string, dir: string) => (file.startsWith("/") ? file : `${dir}/${file}`);

function material(o: Entry, dataKey: string, fileKey: string, dir: string): Material | undefined {
  const data = text(o, dataKey);
  if (data) return { data: decodeBase64(data, dataKey) };
  const file = text(o, fileKey);
  if (file) return { file: inDir(file, dir) };
  return undefined;
}

/**
 * http(s)://HOST[:PORT], optionally with a path prefix (a proxy's, e.g. Rancher's
 * /k8s/clusters/ID), as kubectl takes it; no query or fragment, which the API paths would follow.
 */
const SERVER = /^https?:\/\/[^/\s?#]+(\/[^\s?#]*)?$/;

export interface ClusterEntry {
  server: string;
  insecure: boolean;
  ca?: Material;
}

export interface UserEntry {
  token?: Material;
  clientCert?: Material;
  clientKey?: Material;
  basic?: { username: string; password: string };
}

/** A `cluster:` entry; `dir` is its file's folder, against which relative file names resolve. */
export function readCluster(cluster: Entry, dir: string): ClusterEntry {
  const server = text(cluster, "server");
  if (!server) throw new KubeconfigError("the cluster has no server");
  if (!SERVER.test(server)) throw new KubeconfigError(`server ${JSON.stringify(server)} must be http(s)://HOST[:PORT]`);
  const out: ClusterEntry = {
    server: server.replace(/\/+$/, ""),
    insecure: cluster["insecure-skip-tls-verify"] === true,
  };
  const ca = material(cluster, "certificate-authority-data", "certificate-authority", dir);
  if (ca) out.ca = ca;
  return out;
}

/** A `user:` entry: a token (inline or tokenFile), a client certificate and key, or basic auth. */
export function readUser(user: Entry, dir: string): UserEntry {
  const out: UserEntry = {};
  const token = text(user, "token");
  const tokenFile = text(user, "tokenFile");
  if (token) out.token = { data: token };
  else if (tokenFile) out.token = { file: inDir(tokenFile, dir) };
  const cert = material(user, "client-certificate-data", "client-certificate", dir);
  const key = material(user, "client-key-data", "client-key", dir);
  if (!!cert !== !!key) throw new KubeconfigError("a client certificate needs both client-certificate and client-key");
  if (cert) out.clientCert = cert;
  if (key) out.clientKey = key;
  const username = text(user, "username");
  const password = text(user, "password");
  if (username && password) out.basic = { username, password };
  return out;
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
  if (ctxName && !ctx)
    throw new KubeconfigError(`current-context ${JSON.stringify(ctxName)} is not among the contexts`);
  const cluster = named(doc.clusters, clusterName, "cluster");
  if (!cluster) throw new KubeconfigError("no cluster for the current context");
  const user = named(doc.users, userName, "user") ?? {};
  const c = readCluster(cluster, dir);
  const u = readUser(user, dir);
  const target: KubeTarget = { server: c.server, insecure: c.insecure };
  if (c.ca) target.ca = c.ca;
  if (u.token) target.token = u.token;
  if (u.clientCert) target.clientCert = u.clientCert;
  if (u.clientKey) target.clientKey = u.clientKey;
  return target;
}
