// The API server's URL from the in-cluster service variables. Pure.

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
    if (!/^[0-9a-fA-F:.]+(%[\w.-]+)?$/.test(h))
      throw new KubeconfigInputError(
        `KUBERNETES_SERVICE_HOST ${JSON.stringify(host)} is not a host name or IP address`,
      );
    return `https://[${h}]:${p}`;
  }
  if (!/^[A-Za-z0-9.-]+$/.test(h))
    throw new KubeconfigInputError(`KUBERNETES_SERVICE_HOST ${JSON.stringify(host)} is not a host name or IP address`);
  return `https://${h}:${p}`;
}
