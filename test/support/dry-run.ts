// Dry run needs `"dry_run": true` in the conflist entry besides MESHCNI_DRY_RUN_FILE
// (internal/plugin/run.ts, dryRunGate). Tests that read the payloads add the key to stdin as
// text, so the rest of the input (mutated fuzz input included) reaches the plugin unchanged.

/** `stdin` with `"dry_run":true` as the first key of its top-level object; other text unchanged. */
export function withDryRun(stdin: string): string {
  const m = /^(\uFEFF?\s*)\{(\s*)(\}?)/.exec(stdin);
  if (!m) return stdin;
  const [whole, lead = "", space = "", close = ""] = m;
  return `${lead}{${space}"dry_run":true${close ? "" : ","}${stdin.slice(whole.length - close.length)}`;
}
