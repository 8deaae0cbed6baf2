// Kubernetes object names (DNS-1123), the one definition every check uses: a namespace is a
// label, a pod, node or DaemonSet name a subdomain. Pure, and small enough for the plugin.

/** A DNS-1123 label's characters; isDnsLabel also bounds its length. */
export const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/** A namespace name: lower case letters, digits and `-`, at most 63, starting and ending alphanumeric. */
export function isDnsLabel(s: string): boolean {
  return s.length <= 63 && DNS_LABEL.test(s);
}

/** A pod, node or DaemonSet name: labels joined by `.`, at most 253 characters. */
export function isDnsSubdomain(s: string): boolean {
  return s.length <= 253 && DNS_SUBDOMAIN.test(s);
}
