// Findings of the agent-side fuzz runs that belong to code another branch is changing: each is
// reported there with a replay command, and the fuzz tests list a failure that matches one
// instead of failing on it. Remove an entry once its fix is on main: the runs then hold the
// invariant again.
export interface Known {
  what: string;
  /** Where it is being fixed. */
  owner: string;
  matches: RegExp;
}

export const KNOWN: readonly Known[] = [
  {
    what:
      "a container ID of 236 to 256 characters (valid) gets no record: the record's temp name is longer than 255 bytes",
    owner: "helper/plugin-trust (an ID past 235 characters names its record by its SHA-256)",
    matches: /after ADD of .*\((23[6-9]|24\d|25\d) chars\): records \[\]/,
  },
  {
    what: "the agent answers a pod lookup, and plans an ADD, for a pod of another node",
    owner: "helper/records (a pod lookup serves only the agent's node)",
    matches: /the agent serves only its node's pods|a pod of node node-b/,
  },
  {
    what: "a forged ADD for a network namespace that is not there is planned and its record written",
    owner: "helper/records (ADD only for a namespace in /var/run/netns)",
    matches: /network namespace that is not there/,
  },
];

/** The problems of a failure no known finding explains (headers, lines ending in ':', aside). */
export function unexplained(problems: readonly string[]): string[] {
  return problems.filter((p) => !p.endsWith(":") && !KNOWN.some((k) => k.matches.test(p)));
}
