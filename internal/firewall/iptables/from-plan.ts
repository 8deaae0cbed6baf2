// The plan in iptables' words: every match and action as the tokens iptables-save prints, so
// the same text is the restore payload and what CHECK compares with. Pure.
import { renderPortRange } from "../../net/ports.ts";
import type { Action, FamilyPlan, Match } from "../../plan/model.ts";
import type { Rule, RuleSet, Table } from "./model.ts";

const hex = (n: number) => `0x${n.toString(16)}`;
const not = (neg: boolean | undefined) => (neg ? ["!"] : []);

function matchArgs(m: Match): string[] {
  switch (m.m) {
    case "proto":
      return ["-p", m.proto];
    case "port": {
      const opt = m.dir === "dst" ? "dport" : "sport";
      if (m.list) {
        const ranges: string[] = [];
        for (const r of m.ports) ranges.push(renderPortRange(r));
        return ["-m", "multiport", ...not(m.not), `--${opt}s`, ranges.join(",")];
      }
      return ["-m", m.proto, ...not(m.not), `--${opt}`, renderPortRange(m.ports[0]!)];
    }
    case "addr":
      return [...not(m.not), m.dir === "src" ? "-s" : "-d", m.cidr];
    case "iface":
      return [m.dir === "in" ? "-i" : "-o", m.name];
    case "owner":
      return ["-m", "owner", ...not(m.not), `--${m.id}-owner`, String(m.value)];
    case "ctstate":
      return ["-m", "conntrack", "--ctstate", m.states.join(",")];
    case "mark":
      return ["-m", "mark", ...not(m.not), "--mark", hex(m.value)];
    case "connmark":
      return ["-m", "connmark", "--mark", hex(m.value)];
    case "comment":
      return ["-m", "comment", "--comment", m.text];
  }
}

const MASKS = ["--nfmask", "0xffffffff", "--ctmask", "0xffffffff"];

function actionArgs(a: Action, family: 4 | 6): string[] {
  switch (a.a) {
    case "return":
      return ["-j", "RETURN"];
    case "accept":
      return ["-j", "ACCEPT"];
    case "drop":
      return ["-j", "DROP"];
    case "jump":
      return ["-j", a.chain];
    case "redirect":
      return ["-j", "REDIRECT", "--to-ports", String(a.port)];
    case "tproxy":
      return [
        "-j",
        "TPROXY",
        "--on-port",
        String(a.port),
        "--on-ip",
        family === 4 ? "0.0.0.0" : "::",
        "--tproxy-mark",
        `${hex(a.mark)}/0xffffffff`,
      ];
    case "mark":
      return ["-j", "MARK", "--set-xmark", `${hex(a.value)}/0xffffffff`];
    case "save-mark":
      return ["-j", "CONNMARK", "--save-mark", ...MASKS];
    case "restore-mark":
      return ["-j", "CONNMARK", "--restore-mark", ...MASKS];
    case "ct-zone":
      return ["-j", "CT", "--zone", String(a.zone)];
  }
}

/**
 * One family's plan as the RuleSet the restore payloads and CHECK work on. Plain loops, not
 * map/flatMap: the plugin runs this in a fresh process, where each callback builtin is compiled
 * on its first use (perf: see docs/benchmarks.md).
 */
export function ruleSetOf(fp: FamilyPlan): RuleSet {
  const chains: { table: Table; name: string }[] = [];
  for (const c of fp.chains) chains.push({ table: c.stage, name: c.name });
  const rules: Rule[] = [];
  for (const r of fp.rules) {
    const args: string[] = [];
    for (const m of r.match) args.push(...matchArgs(m));
    args.push(...actionArgs(r.action, fp.family));
    rules.push({ table: r.stage, chain: r.chain, args, ...(r.insertAt !== undefined ? { insertAt: r.insertAt } : {}) });
  }
  return { family: fp.family, chains, rules };
}
