// The kubeconfig meshcni-installer writes for the plugin (ZZZ-meshcni-kubeconfig): the API
// server from KUBERNETES_SERVICE_HOST/PORT, the cluster CA and the service account token. Pure.
// The output stays inside the YAML subset the plugin reads (internal/kube/mini-yaml.ts).

export interface KubeconfigInput {
  /** KUBERNETES_SERVICE_HOST: a DNS name, an IPv4 address or an IPv6 address (bare or bracketed). */
  host: string;
  /** KUBERNETES_SERVICE_PORT. */
  port: string;
  /** The service account token (surrounding whitespace is dropped). */
  token: string;
  /** The cluster CA bundle, PEM (ca.crt). */
  caPem: string;
}

export class KubeconfigInputError extends Error {}

/** `https://HOST:PORT`, with an IPv6 address in brackets (and only then). */
export function renderServerUrl(host: string, port: string): string {
  const h = host.trim();
  const p = port.trim();
  if (h === "") throw new KubeconfigInputError("KUBERNETES_SERVICE_HOST is empty");
  if (!/^\d{1,5}$/.test(p) || Number(p) < 1 || Number(p) > 65535) {
    throw new KubeconfigInputError(`KUBERNETES_SERVICE_PORT ${JSON.stringify(port)} is not a port number (1-65535)`);
  }
  if (/^\[[0-9a-fA-F:.%\w-]+\]$/.test(h)) return `https://${h}:${p}`;
  if (h.includes(":")) {
    if (!/^[0-9a-fA-F:.]+(%[\w.-]+)?$/.test(h)) throw new KubeconfigInputError(`KUBERNETES_SERVICE_HOST ${JSON.stringify(host)} is not a host name or IP address`);
    return `https://[${h}]:${p}`;
  }
  if (!/^[A-Za-z0-9.-]+$/.test(h)) throw new KubeconfigInputError(`KUBERNETES_SERVICE_HOST ${JSON.stringify(host)} is not a host name or IP address`);
  return `https://${h}:${p}`;
}

export function renderKubeconfig(input: KubeconfigInput): string {
  const token = input.token.trim();
  if (token === "") throw new KubeconfigInputError("the service account token is empty");
  if (!input.caPem.includes("-----BEGIN CERTIFICATE-----")) {
    throw new KubeconfigInputError("the service account's ca.crt holds no PEM certificate");
  }
  const ca = Buffer.from(input.caPem, "utf8").toString("base64");
  return [
    "# Kubeconfig for the meshcni CNI plugin, written by meshcni-installer. It is rewritten when",
    "# the service account token rotates and removed when meshcni is uninstalled.",
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
