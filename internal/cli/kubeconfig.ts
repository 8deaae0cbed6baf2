// The user's kubeconfig as kubectl reads it: KUBECONFIG may list several files, merged so that
// the first file to name a cluster, user or context wins, as does the first current-context;
// --context picks another. The chosen cluster and user entries are read by the one kubeconfig
// reader (internal/kube/kubeconfig.ts), with the plugin's checks. Pure: files come in as text,
// credentials that live in files come out as paths for the I/O layer to read.
import { parse } from "yaml";
import { KubeconfigError, type Material, readCluster, readUser } from "../kube/kubeconfig.ts";
import { CliError } from "./errors.ts";

export type { Material };

export interface ResolvedKubeconfig {
  context: string;
  cluster: string;
  user: string;
  /** The context's namespace, if it sets one. */
  namespace?: string;
  server: string;
  insecure: boolean;
  ca?: Material;
  token?: Material;
  clientCert?: Material;
  clientKey?: Material;
  basic?: { username: string; password: string };
}

export interface KubeconfigFile {
  path: string;
  text: string;
}

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);
const dirOf = (path: string) => path.slice(0, path.lastIndexOf("/")) || "/";

/** The kubeconfig files to read: --kubeconfig, else KUBECONFIG's list, else ~/.kube/config. */
export function kubeconfigPaths(flag: string | undefined, env: Readonly<Record<string, string | undefined>>): string[] {
  if (flag) return [flag];
  const list = (env.KUBECONFIG ?? "").split(":").filter((p) => p !== "");
  if (list.length) return [...new Set(list)];
  return [`${env.HOME ?? "/root"}/.kube/config`];
}

interface Named {
  value: Obj;
  dir: string;
}

function collect(files: readonly KubeconfigFile[], section: string, kind: string): Map<string, Named> {
  const out = new Map<string, Named>();
  for (const f of files) {
    const doc = parseDoc(f);
    const items = doc[section];
    if (items === undefined || items === null) continue;
    if (!Array.isArray(items)) throw new CliError(`${f.path}: ${section} must be a list`, 1);
    for (const item of items) {
      if (!isObj(item) || typeof item.name !== "string") continue;
      if (!out.has(item.name) && isObj(item[kind]))
        out.set(item.name, { value: item[kind] as Obj, dir: dirOf(f.path) });
    }
  }
  return out;
}

const docs = new WeakMap<KubeconfigFile, Obj>();
function parseDoc(f: KubeconfigFile): Obj {
  const cached = docs.get(f);
  if (cached) return cached;
  let doc: unknown;
  try {
    doc = parse(f.text);
  } catch (e) {
    throw new CliError(`${f.path} is not valid YAML: ${(e as Error).message.split("\n")[0]}`, 1);
  }
  const obj = doc === null || doc === undefined ? {} : doc;
  if (!isObj(obj)) throw new CliError(`${f.path} is not a kubeconfig (expected a mapping)`, 1);
  docs.set(f, obj);
  return obj;
}

function text(o: Obj, key: string): string | undefined {
  const v = o[key];
  return typeof v === "string" && v !== "" ? v : undefined;
}

/** Runs one of the shared readers, naming the entry in what it throws. */
function entry<T>(where: string, read: () => T): T {
  try {
    return read();
  } catch (e) {
    if (e instanceof KubeconfigError) throw new CliError(`${where}: ${e.message}`, 1);
    throw e;
  }
}

export function resolveKubeconfig(files: readonly KubeconfigFile[], contextFlag?: string): ResolvedKubeconfig {
  const names = files.map((f) => f.path).join(", ");
  let current: string | undefined = contextFlag;
  if (!current) {
    for (const f of files) {
      current = text(parseDoc(f), "current-context");
      if (current) break;
    }
  }
  if (!current) throw new CliError(`no current-context in ${names}; pass --context NAME`, 1);
  const contexts = collect(files, "contexts", "context");
  const ctx = contexts.get(current);
  if (!ctx) {
    const known = [...contexts.keys()].join(", ") || "none";
    throw new CliError(`context ${JSON.stringify(current)} is not in ${names} (contexts: ${known})`, 1);
  }
  const clusterName = text(ctx.value, "cluster");
  const userName = text(ctx.value, "user") ?? "";
  const cluster = clusterName ? collect(files, "clusters", "cluster").get(clusterName) : undefined;
  if (!cluster)
    throw new CliError(
      `context ${current}: cluster ${JSON.stringify(clusterName ?? "")} is not defined in ${names}`,
      1,
    );
  const where = `user ${userName || "(none)"}`;
  const user = userName ? collect(files, "users", "user").get(userName) : undefined;
  if (userName && !user) throw new CliError(`context ${current}: ${where} is not defined in ${names}`, 1);
  const u: Obj = user?.value ?? {};
  if (u.exec !== undefined || u["auth-provider"] !== undefined) {
    throw new CliError(
      `${where} gets credentials from ${u.exec !== undefined ? "an exec plugin" : "an auth-provider"}, ` +
        `which meshcnictl does not run; use a context with a token or client certificate (e.g. a service account's)`,
      1,
    );
  }
  const c = entry(`cluster ${clusterName}`, () => readCluster(cluster.value, cluster.dir));
  const creds = entry(where, () => readUser(u, user?.dir ?? "/"));
  const out: ResolvedKubeconfig = {
    context: current,
    cluster: clusterName!,
    user: userName,
    server: c.server,
    insecure: c.insecure,
  };
  const ns = text(ctx.value, "namespace");
  if (ns) out.namespace = ns;
  if (c.ca) out.ca = c.ca;
  if (creds.token) out.token = creds.token;
  if (creds.clientCert) out.clientCert = creds.clientCert;
  if (creds.clientKey) out.clientKey = creds.clientKey;
  if (creds.basic) out.basic = creds.basic;
  return out;
}
