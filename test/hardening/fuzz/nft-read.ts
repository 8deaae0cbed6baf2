// An independent reader of the nftables backend's dry-run payload (`# nft -f - …`): it checks
// the script's grammar itself (the replace-table preamble per family, chain names and base
// chain declarations, every word of every rule; strings only where a name or a comment goes,
// with nothing in them that could end them) and translates each rule into the words
// iptables-save would print for the same match and action, so that payload-check.ts judges
// both backends' payloads with the same rules of meaning.
import type { Payload, Rule, Section } from "./payload-check.ts";

const STAGES = new Set(["nat", "mangle", "raw"]);
const _HOOKS: Record<string, string> = { prerouting: "PREROUTING", output: "OUTPUT" };
const SPECS: Record<string, string> = {
  "nat/PREROUTING": "type nat hook prerouting priority -100; policy accept;",
  "nat/OUTPUT": "type nat hook output priority -100; policy accept;",
  "mangle/PREROUTING": "type filter hook prerouting priority -150; policy accept;",
  "mangle/OUTPUT": "type route hook output priority -150; policy accept;",
  "raw/PREROUTING": "type filter hook prerouting priority -300; policy accept;",
  "raw/OUTPUT": "type filter hook output priority -300; policy accept;",
};
const NUM = /^(0|[1-9][0-9]{0,9})$/;
const PORT_ITEM = /^(0|[1-9][0-9]{0,4})(-(0|[1-9][0-9]{0,4}))?$/;
const HEX8 = /^0x[0-9a-f]{8}$/;
const NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$/;

