// The nftables backend: the plan as one `nft -f -` transaction inside the pod's namespace,
// both address families at once (tables `ip meshcni` and `ip6 meshcni`): created fresh in a new
// pod's namespace, deleted and written again where they exist. CHECK lists the
// tables and compares them, chain by chain, with the plan; DEL deletes the tables.
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import type { Plan } from "../../plan/model.ts";
import type { Backend, ExecResult } from "../backend.ts";
import { familyChains, renderCreateScript, renderDelete, renderScript, TABLE, tableFamily } from "./render.ts";
import { diffTable, parseTable } from "./listing.ts";

function failed(what: string, r: ExecResult): CniError {
  const err = r.stderr.trim().split("\n").slice(-3).join(" | ") || `exit code ${r.code}`;
  return new CniError(
    Code.ApplyFailed,
    `nft ${what} failed in the pod network namespace`,
    `${err}; the node's kernel needs nf_tables (and nft_tproxy ` +
      `for TPROXY), or set iptables-mode to an iptables backend`,
  );
}

const firstLine = (r: ExecResult) => r.stderr.trim().split("\n")[0]?.slice(0, 200) || `exit code ${r.code}`;

const gone = (r: ExecResult) => /No such file or directory/i.test(r.stderr);

export const nftablesBackend: Backend = {
  name: "nftables",
  tools(_mode, _families, host) {
    if (host.nftLibrary) return { label: "nftables in process", bins: { nft: "nft" } };
    return host.has("nft") ? { label: "nftables", bins: { nft: "nft" } } : { missing: "nft" };
  },
  render(plan) {
    const fams = plan.families.map((f) => `IPv${f.family}`).join(" and ");
    const parts = [`# nft -f - (${fams}, one transaction)\n${renderScript(plan)}`];
    for (const cmd of plan.ipCommands) parts.push(`# ip -${cmd.family} ${cmd.argv.join(" ")}\n`);
    return parts.join("");
  },
  async apply(fw, plan, log, signal) {
    if (plan.families.length === 0) return;
    // A new pod's namespace has no meshcni table: create the tables, deleting nothing (render.ts's
    // renderCreateScript says why). If that fails (ADD ran before here, or the script itself
    // fails), one transaction deletes and writes them again; its error is the ADD's.
    const fresh = await fw.run("nft", ["-f", "-"], renderCreateScript(plan), signal);
    if (fresh.code === 0) return;
    log.info(`nft tables not created fresh (${firstLine(fresh)}); replacing them in one transaction`);
    const r = await fw.run("nft", ["-f", "-"], renderScript(plan), signal);
    if (r.code !== 0) throw failed("-f", r);
  },
  async verify(fw, plan, signal) {
    const problems: string[] = [];
    for (const fp of plan.families) {
      const t = `${tableFamily(fp.family)} ${TABLE}`;
      const r = await fw.run("nft", ["-y", "list", "table", tableFamily(fp.family), TABLE], undefined, signal);
      if (r.code !== 0) {
        if (gone(r)) problems.push(`nft table ${t} is missing`);
        else throw failed("list table", r);
        continue;
      }
      problems.push(...diffTable(t, familyChains(fp), parseTable(r.stdout)));
    }
    return problems;
  },
  async remove(fw, what, signal) {
    if (what.families.length === 0) return false;
    const r = await fw.run("nft", ["-f", "-"], renderDelete(what.families), signal);
    if (r.code !== 0) throw failed("delete table", r);
    return true;
  },
};

/** For tests and the bench: the script ADD sends. */
export const nftScript = (plan: Plan) => renderScript(plan);
