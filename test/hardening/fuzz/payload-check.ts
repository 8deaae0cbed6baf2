// An independent reader of the dry-run payload (MESHCNI_DRY_RUN_FILE): it tokenises every
// iptables-restore line itself, checks the grammar (known tables, chains, options; no stray
// lines; no token that looks like an option where a value belongs), and then checks every value
// against what the pod's annotations and the config mean (expect.ts): ports, CIDRs (and their
// family), user ids, interface names, redirect targets; and that every meant value is there.
import type { IstioRules, LinkerdRules, RulesExpect } from "./expect.ts";
import { parseNftPayload } from "./nft-read.ts";
import type { CidrValue } from "./values.ts";

export interface Rule {
  table: string;
  op: "-A" | "-I";
  chain: string;
  tokens: string[];
  line: string;
}

export interface Section {
  family: 4 | 6;
  /** Read from the nftables backend's script (nft-read.ts) rather than iptables-restore text. */
  nft?: boolean;
  chains: { table: string; name: string }[];
  rules: Rule[];
}

export interface Payload {
  sections: Section[];
  ipCommands: { family: 4 | 6; argv: string }[];
}

/** Splits a restore line into tokens: words, or "quoted strings" with \\ and \" escapes. */
export function tokenize(text: string): string[] | string {
  const out: string[] = [];
  let i = 0;
  while (i < text.length) {
    if (text[i] === " ") {
      i++;
      continue;
    }
    if (text[i] === '"') {
      let tok = "";
      i++;
      for (;;) {
        if (i >= text.length) return `unterminated quote in ${JSON.stringify(text)}`;
        const ch = text[i]!;
        if (ch === "\\") {
          tok += text[i + 1] ?? "";
          i += 2;
        } else if (ch === '"') {
          i++;
          break;
        } else {
          tok += ch;
          i++;
        }
      }
      if (i < text.length && text[i] !== " ") return `text right after a quoted token in ${JSON.stringify(text)}`;
      out.push(tok);
      continue;
    }
    let j = i;
    while (j < text.length && text[j] !== " ") j++;
    const tok = text.slice(i, j);
    if (tok.includes('"')) return `a quote inside a word in ${JSON.stringify(text)}`;
    out.push(tok);
    i = j;
  }
  return out;
}