/** Splits a rule into words, "strings" (no quote or backslash inside) and { sets }. */
function words(text: string): string[] | string {
  const out: string[] = [];
  let i = 0;
  while (i < text.length) {
    if (text[i] === " ") {
      i++;
      continue;
    }
    if (text[i] === '"') {
      const end = text.indexOf('"', i + 1);
      if (end < 0) return `unterminated string in ${JSON.stringify(text)}`;
      const inner = text.slice(i + 1, end);
      if (/[\\\n\r\0]/.test(inner)) return `escape or control character in a string: ${JSON.stringify(text)}`;
      if (end + 1 < text.length && text[end + 1] !== " ") return `text right after a string in ${JSON.stringify(text)}`;
      out.push(text.slice(i, end + 1));
      i = end + 1;
      continue;
    }
    if (text[i] === "{") {
      const end = text.indexOf("}", i);
      if (end < 0) return `unterminated set in ${JSON.stringify(text)}`;
      out.push(text.slice(i, end + 1));
      i = end + 1;
      continue;
    }
    let j = i;
    while (j < text.length && text[j] !== " ") j++;
    const w = text.slice(i, j);
    if (/["{}]/.test(w)) return `a quote or brace inside a word in ${JSON.stringify(text)}`;
    out.push(w);
    i = j;
  }
  return out;
}

function portItems(v: string): string[] | undefined {
  const items = v.startsWith("{")
    ? v
        .slice(1, -1)
        .split(",")
        .map((s) => s.trim())
    : [v];
  if (items.length === 0 || !items.every((p) => PORT_ITEM.test(p))) return undefined;
  return items.map((p) => p.replace("-", ":"));
}

const hexOf = (v: string) => `0x${parseInt(v, 16).toString(16)}`;

/** One rule in iptables-save's words, or a problem. */
function translate(text: string, stage: string, family: 4 | 6): string[] | string {
  const w = words(text);
  if (typeof w === "string") return w;
  const m: string[] = [];
  let target: string[] | undefined;
  let comment: string | undefined;
  let lastProto: string | undefined;
  const addrFam = family === 6 ? "ip6" : "ip";
  const bad = (why: string) => `${why} in ${JSON.stringify(text)}`;
  let i = 0;
  const take = () => w[i++];
  const neg = () => {
    if (w[i] !== "!=") return false;
    i++;
    return true;
  };
  while (i < w.length) {
    if (target !== undefined && w[i] !== "comment") return bad(`words after the statement (${w[i]})`);
    const a = take()!;
    const b = w[i];
    if (a === "meta" && b === "l4proto") {
      i++;
      const p = take();
      if (p !== "tcp" && p !== "udp") return bad(`protocol ${p}`);
      m.push("-p", p);
      lastProto = p;
    } else if ((a === "tcp" || a === "udp") && (b === "dport" || b === "sport")) {
      i++;
      const n = neg();
      const v = take() ?? "";
      const items = portItems(v);
      if (!items) return bad(`ports ${JSON.stringify(v)}`);
      if (lastProto !== a) m.push("-p", a);
      lastProto = undefined;
      const opt = b === "dport" ? "dport" : "sport";
      if (items.length === 1 && !items[0]!.includes(":")) m.push("-m", a, ...(n ? ["!"] : []), `--${opt}`, items[0]!);
      else m.push("-m", "multiport", ...(n ? ["!"] : []), `--${opt}s`, items.join(","));
    } else if ((a === "ip" || a === "ip6") && (b === "saddr" || b === "daddr")) {
      if (a !== addrFam) return bad(`${a} match in an IPv${family} table`);
      i++;
      const n = neg();
      const v = take() ?? "";
      const ok =
        family === 4
          ? /^[0-9.]+(\/[0-9]{1,2})?$/
          : /^([0-9a-f:]+|[0-9a-f:]+[0-9]{1,3}(\.[0-9]{1,3}){3})(\/[0-9]{1,3})?$/;
      if (!ok.test(v)) return bad(`address ${JSON.stringify(v)}`);
      m.push(...(n ? ["!"] : []), b === "saddr" ? "-s" : "-d", v.includes("/") ? v : `${v}/${family === 4 ? 32 : 128}`);
    } else if (a === "iifname" || a === "oifname") {
      const v = take() ?? "";
      if (!/^".*"$/.test(v) || !NAME.test(v.slice(1, -1))) return bad(`interface ${v}`);
      m.push(a === "iifname" ? "-i" : "-o", v.slice(1, -1));
    } else if (a === "meta" && (b === "skuid" || b === "skgid")) {
      i++;
      const n = neg();
      const v = take() ?? "";
      if (!NUM.test(v)) return bad(`id ${v}`);
      m.push("-m", "owner", ...(n ? ["!"] : []), b === "skuid" ? "--uid-owner" : "--gid-owner", v);
    } else if (a === "ct" && b === "state") {
      i++;
      const v = (take() ?? "").split(",");
      const order = ["invalid", "related", "established"];
      if (!v.every((s) => order.includes(s))) return bad(`ct state ${v}`);
      m.push(
        "-m",
        "conntrack",
        "--ctstate",
        order
          .filter((s) => v.includes(s))
          .map((s) => s.toUpperCase())
          .join(","),
      );
    } else if (a === "meta" && b === "mark" && w[i + 1] !== "set") {
      i++;
      const n = neg();
      const v = take() ?? "";
      if (!HEX8.test(v)) return bad(`mark ${v}`);
      m.push("-m", "mark", ...(n ? ["!"] : []), "--mark", hexOf(v));
    } else if (a === "ct" && b === "mark" && w[i + 1] !== "set") {
      i++;
      const v = take() ?? "";
      if (!HEX8.test(v)) return bad(`ct mark ${v}`);
      m.push("-m", "connmark", "--mark", hexOf(v));
    } else if (a === "return" || a === "accept" || a === "drop") {
      target = ["-j", a.toUpperCase()];
    } else if (a === "jump") {
      const v = take() ?? "";
      const [st, ...rest] = v.split("_");
      if (st !== stage || !/^[A-Z][A-Z0-9_]*$/.test(rest.join("_"))) return bad(`jump to ${v}`);
      target = ["-j", rest.join("_")];
    } else if (a === "redirect" && b === "to") {
      i++;
      const v = take() ?? "";
      if (!/^:(0|[1-9][0-9]{0,4})$/.test(v)) return bad(`redirect to ${v}`);
      target = ["-j", "REDIRECT", "--to-ports", v.slice(1)];
    } else if (a === "tproxy" && b === "to") {
      i++;
      const v = take() ?? "";
      const rest = w.slice(i, i + 4);
      if (
        !/^:(0|[1-9][0-9]{0,4})$/.test(v) ||
        rest[0] !== "meta" ||
        rest[1] !== "mark" ||
        rest[2] !== "set" ||
        !HEX8.test(rest[3] ?? "") ||
        w[i + 4] !== "accept"
      ) {
        return bad("tproxy statement");
      }
      i += 5;
      target = [
        "-j",
        "TPROXY",
        "--on-port",
        v.slice(1),
        "--on-ip",
        family === 4 ? "0.0.0.0" : "::",
        "--tproxy-mark",
        `${hexOf(rest[3]!)}/0xffffffff`,
      ];
    } else if (a === "meta" && b === "mark" && w[i + 1] === "set") {
      i += 2;
      const v = take() ?? "";
      if (v === "ct" && w[i] === "mark") {
        i++;
        target = ["-j", "CONNMARK", "--restore-mark", "--nfmask", "0xffffffff", "--ctmask", "0xffffffff"];
      } else if (HEX8.test(v)) target = ["-j", "MARK", "--set-xmark", `${hexOf(v)}/0xffffffff`];
      else return bad(`mark set ${v}`);
    } else if (a === "ct" && b === "mark" && w[i + 1] === "set") {
      i += 2;
      if (take() !== "meta" || take() !== "mark") return bad("ct mark set");
      target = ["-j", "CONNMARK", "--save-mark", "--nfmask", "0xffffffff", "--ctmask", "0xffffffff"];
    } else if (a === "ct" && b === "zone" && w[i + 1] === "set") {
      i += 2;
      const v = take() ?? "";
      if (!NUM.test(v)) return bad(`zone ${v}`);
      target = ["-j", "CT", "--zone", v];
    } else if (a === "comment") {
      const v = take() ?? "";
      if (target === undefined || i !== w.length || !/^".+"$/.test(v)) return bad("comment");
      comment = v.slice(1, -1);
    } else {
      return bad(`unknown word ${JSON.stringify(a)}`);
    }
  }
  if (!target) return bad("no statement");
  return [...m, ...(comment !== undefined ? ["-m", "comment", "--comment", comment] : []), ...target];
}

const quote = (t: string, prev: string | undefined) => (prev === "--comment" ? `"${t}"` : t);

/** Parses the nft dry-run payload into the sections payload-check.ts judges, or the problems. */
export function parseNftPayload(text: string): Payload | string[] {
  const problems: string[] = [];
  const sections: Section[] = [];
  const ipCommands: Payload["ipCommands"] = [];
  if (!text.endsWith("\n")) problems.push("the payload does not end with a line break");
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  const head = /^# nft -f - \((IPv4|IPv4 and IPv6), one transaction\)$/.exec(lines[0] ?? "");
  if (!head) return [`not an nft payload header: ${JSON.stringify(lines[0])}`];
  let i = 1;
  const declared: { family: 4 | 6; stage: string; name: string }[] = [];
  const jumps: { family: 4 | 6; stage: string; name: string; line: string }[] = [];
  while (i < lines.length && !lines[i]!.startsWith("# ip ")) {
    const m = /^add table (ip6?) meshcni$/.exec(lines[i]!);
    if (!m || lines[i + 1] !== `delete table ${m[1]} meshcni` || lines[i + 2] !== `table ${m[1]} meshcni {`) {
      problems.push(`expected the replace-table preamble at ${JSON.stringify(lines[i])}`);
      return problems;
    }
    const family = m[1] === "ip6" ? 6 : 4;
    if (sections.some((s) => s.family === family)) problems.push(`IPv${family} table twice`);
    const section: Section = { family, chains: [], rules: [] };
    sections.push(section);
    i += 3;
    while (i < lines.length && lines[i] !== "}") {
      const line = lines[i]!;
      if (line === "") {
        i++;
        continue;
      }
      const cm = /^\tchain ([a-z]+)_([A-Za-z0-9_]+) \{$/.exec(line);
      if (!cm || !STAGES.has(cm[1]!)) {
        problems.push(`not a chain: ${JSON.stringify(line)}`);
        return problems;
      }
      const [, stage, name] = cm as unknown as [string, string, string];
      i++;
      const base = name === "PREROUTING" || name === "OUTPUT";
      if (base) {
        const want = SPECS[`${stage}/${name}`];
        if (lines[i] !== `\t\t${want}`)
          problems.push(`base chain ${stage}_${name} declared as ${JSON.stringify(lines[i])}`);
        i++;
      } else {
        if (!/^[A-Z][A-Z0-9_]{0,28}$/.test(name)) problems.push(`chain name ${name}`);
        section.chains.push({ table: stage, name });
        declared.push({ family, stage, name });
      }
      while (i < lines.length && lines[i] !== "\t}") {
        const rl = lines[i]!;
        if (!rl.startsWith("\t\t") || rl.startsWith("\t\t\t")) {
          problems.push(`not a rule line: ${JSON.stringify(rl)}`);
          return problems;
        }
        const t = translate(rl.slice(2), stage, family);
        if (typeof t === "string") problems.push(`IPv${family} ${stage}_${name}: ${t}`);
        else {
          const jIdx = t.indexOf("-j");
          const target = t[jIdx + 1]!;
          if (
            /^[A-Z][A-Z0-9_]*$/.test(target) &&
            target.includes("_") &&
            !["RETURN", "ACCEPT", "DROP"].includes(target)
          ) {
            jumps.push({ family, stage, name: target, line: rl });
          }
          const rule: Rule = {
            table: stage,
            op: "-A",
            chain: name,
            tokens: t,
            line: `-A ${name} ${t.map((x, k) => quote(x, t[k - 1])).join(" ")}`,
          };
          section.rules.push(rule);
        }
        i++;
      }
      if (lines[i] !== "\t}") {
        problems.push(`chain ${stage}_${name} not closed`);
        return problems;
      }
      i++;
    }
    if (lines[i] !== "}") {
      problems.push(`table ip${family === 6 ? "6" : ""} meshcni not closed`);
      return problems;
    }
    i++;
  }
  for (; i < lines.length; i++) {
    const ip = /^# ip -([46]) (.+)$/.exec(lines[i]!);
    if (!ip) problems.push(`line after the tables: ${JSON.stringify(lines[i])}`);
    else ipCommands.push({ family: Number(ip[1]) as 4 | 6, argv: ip[2]! });
  }
  for (const j of jumps) {
    if (!declared.some((d) => d.family === j.family && d.stage === j.stage && d.name === j.name))
      problems.push(`jump to a chain the script does not declare: ${j.line}`);
  }
  const fams = sections.map((s) => `IPv${s.family}`).join(" and ");
  if (head[1] !== fams) problems.push(`header says ${head[1]}, the script has ${fams}`);
  return problems.length > 0 ? problems : { sections, ipCommands };
}
