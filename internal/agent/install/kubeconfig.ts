// The kubeconfig meshcni-installer writes for the plugin (ZZZ-meshcni-kubeconfig): the API
// server from KUBERNETES_SERVICE_HOST/PORT, the cluster CA and a token of the plugin's own
// service account (internal/agent/install/token.ts), with a comment line naming that account and
// the token's expiry, which a restarted agent reads back (readWrittenToken). Pure. The output
// stays inside the YAML subset the plugin reads (internal/kube/mini-yaml.ts).
import { KubeconfigError, parseKubeconfig } from "../../kube/kubeconfig.ts";
import { KubeconfigInputError, renderServerUrl } from "../../kube/server-url.ts";
import { type PluginAccount, accountName } from "./token.ts";

export interface KubeconfigInput {
  /** KUBERNETES_SERVICE_HOST: a DNS name, an IPv4 address or an IPv6 address (bare or bracketed). */
  host: string;
  /** KUBERNETES_SERVICE_PORT. */
  port: string;
  /** The plugin's token (surrounding whitespace is dropped). */
  token: string;
  /** The cluster CA bundle, PEM (ca.crt). */
  caPem: string;
  /** Whose token it is. */
  account: PluginAccount;
  /** When it expires, as the API server said (epoch milliseconds). */
  expiresAt: number;
}

/** The comment line that says whose token the file holds and until when. */
const MARKER = "# meshcni-plugin-token:";

/** RFC 3339 in whole seconds, as the API server writes times. */
export const renderTime = (ms: number) =>
  new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(/\.\d{3}Z$/, "Z");

export function renderKubeconfig(input: KubeconfigInput): string {
  const token = input.token.trim();
  if (token === "") throw new KubeconfigInputError("the plugin's token is empty");
  if (!input.caPem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new KubeconfigInputError("the service account's ca.crt holds no PEM certificate");
  }
  if (!Number.isFinite(input.expiresAt)) throw new KubeconfigInputError("the plugin's token has no expiry");
  const ca = Buffer.from(input.caPem, "utf8").toString("base64");
  const who = accountName(input.account);
  return [
    "# Kubeconfig for the meshcni CNI plugin, written by meshcni-installer (the node agent).",
    `# The token is one of the service account ${who},`,
    "# which may only get pods, namespaces and the Service kubernetes. The agent renews it",
    "# before it expires and removes this file when meshcni is uninstalled.",
    `${MARKER} account=${who} expires=${renderTime(input.expiresAt)}`,
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    "- name: local",
    "  cluster:",
    `    server: ${renderServerUrl(input.host, input.port)}`,
    `    certificate-authority-data: ${ca}`,
    "users:",
    "- name: meshcni",
    "  user:",
    `    token: ${JSON.stringify(token)}`,
    "contexts:",
    "- name: meshcni",
    "  context:",
    "    cluster: local",
    "    user: meshcni",
    "current-context: meshcni",
    "",
  ].join("\n");
}

/** What a kubeconfig this agent wrote says of its token; undefined for any other file. */
export interface WrittenToken {
  token: string;
  account: PluginAccount;
  expiresAt: number;
}

/**
 * The token, its account and its expiry from a kubeconfig renderKubeconfig wrote. A file without
 * the comment line (written before the plugin had an account of its own: it holds the agent's
 * token) or one that does not parse is undefined.
 */
export function readWrittenToken(text: string): WrittenToken | undefined {
  const line = text.split("\n").find((l) => l.startsWith(MARKER));
  const m = line && /^# meshcni-plugin-token: account=([a-z0-9.-]+)\/([a-z0-9.-]+) expires=(\S+)$/.exec(line);
  if (!m) return undefined;
  const expiresAt = Date.parse(m[3]!);
  if (!Number.isFinite(expiresAt)) return undefined;
  try {
    const token = parseKubeconfig(text, "/").token;
    if (!token || !("data" in token) || token.data.trim() === "") return undefined;
    return { token: token.data.trim(), account: { namespace: m[1]!, name: m[2]! }, expiresAt };
  } catch (e) {
    if (e instanceof KubeconfigError) return undefined;
    throw e;
  }
}
