// Dry run needs `"dry_run": true` in the conflist entry besides MESHCNI_DRY_RUN_FILE
// (internal/plugin/run.ts, dryRunGate). Tests that read the payloads add the key to stdin as
// text, so the rest of the input (mutated fuzz input included) reaches the plugin unchanged.

/**
 * `stdin` with `keys` (JSON members, `"a":1,"b":2`) first in its top-level object; other text
 * unchanged. A key the object has itself comes later and wins (JSON's last duplicate).
 */
export function withFirstKeys(stdin: string, keys: string): string {
  const m = /^(\uFEFF?\s*)\{(\s*)(\}?)/.exec(stdin);
  if (!m) return stdin;
  const [whole, lead = "", space = "", close = ""] = m;
  return `${lead}{${space}${keys}${close ? "" : ","}${stdin.slice(whole.length - close.length)}`;
}

/** `stdin` with `"dry_run":true` as the first key of its top-level object; other text unchanged. */
export const withDryRun = (stdin: string): string => withFirstKeys(stdin, '"dry_run":true');
