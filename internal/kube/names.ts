// Kubernetes object names (DNS-1123), the one definition every check uses: a namespace is a
// label, a pod, node or DaemonSet name a subdomain. Pure, and small enough for the plugin.
//
// The checks are character loops, not the RegExps below: they run on the plugin's hot path (every
// pod's CNI_ARGS), where a fresh process compiles each RegExp on its first use (perf: see
// docs/benchmarks.md). names.test.ts holds the loops to the RegExps.

/** A DNS-1123 label's characters; isDnsLabel also bounds its length. */
export const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
/** A DNS-1123 subdomain's characters; isDnsSubdomain also bounds its length. */
export const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;

/**
 * Whether s[from, to) is a label of any length: alphanumerics and `-`, alphanumeric at both ends.
 * The character classes are written out, not a helper called per character: in a short process
 * such a helper costs more than it saves (perf: see docs/benchmarks.md).
 */
function label(s: string, from: number, to: number): boolean {
  if (to <= from) return false;
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i);
    if ((c >= 97 && c <= 122) || (c >= 48 && c <= 57)) continue;
    if (c !== 45 || i === from || i === to - 1) return false;
  }
  return true;
}

/** A namespace name: lower case letters, digits and `-`, at most 63, starting and ending alphanumeric. */
export function isDnsLabel(s: string): boolean {
  return s.length <= 63 && label(s, 0, s.length);
}

/** A pod, node or DaemonSet name: labels joined by `.`, at most 253 characters. */
export function isDnsSubdomain(s: string): boolean {
  if (s.length > 253) return false;
  let from = 0;
  for (;;) {
    const dot = s.indexOf(".", from);
    const to = dot < 0 ? s.length : dot;
    if (!label(s, from, to)) return false;
    if (dot < 0) return true;
    from = dot + 1;
  }
}