const TABLES = new Set(["nat", "mangle", "raw", "filter"]);
const BUILTIN = new Set(["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]);
const CHAIN_NAME = /^[A-Z][A-Z0-9_]{0,28}$/;

/** Parses the dry-run file; returns the problems instead when it does not follow the grammar. */
export function parsePayload(text: string): Payload | string[] {
  const problems: string[] = [];
  const sections: Section[] = [];
  const ipCommands: Payload["ipCommands"] = [];
  let section: Section | undefined;
  let table: string | undefined;
  if (text !== "" && !text.endsWith("\n")) problems.push("the payload does not end with a line break");
  const lines = text.split("\n");
  if (lines.at(-1) === "") lines.pop();
  for (const line of lines) {
    const head = /^# (ip6?)tables-restore --noflush \(IPv([46])\)$/.exec(line);
    if (head) {
      if (table) problems.push(`section starts inside *${table}`);
      const family = Number(head[2]) as 4 | 6;
      if ((head[1] === "ip6") !== (family === 6)) problems.push(`header names the wrong tool: ${line}`);
      section = { family, chains: [], rules: [] };
      sections.push(section);
      continue;
    }
    const ip = /^# ip -([46]) (.+)$/.exec(line);
    if (ip) {
      if (table) problems.push(`ip command inside *${table}`);
      ipCommands.push({ family: Number(ip[1]) as 4 | 6, argv: ip[2]! });
      continue;
    }
    if (!section) {
      problems.push(`line before any section: ${JSON.stringify(line)}`);
      continue;
    }
    if (line.startsWith("*")) {
      if (table) problems.push(`*${line.slice(1)} inside *${table}`);
      table = line.slice(1);
      if (!TABLES.has(table)) problems.push(`unknown table ${JSON.stringify(table)}`);
      continue;
    }
    if (line === "COMMIT") {
      if (!table) problems.push("COMMIT outside a table");
      table = undefined;
      continue;
    }
    if (!table) {
      problems.push(`line outside a table: ${JSON.stringify(line)}`);
      continue;
    }
    const nm = /^-N (\S+)$/.exec(line);
    if (nm) {
      if (!CHAIN_NAME.test(nm[1]!) || BUILTIN.has(nm[1]!))
        problems.push(`bad chain to create: ${JSON.stringify(nm[1])}`);
      section.chains.push({ table, name: nm[1]! });
      continue;
    }
    const rm = /^(-A|-I) (\S+) (.*)$/.exec(line);
    if (!rm) {
      problems.push(`not a rule: ${JSON.stringify(line)}`);
      continue;
    }
    const tokens = tokenize(rm[3]!);
    if (typeof tokens === "string") {
      problems.push(tokens);
      continue;
    }
    const chain = rm[2]!;
    if (!CHAIN_NAME.test(chain)) problems.push(`bad chain name ${JSON.stringify(chain)}`);
    if (!BUILTIN.has(chain) && !section.chains.some((c) => c.table === table && c.name === chain)) {
      problems.push(`rule in chain ${chain} that the payload does not create`);
    }
    let args = tokens;
    if (rm[1] === "-I") {
      if (!/^[1-9][0-9]*$/.test(tokens[0] ?? "")) problems.push(`-I without a position: ${line}`);
      args = tokens.slice(1);
    }
    section.rules.push({ table, op: rm[1] as "-A" | "-I", chain, tokens: args, line });
  }
  if (table) problems.push(`*${table} without COMMIT`);
  return problems.length > 0 ? problems : { sections, ipCommands };
}

/** Options the rule builders use and how many values each takes. */
const OPTIONS: Record<string, number> = {
  "-p": 1,
  "-m": 1,
  "--dports": 1,
  "--dport": 1,
  "--sport": 1,
  "--comment": 1,
  "-j": 1,
  "--to-ports": 1,
  "-s": 1,
  "-d": 1,
  "-i": 1,
  "-o": 1,
  "--uid-owner": 1,
  "--gid-owner": 1,
  "--ctstate": 1,
  "--mark": 1,
  "--set-xmark": 1,
  "--on-port": 1,
  "--on-ip": 1,
  "--tproxy-mark": 1,
  "--save-mark": 0,
  "--restore-mark": 0,
  "--nfmask": 1,
  "--ctmask": 1,
  "--zone": 1,
};

export interface Option {
  name: string;
  value?: string;
  negated: boolean;
}

/** A rule's options in order; a problem when a token is neither a known option nor its value. */
export function readOptions(r: Rule): Option[] | string {
  const out: Option[] = [];
  let negate = false;
  for (let i = 0; i < r.tokens.length; i++) {
    const t = r.tokens[i]!;
    if (!/^[\x21-\x7e]+$/.test(t))
      return `token with a space, control or non-ASCII character: ${JSON.stringify(t)} in ${r.line}`;
    if (t === "!") {
      negate = true;
      continue;
    }
    const arity = OPTIONS[t];
    if (arity === undefined) return `unknown token ${JSON.stringify(t)} in ${r.line}`;
    const opt: Option = { name: t, negated: negate };
    negate = false;
    if (arity === 1) {
      const v = r.tokens[++i];
      if (v === undefined) return `${t} without a value in ${r.line}`;
      if (v.startsWith("-") || v === "!") return `${t} followed by ${JSON.stringify(v)} in ${r.line}`;
      opt.value = v;
    }
    out.push(opt);
  }
  if (negate) return `a dangling ! in ${r.line}`;
  return out;
}

const get = (opts: Option[], name: string) => opts.find((o) => o.name === name);
const values = (opts: Option[], name: string) => opts.filter((o) => o.name === name);

const PORT = /^(0|[1-9][0-9]{0,4})$/;
function portOk(p: string): boolean {
  if (PORT.test(p)) return Number(p) <= 65535;
  const m = /^(0|[1-9][0-9]{0,4}):(0|[1-9][0-9]{0,4})$/.exec(p);
  return !!m && Number(m[1]) < Number(m[2]) && Number(m[2]) <= 65535;
}

const cidrTexts = (cidrs: readonly CidrValue[], f: 4 | 6) =>
  new Set(cidrs.filter((c) => c.family === f).map((c) => c.text));

/** Ports ("80", "25:27") as sorted, merged intervals. */
function portUnion(items: readonly string[]): [number, number][] {
  const iv = items
    .map((p) => {
      const [a, b] = p.split(":");
      return [Number(a), Number(b ?? a)] as [number, number];
    })
    .sort((x, y) => x[0] - y[0]);
  const out: [number, number][] = [];
  for (const [a, b] of iv) {
    const last = out.at(-1);
    if (last && a <= last[1] + 1) last[1] = Math.max(last[1], b);
    else out.push([a, b]);
  }
  return out;
}
const covers = (u: [number, number][], p: string) => {
  const [[a, b]] = portUnion([p]) as [[number, number]];
  return u.some(([x, y]) => x <= a && b <= y);
};
const sameUnion = (a: [number, number][], b: [number, number][]) => JSON.stringify(a) === JSON.stringify(b);

function missing<T>(want: Iterable<T>, have: Set<T>): T[] {
  return [...new Set(want)].filter((x) => !have.has(x));
}

// --- Linkerd ---------------------------------------------------------------------------------

function checkLinkerd(s: Section, e: LinkerdRules, problems: string[]): void {
  const R = "PROXY_INIT_REDIRECT";
  const O = "PROXY_INIT_OUTPUT";
  const f = s.family;
  const subnets = cidrTexts(e.subnets, f);
  const seen = {
    in: new Set<string>(),
    out: new Set<string>(),
    subnets: new Set<string>(),
    redirect: new Set<string>(),
    uid: false,
    gid: false,
    all: false,
  };
  const chains = s.chains
    .map((c) => `${c.table}/${c.name}`)
    .sort()
    .join(",");
  if (chains !== `nat/${O},nat/${R}`) problems.push(`IPv${f}: creates ${chains}`);
  for (const r of s.rules) {
    const bad = (why: string) => problems.push(`IPv${f}: ${why}: ${r.line}`);
    if (r.table !== "nat" || r.op !== "-A" || ![R, O, "PREROUTING", "OUTPUT"].includes(r.chain)) {
      bad("rule outside Linkerd's chains");
      continue;
    }
    const opts = readOptions(r);
    if (typeof opts === "string") {
      problems.push(opts);
      continue;
    }
    for (const o of opts) {
      if (o.negated) bad("a negated match");
      if (
        ![
          "-p",
          "-m",
          "--dports",
          "--dport",
          "--comment",
          "-j",
          "--to-ports",
          "-s",
          "-o",
          "--uid-owner",
          "--gid-owner",
        ].includes(o.name)
      )
        bad(`option ${o.name}`);
    }
    const target = get(opts, "-j")?.value;
    const expectedTarget = r.chain === "PREROUTING" ? [R] : r.chain === "OUTPUT" ? [O] : ["RETURN", "REDIRECT"];
    if (!target || !expectedTarget.includes(target)) bad(`jump to ${target}`);
    for (const o of values(opts, "-p")) if (o.value !== "tcp") bad(`protocol ${o.value}`);
    for (const o of values(opts, "-m"))
      if (!["multiport", "comment", "owner", "tcp"].includes(o.value!)) bad(`match ${o.value}`);
    const comment = get(opts, "--comment")?.value ?? "";
    if (!comment.startsWith("proxy-init/")) bad("no proxy-init/ comment");
    // nftables lists a one-port set as a plain port and merges touching ports into ranges, so
    // ignored ports are judged by the ports they cover; the iptables text also by its spelling.
    const dports = get(opts, "--dports")?.value ?? (target === "RETURN" ? get(opts, "--dport")?.value : undefined);
    if (dports !== undefined) {
      const items = dports.split(",");
      const allowed = portUnion(r.chain === R ? e.inPorts : e.outPorts);
      let slots = 0;
      for (const p of items) {
        slots += p.includes(":") ? 2 : 1;
        if (!portOk(p)) bad(`port ${JSON.stringify(p)}`);
        else if (!covers(allowed, p)) bad(`port ${p} that neither the config nor the annotations name`);
        (r.chain === R ? seen.in : seen.out).add(p);
      }
      const listed = comment.startsWith("proxy-init/ignore-port-")
        ? comment.slice("proxy-init/ignore-port-".length).split(",")
        : [];
      if (s.nft) {
        if (!listed.every(portOk) || !sameUnion(portUnion(listed), portUnion(items)))
          bad("comment does not match the ports");
      } else {
        if (slots > 15) bad("more than 15 multiport slots");
        if (comment !== `proxy-init/ignore-port-${dports}`) bad("comment does not match the ports");
      }
      if (target !== "RETURN") bad("ignored ports that do not return");
    }
    const dport = target === "RETURN" ? undefined : get(opts, "--dport")?.value;
    if (dport !== undefined) {
      if (r.chain !== R || !e.redirectPorts.includes(dport)) bad(`redirected port ${dport} not in ports-to-redirect`);
      seen.redirect.add(dport);
      if (comment !== `proxy-init/redirect-port-${dport}-to-proxy-port`) bad("comment does not match the port");
    }
    const to = get(opts, "--to-ports")?.value;
    if (to !== undefined && to !== String(r.chain === R ? e.incoming : e.outgoing)) bad(`redirect to ${to}`);
    if (target === "REDIRECT" && to === undefined) bad("REDIRECT without --to-ports");
    if (r.chain === R && target === "REDIRECT" && dport === undefined) {
      seen.all = true;
      if (e.redirectPorts.length > 0) bad("redirects every port although ports-to-redirect lists some");
    }
    const src = get(opts, "-s")?.value;
    if (src !== undefined) {
      if (!subnets.has(src)) bad(`source ${src} is not a skip-subnets entry of IPv${f}`);
      seen.subnets.add(src);
      if (comment !== `proxy-init/ignore-subnet-${src}`) bad("comment does not match the subnet");
    }
    const out = get(opts, "-o")?.value;
    if (out !== undefined && out !== "lo") bad(`interface ${out}`);
    const uid = get(opts, "--uid-owner")?.value;
    if (uid !== undefined) {
      if (uid !== String(e.uid) || e.uid <= 0) bad(`uid ${uid}, expected ${e.uid}`);
      seen.uid = true;
    }
    const gid = get(opts, "--gid-owner")?.value;
    if (gid !== undefined) {
      if (gid !== String(e.gid) || e.gid <= 0) bad(`gid ${gid}, expected ${e.gid}`);
      seen.gid = true;
    }
  }
  const gone = (what: string, xs: unknown[]) =>
    xs.length > 0 &&
    problems.push(
      `IPv${f}: ${what} missing: ${xs.slice(0, 5).join(", ")}${xs.length > 5 ? ` (+${xs.length - 5})` : ""}`,
    );
  gone(
    "inbound ports to ignore",
    e.inPorts.filter((p) => !covers(portUnion([...seen.in]), p)),
  );
  gone(
    "outbound ports to ignore",
    e.outPorts.filter((p) => !covers(portUnion([...seen.out]), p)),
  );
  gone("subnets to ignore", missing(subnets, seen.subnets));
  gone("ports to redirect", missing(e.redirectPorts, seen.redirect));
  if (e.redirectPorts.length === 0 && !seen.all) problems.push(`IPv${f}: no redirect-all rule`);
  // The fixed rules, once each.
  const count = (chain: string, re: RegExp) => s.rules.filter((r) => r.chain === chain && re.test(r.line)).length;
  const fixed: [string, string, RegExp][] = [
    ["the jump from PREROUTING", "PREROUTING", new RegExp(`-j ${R}$`)],
    ["the jump from OUTPUT", "OUTPUT", new RegExp(`-j ${O}$`)],
    ["the loopback exemption", O, / -o lo .*-j RETURN$/],
    ["the outbound redirect", O, /-j REDIRECT --to-ports \d+$/],
  ];
  for (const [what, chain, re] of fixed) {
    const n = count(chain, re);
    if (n !== 1) problems.push(`IPv${f}: ${what} ${n === 0 ? "is missing" : `is there ${n} times`}`);
  }
  if (e.uid > 0 !== seen.uid) problems.push(`IPv${f}: proxy uid ${e.uid} rule ${seen.uid ? "present" : "missing"}`);
  if (e.gid > 0 !== seen.gid) problems.push(`IPv${f}: proxy gid ${e.gid} rule ${seen.gid ? "present" : "missing"}`);
}

// --- Istio -----------------------------------------------------------------------------------

const ISTIO_TARGETS = new Set(["RETURN", "REDIRECT", "ACCEPT", "MARK", "TPROXY", "CONNMARK", "CT", "DROP"]);

function checkIstio(s: Section, e: IstioRules, problems: string[]): void {
  const f = s.family;
  const loHost = f === 4 ? "127.0.0.1/32" : "::1/128";
  const passthrough = f === 4 ? "127.0.0.6/32" : "::6/128";
  const includeOut = e.includeOut === "*" ? undefined : cidrTexts(e.includeOut, f);
  const excludeOut = cidrTexts(e.excludeOut, f);
  const ifaces = new Set([...e.excludeIfaces, ...e.rerouteIfaces, "lo"]);
  const includeIn = e.includeIn === "*" ? undefined : new Set(e.includeIn);
  const excludeIn = new Set([...e.excludeIn, String(e.tunnelPort)]);
  const seen = {
    includeOut: new Set<string>(),
    excludeOut: new Set<string>(),
    includeIn: new Set<string>(),
    excludeIn: new Set<string>(),
    includeOutPorts: new Set<string>(),
    excludeOutPorts: new Set<string>(),
    ifaces: new Set<string>(),
    uid: false,
    gid: false,
    all: false,
  };
  const inboundTable = e.mode === "TPROXY" ? "mangle" : "nat";
  const capturesInbound = e.includeIn === "*" || e.includeIn.length > 0;
  for (const c of s.chains) {
    if (!c.name.startsWith("ISTIO_")) problems.push(`IPv${f}: creates ${c.table}/${c.name}`);
  }
  for (const r of s.rules) {
    const bad = (why: string) => problems.push(`IPv${f}: ${why}: ${r.line}`);
    if (!["nat", "mangle", "raw"].includes(r.table)) bad("table");
    if (!r.chain.startsWith("ISTIO_") && !BUILTIN.has(r.chain)) bad("chain");
    const opts = readOptions(r);
    if (typeof opts === "string") {
      problems.push(opts);
      continue;
    }
    const target = get(opts, "-j")?.value;
    if (!target || !(ISTIO_TARGETS.has(target) || /^ISTIO_[A-Z_]+$/.test(target))) bad(`jump to ${target}`);
    for (const o of opts) {
      const v = o.value ?? "";
      switch (o.name) {
        case "-p":
          if (!["tcp", "udp"].includes(v)) bad(`protocol ${v}`);
          break;
        case "-m":
          if (!["tcp", "udp", "multiport", "owner", "conntrack", "mark", "connmark"].includes(v)) bad(`match ${v}`);
          break;
        case "-i":
        case "-o":
          if (!ifaces.has(v)) bad(`interface ${JSON.stringify(v)} not in the annotations`);
          else if (v !== "lo") seen.ifaces.add(v);
          break;
        case "--uid-owner":
          if (v !== String(e.uid)) bad(`uid ${v}, expected ${e.uid}`);
          seen.uid = true;
          break;
        case "--gid-owner":
          if (v !== String(e.gid)) bad(`gid ${v}, expected ${e.gid}`);
          seen.gid = true;
          break;
        case "-s":
          if (v !== passthrough) bad(`source ${v}`);
          break;
        case "-d": {
          if (o.negated) {
            if (v !== loHost) bad(`negated destination ${v}`);
          } else if (target === "RETURN") {
            if (!excludeOut.has(v) && v !== loHost)
              bad(`excluded destination ${v} not in excludeOutboundIPRanges (IPv${f})`);
            seen.excludeOut.add(v);
          } else if (target === "ISTIO_REDIRECT") {
            if (!includeOut?.has(v)) bad(`captured destination ${v} not in includeOutboundIPRanges (IPv${f})`);
            seen.includeOut.add(v);
          } else bad(`destination ${v}`);
          break;
        }
        case "--dport": {
          if (!portOk(v)) bad(`port ${v}`);
          if (o.negated) {
            if (v !== String(e.tunnelPort) && !(e.dns && v === "53")) bad(`negated port ${v}`);
          } else if (r.chain === "ISTIO_INBOUND" && target === "RETURN" && r.table !== "raw") {
            if (!excludeIn.has(v)) bad(`inbound port ${v} excluded but not in excludeInboundPorts`);
            seen.excludeIn.add(v);
          } else if (
            r.chain === "ISTIO_INBOUND" &&
            ["ISTIO_IN_REDIRECT", "ISTIO_DIVERT", "ISTIO_TPROXY"].includes(target ?? "")
          ) {
            if (!includeIn?.has(v)) bad(`inbound port ${v} captured but not in includeInboundPorts`);
            seen.includeIn.add(v);
          } else if (r.chain === "ISTIO_OUTPUT" && target === "RETURN") {
            if (!e.excludeOutPorts.includes(v)) bad(`outbound port ${v} excluded but not in excludeOutboundPorts`);
            seen.excludeOutPorts.add(v);
          } else if (r.chain === "ISTIO_OUTPUT" && target === "ISTIO_REDIRECT") {
            if (!e.includeOutPorts.includes(v)) bad(`outbound port ${v} captured but not in includeOutboundPorts`);
            seen.includeOutPorts.add(v);
          } else if (v !== "53") bad(`port ${v}`);
          break;
        }
        case "--dports":
          if (!o.negated || !sameUnion(portUnion(v.split(",")), portUnion(["53", String(e.tunnelPort)])))
            bad(`ports ${v}`);
          break;
        case "--sport":
          if (v !== "53" && v !== "15053") bad(`source port ${v}`);
          break;
        case "--to-ports": {
          const want =
            r.chain === "ISTIO_REDIRECT" ? e.proxyPort : r.chain === "ISTIO_IN_REDIRECT" ? e.capturePort : 15053;
          if (v !== String(want)) bad(`redirect to ${v}, expected ${want}`);
          break;
        }
        case "--on-port":
          if (v !== String(e.capturePort)) bad(`TPROXY to ${v}`);
          break;
        case "--on-ip":
          if (v !== (f === 4 ? "0.0.0.0" : "::")) bad(`TPROXY on ${v}`);
          break;
        case "--ctstate":
          if (!["INVALID", "RELATED,ESTABLISHED"].includes(v)) bad(`ctstate ${v}`);
          break;
        case "--mark":
          if (v !== "0x539" && !(o.negated && v === "0x53a")) bad(`mark ${v}`);
          break;
        case "--set-xmark":
          if (v !== "0x539/0xffffffff" && v !== "0x53a/0xffffffff") bad(`set-xmark ${v}`);
          break;
        case "--tproxy-mark":
          if (v !== "0x539/0xffffffff") bad(`tproxy-mark ${v}`);
          break;
        case "--nfmask":
        case "--ctmask":
          if (v !== "0xffffffff") bad(`mask ${v}`);
          break;
        case "--zone":
          if (v !== "1" && v !== "2") bad(`zone ${v}`);
          break;
        case "--save-mark":
        case "--restore-mark":
        case "-j":
          break;
        default:
          bad(`option ${o.name}`);
      }
    }
    if (r.chain === "ISTIO_OUTPUT" && target === "ISTIO_REDIRECT" && opts.length === 1) seen.all = true;
    if (target === "TPROXY" && e.mode !== "TPROXY") bad("TPROXY in REDIRECT mode");
  }
  const rulesOf = (table: string, chain: string) => s.rules.filter((r) => r.table === table && r.chain === chain);
  const gone = (what: string, xs: unknown[]) =>
    xs.length > 0 &&
    problems.push(
      `IPv${f}: ${what} missing: ${xs.slice(0, 5).join(", ")}${xs.length > 5 ? ` (+${xs.length - 5})` : ""}`,
    );
  gone("excludeOutboundIPRanges", missing(excludeOut, seen.excludeOut));
  if (includeOut) gone("includeOutboundIPRanges", missing(includeOut, seen.includeOut));
  else if (!seen.all) problems.push(`IPv${f}: no capture-all outbound rule for includeOutboundIPRanges "*"`);
  if (includeIn) gone("includeInboundPorts", missing(includeIn, seen.includeIn));
  else gone("excludeInboundPorts", missing(e.excludeIn, seen.excludeIn));
  gone("excludeOutboundPorts", missing(e.excludeOutPorts, seen.excludeOutPorts));
  gone("includeOutboundPorts", missing(e.includeOutPorts, seen.includeOutPorts));
  gone("interfaces", missing([...e.excludeIfaces, ...e.rerouteIfaces], seen.ifaces));
  if (!seen.uid || !seen.gid) problems.push(`IPv${f}: the proxy's uid/gid rules are missing`);
  const once = (what: string, table: string, chain: string, re: RegExp, times = 1) => {
    const n = s.rules.filter((r) => r.table === table && r.chain === chain && re.test(r.line)).length;
    if (n !== times) problems.push(`IPv${f}: ${what} ${n === 0 ? "is missing" : `is there ${n} times`}`);
  };
  once("the jump from OUTPUT", "nat", "OUTPUT", /^-A OUTPUT -j ISTIO_OUTPUT$/);
  once("the outbound redirect", "nat", "ISTIO_REDIRECT", new RegExp(`-j REDIRECT --to-ports ${e.proxyPort}$`));
  once("the inbound redirect", "nat", "ISTIO_IN_REDIRECT", new RegExp(`-j REDIRECT --to-ports ${e.capturePort}$`));
  once(
    "the passthrough exemption",
    "nat",
    "ISTIO_OUTPUT",
    new RegExp(`^-A ISTIO_OUTPUT -s ${passthrough.replace(/[.]/g, "\\.")} -o lo -j RETURN$`),
  );
  // Once, and once more when excludeOutboundIPRanges names localhost itself.
  once(
    "the localhost exemption",
    "nat",
    "ISTIO_OUTPUT",
    new RegExp(`^-A ISTIO_OUTPUT -d ${loHost.replace(/[.]/g, "\\.")} -j RETURN$`),
    excludeOut.has(loHost) ? 2 : 1,
  );
  if (capturesInbound && !rulesOf(inboundTable, "PREROUTING").some((r) => r.tokens.includes("ISTIO_INBOUND"))) {
    problems.push(`IPv${f}: inbound capture not hooked into ${inboundTable} PREROUTING`);
  }
  if (
    !capturesInbound &&
    s.rules.some((r) => r.chain === "PREROUTING" && r.tokens.at(-1) === "ISTIO_INBOUND" && r.table !== "raw")
  ) {
    problems.push(`IPv${f}: inbound captured although no inbound port is`);
  }
  if (e.dns !== s.rules.some((r) => r.chain === "ISTIO_OUTPUT_DNS"))
    problems.push(`IPv${f}: DNS capture ${e.dns ? "missing" : "present"}`);
  if (e.dropInvalid !== s.rules.some((r) => r.chain === "ISTIO_DROP"))
    problems.push(`IPv${f}: INVALID_DROP ${e.dropInvalid ? "missing" : "present"}`);
}

/** Problems with a payload for an accepted case; `rules` undefined means only the grammar is known. */
export function checkPayload(text: string, rules: RulesExpect | undefined): string[] {
  const nft = text.startsWith("# nft ");
  const parsed = nft ? parseNftPayload(text) : parsePayload(text);
  if (!Array.isArray(parsed)) for (const s of parsed.sections) s.nft = nft;
  if (Array.isArray(parsed)) return parsed;
  const problems: string[] = [];
  for (const s of parsed.sections) {
    for (const r of s.rules) {
      const opts = readOptions(r);
      if (typeof opts === "string") problems.push(opts);
      // Every address token must be of the section's family.
      else
        for (const o of opts) {
          if ((o.name === "-s" || o.name === "-d") && o.value!.includes(":") !== (s.family === 6))
            problems.push(`IPv${s.family} rule with ${o.value}: ${r.line}`);
        }
    }
  }
  const families = parsed.sections.map((s) => s.family).join(",");
  if (parsed.sections.length === 0) problems.push("no section");
  if (!["4", "4,6"].includes(families)) problems.push(`sections for IPv ${families}`);
  for (const c of parsed.ipCommands) {
    const known = [
      "addr replace ::6/128 dev lo",
      "rule add fwmark 1337 lookup 133 pref 32765",
      "route replace local default dev lo table 133",
    ];
    if (!known.includes(c.argv)) problems.push(`unknown ip command: ip -${c.family} ${c.argv}`);
  }
  if (!rules || problems.length > 0) return problems;
  const wantV6 = rules.ipv6;
  if (families !== (wantV6 ? "4,6" : "4"))
    problems.push(`sections for IPv ${families}, expected ${wantV6 ? "4,6" : "4"}`);
  for (const s of parsed.sections) {
    if (rules.mesh === "linkerd") checkLinkerd(s, rules, problems);
    else checkIstio(s, rules, problems);
  }
  if (rules.mesh === "linkerd" && parsed.ipCommands.length > 0) problems.push("ip commands for a Linkerd pod");
  if (rules.mesh === "istio") {
    const want: string[] = [];
    if (rules.ipv6) want.push("6 addr replace ::6/128 dev lo");
    const captures = rules.includeIn === "*" || rules.includeIn.length > 0;
    if (rules.mode === "TPROXY" && captures) {
      for (const f of rules.ipv6 ? [4, 6] : [4])
        want.push(
          `${f} rule add fwmark 1337 lookup 133 pref 32765`,
          `${f} route replace local default dev lo table 133`,
        );
    }
    const have = parsed.ipCommands.map((c) => `${c.family} ${c.argv}`);
    if (have.join("|") !== want.join("|"))
      problems.push(`ip commands ${JSON.stringify(have)}, expected ${JSON.stringify(want)}`);
  }
  return problems;
}
