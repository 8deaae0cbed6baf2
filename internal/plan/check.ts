// A plan that arrives as JSON (the node agent plans an ADD, the plugin applies it) is checked
// here against the model before any backend renders it: every chain name, interface name,
// comment, address, number and word must be one the model allows (model.ts), so a backend still
// writes only values that parsed, whoever built the plan. Pure. Hand-written rather than a
// valibot schema: it runs on the plugin's hot path, which loads no schema library.
import { parseCidr } from "../net/cidr.ts";
import type { PortRange } from "../net/ports.ts";
import {
  type Action,
  type Family,
  type FamilyPlan,
  HOOKS,
  type IpCommand,
  isChainName,
  isCommentText,
  isIfaceName,
  type Match,
  type Plan,
  type PlanRule,
  type Stage,
} from "./model.ts";

const STAGES: readonly string[] = ["filter", "mangle", "nat", "raw"] satisfies Stage[];
const CT_STATES: readonly string[] = ["INVALID", "RELATED", "ESTABLISHED"];
/**
 * The `ip` commands a plan may hold, word for word, with NUM for a number: the ones the Istio
 * profile writes (mesh/istio/rules.ts: the ::6 address, TPROXY's policy rule and local route).
 * Anything else (another subcommand, an option such as -batch or -n, `netns`) is refused: `ip`
 * runs as root with the host's files.
 */
const IP_COMMANDS: readonly (readonly string[])[] = [
  ["addr", "replace", "::6/128", "dev", "lo"],
  ["rule", "add", "fwmark", "NUM", "lookup", "NUM", "pref", "NUM"],
  ["route", "replace", "local", "default", "dev", "lo", "table", "NUM"],
];
/** A number in an `ip` command: 1 to 10 digits, not starting with 0. isIpNum checks it with a loop. */
export const IP_NUM = /^[1-9][0-9]{0,9}$/;

