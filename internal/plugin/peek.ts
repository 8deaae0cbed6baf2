// The plugin's stdin read once without the schema, for the decisions made before the rest of the
// plugin loads (where the agent and the records are, the pod lookup's target). Parsed once per
// process: the same text is asked about by several of them. The schema checks it all when the
// full path runs.
let last: { stdin: string; conf: Record<string, unknown> | undefined } | undefined;

/** The config object in `stdin`, or undefined when it is not a JSON object. */
export function peekConf(stdin: string): Record<string, unknown> | undefined {
  if (last?.stdin === stdin) return last.conf;
  let conf: Record<string, unknown> | undefined;
  try {
    const raw = JSON.parse(stdin);
    if (typeof raw === "object" && raw !== null && !Array.isArray(raw)) conf = raw;
  } catch {
    conf = undefined;
  }
  last = { stdin, conf };
  return conf;
}
