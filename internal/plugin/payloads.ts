// The text of everything a redirect would apply, per address family: what MESHCNI_DRY_RUN_FILE
// receives, what `simulate` logs, and what `meshcnictl explain` prints.
import type { Redirect } from "../mesh/profile.ts";
import { renderFresh } from "../rules/restore.ts";

export function renderPayloads(redirect: Redirect): string {
  const parts: string[] = [];
  for (const rs of redirect.rulesets) {
    parts.push(`# ${rs.family === 6 ? "ip6tables" : "iptables"}-restore --noflush (IPv${rs.family})\n${renderFresh(rs)}`);
  }
  for (const cmd of redirect.ipCommands) parts.push(`# ip -${cmd.family} ${cmd.argv.join(" ")}\n`);
  return parts.join("");
}

export function countRules(redirect: Redirect): number {
  return redirect.rulesets.reduce((n, rs) => n + rs.rules.length, 0);
}