/** What IP_NUM matches, without a RegExp to compile on the plugin's hot path (check.test.ts holds the two together). */
export function isIpNum(s: string): boolean {
  if (s.length === 0 || s.length > 10 || s.charCodeAt(0) === 48) return false;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 48 || c > 57) return false;
  }
  return true;
}
/** Chains a plan may not declare as its own: the hooks and netfilter's other built-in chains. */
const BUILTIN = new Set(["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]);

class PlanError extends Error {
  override name = "PlanError";
}

const isObj = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);

/**
 * xs.map(f) as a plain loop: this runs in the plugin's fresh process, where each callback builtin
 * (map, every, some, ...) is compiled on its first use (perf: see docs/benchmarks.md).
 */
function each<T, U>(xs: readonly T[], f: (x: T, i: number) => U): U[] {
  const out: U[] = [];
  for (let i = 0; i < xs.length; i++) out.push(f(xs[i]!, i));
  return out;
}
const isArr = (x: unknown): x is unknown[] => Array.isArray(x);

function fail(where: string, what: string): never {
  throw new PlanError(`${where}: ${what}`);
}

function uint(x: unknown, max: number, where: string): number {
  if (typeof x !== "number" || !Number.isInteger(x) || x < 0 || x > max)
    fail(where, `${JSON.stringify(x)} is not a whole number from 0 to ${max}`);
  return x;
}

function word<T extends string>(x: unknown, allowed: readonly string[], where: string): T {
  if (typeof x !== "string" || !allowed.includes(x))
    fail(where, `${JSON.stringify(x)} is not one of ${allowed.join(", ")}`);
  return x as T;
}

/** A string `ok` accepts (model.ts's isChainName, isIfaceName or isCommentText). */
function text(x: unknown, ok: (s: string) => boolean, where: string): string {
  if (typeof x !== "string" || !ok(x)) fail(where, `${JSON.stringify(x)} is not allowed here`);
  return x;
}

const flag = (x: unknown, where: string): boolean | undefined => {
  if (x === undefined) return undefined;
  if (typeof x !== "boolean") fail(where, "not true or false");
  return x;
};

/** A rule's chain: a hook, or a chain the plan declares for the rule's stage. */
function ruleChain(x: unknown, stage: Stage, declared: ReadonlySet<string>, where: string): string {
  if (typeof x === "string" && (HOOKS.has(x) || declared.has(`${stage} ${x}`))) return x;
  return fail(where, `${JSON.stringify(x)} is neither PREROUTING, OUTPUT nor a chain the plan declares for ${stage}`);
}

function checkPorts(x: unknown, where: string): PortRange[] {
  if (!isArr(x) || x.length === 0 || x.length > 64) fail(where, "ports must be a list of 1 to 64 ranges");
  return each(x, (r, i) => {
    if (!isObj(r)) fail(`${where}[${i}]`, "not a port range");
    const from = uint(r.from, 65535, `${where}[${i}].from`);
    const to = uint(r.to, 65535, `${where}[${i}].to`);
    if (to < from) fail(`${where}[${i}]`, "the range ends before it starts");
    return { from, to };
  });
}

/** An address range of the rule's family, in the normalised form the profiles write (net/cidr.ts). */
function cidrOf(x: unknown, family: Family, where: string): string {
  const c = typeof x === "string" ? parseCidr(x) : undefined;
  if (!c || c.text !== x) fail(where, `${JSON.stringify(x)} is not an address range as meshcni writes one`);
  if (c.family !== family) fail(where, `${x} is an IPv${c.family} range in the IPv${family} rules`);
  return c.text;
}

function checkMatch(x: unknown, family: Family, where: string): Match {
  if (!isObj(x)) fail(where, "not a match");
  const not = flag(x.not, `${where}.not`);
  const neg = not ? { not } : {};
  switch (x.m) {
    case "proto":
      return { m: "proto", proto: word(x.proto, ["tcp", "udp"], `${where}.proto`) };
    case "port": {
      const list = flag(x.list, `${where}.list`);
      return {
        m: "port",
        proto: word(x.proto, ["tcp", "udp"], `${where}.proto`),
        dir: word(x.dir, ["dst", "src"], `${where}.dir`),
        ports: checkPorts(x.ports, `${where}.ports`),
        ...neg,
        ...(list ? { list } : {}),
      };
    }
    case "addr":
      return {
        m: "addr",
        dir: word(x.dir, ["src", "dst"], `${where}.dir`),
        cidr: cidrOf(x.cidr, family, `${where}.cidr`),
        ...neg,
      };
    case "iface":
      return {
        m: "iface",
        dir: word(x.dir, ["in", "out"], `${where}.dir`),
        name: text(x.name, isIfaceName, `${where}.name`),
      };
    case "owner":
      return {
        m: "owner",
        id: word(x.id, ["uid", "gid"], `${where}.id`),
        value: uint(x.value, 0xffffffff, `${where}.value`),
        ...neg,
      };
    case "ctstate": {
      if (!isArr(x.states) || x.states.length === 0) fail(`${where}.states`, "not a list of states");
      return {
        m: "ctstate",
        states: each(x.states, (s, i) =>
          word<"INVALID" | "RELATED" | "ESTABLISHED">(s, CT_STATES, `${where}.states[${i}]`),
        ),
      };
    }
    case "mark":
      return { m: "mark", value: uint(x.value, 0xffffffff, `${where}.value`), ...neg };
    case "connmark":
      return { m: "connmark", value: uint(x.value, 0xffffffff, `${where}.value`) };
    case "comment":
      return { m: "comment", text: text(x.text, isCommentText, `${where}.text`) };
    default:
      return fail(where, `unknown match ${JSON.stringify(x.m)}`);
  }
}

function checkAction(x: unknown, stage: Stage, declared: ReadonlySet<string>, where: string): Action {
  if (!isObj(x)) fail(where, "not an action");
  switch (x.a) {
    case "return":
    case "accept":
    case "drop":
    case "save-mark":
    case "restore-mark":
      return { a: x.a };
    case "jump": {
      // Only to the plan's own chains of the same stage: never to a target such as NFQUEUE or LOG.
      const chain = text(x.chain, isChainName, `${where}.chain`);
      if (!declared.has(`${stage} ${chain}`))
        fail(`${where}.chain`, `${chain} is not a chain the plan declares for ${stage}`);
      return { a: "jump", chain };
    }
    case "redirect":
      return { a: "redirect", port: uint(x.port, 65535, `${where}.port`) };
    case "tproxy":
      return {
        a: "tproxy",
        port: uint(x.port, 65535, `${where}.port`),
        mark: uint(x.mark, 0xffffffff, `${where}.mark`),
      };
    case "mark":
      return { a: "mark", value: uint(x.value, 0xffffffff, `${where}.value`) };
    case "ct-zone":
      return { a: "ct-zone", zone: uint(x.zone, 65535, `${where}.zone`) };
    default:
      return fail(where, `unknown action ${JSON.stringify(x.a)}`);
  }
}

function checkRule(x: unknown, family: Family, declared: ReadonlySet<string>, where: string): PlanRule {
  if (!isObj(x)) fail(where, "not a rule");
  if (!isArr(x.match) || x.match.length > 32) fail(`${where}.match`, "not a list of at most 32 matches");
  const stage = word<Stage>(x.stage, STAGES, `${where}.stage`);
  const rule: PlanRule = {
    stage,
    chain: ruleChain(x.chain, stage, declared, `${where}.chain`),
    match: each(x.match, (m, i) => checkMatch(m, family, `${where}.match[${i}]`)),
    action: checkAction(x.action, stage, declared, `${where}.action`),
  };
  if (x.insertAt !== undefined) rule.insertAt = uint(x.insertAt, 1000, `${where}.insertAt`);
  return rule;
}

function checkFamily(x: unknown, where: string): FamilyPlan {
  if (!isObj(x)) fail(where, "not a family's plan");
  const family = x.family === 4 || x.family === 6 ? (x.family as Family) : fail(`${where}.family`, "not 4 or 6");
  if (!isArr(x.chains) || x.chains.length > 64) fail(`${where}.chains`, "not a list of at most 64 chains");
  if (!isArr(x.rules) || x.rules.length > 1000) fail(`${where}.rules`, "not a list of at most 1000 rules");
  const chains = each(x.chains, (c, i) => {
    if (!isObj(c)) fail(`${where}.chains[${i}]`, "not a chain");
    const name = text(c.name, isChainName, `${where}.chains[${i}].name`);
    if (BUILTIN.has(name)) fail(`${where}.chains[${i}].name`, `${name} is a built-in chain, not one a plan may own`);
    return { stage: word<Stage>(c.stage, STAGES, `${where}.chains[${i}].stage`), name };
  });
  const declared = new Set<string>();
  for (const c of chains) declared.add(`${c.stage} ${c.name}`);
  return { family, chains, rules: each(x.rules, (r, i) => checkRule(r, family, declared, `${where}.rules[${i}]`)) };
}

function checkIpCommand(x: unknown, where: string): IpCommand {
  if (!isObj(x)) fail(where, "not an ip command");
  const family = x.family === 4 || x.family === 6 ? (x.family as Family) : fail(`${where}.family`, "not 4 or 6");
  const argv = x.argv;
  if (!isArr(argv)) fail(`${where}.argv`, "not a list of words");
  for (const a of argv) if (typeof a !== "string") fail(`${where}.argv`, "not a list of words");
  const fits = (t: readonly string[]) => {
    if (t.length !== argv.length) return false;
    for (let i = 0; i < t.length; i++)
      if (t[i] === "NUM" ? !isIpNum(argv[i] as string) : t[i] !== argv[i]) return false;
    return true;
  };
  let known = false;
  for (const t of IP_COMMANDS) if (fits(t)) known = true;
  if (!known)
    fail(`${where}.argv`, `ip ${JSON.stringify(argv).slice(0, 200)} is not one of the commands a plan may run`);
  return { family, argv: [...(argv as string[])] };
}

/** The plan in `x`, rebuilt from checked values only; throws naming the first value the model does not allow. */
export function checkPlan(x: unknown): Plan {
  if (!isObj(x) || !isArr(x.families) || !isArr(x.ipCommands)) fail("plan", "not a plan (families, ipCommands)");
  if (x.families.length === 0) fail("plan", "no address family: a plan to apply has rules for IPv4, IPv6 or both");
  if (x.families.length > 2 || x.ipCommands.length > 16) fail("plan", "too many families or ip commands");
  const families = each(x.families, (f, i) => checkFamily(f, `families[${i}]`));
  if (families.length === 2 && families[0]!.family === families[1]!.family) fail("plan", "a family appears twice");
  return { families, ipCommands: each(x.ipCommands, (c, i) => checkIpCommand(c, `ipCommands[${i}]`)) };
}
