// The docs say only what the tree and the code say: README.md and docs/*.md are read, and every
// path they name under the source folders must exist, every relative link must resolve (to a
// heading where it names one), every --flag given to meshcni-installer or meshcnictl must be one
// their code parses (internal/agent/options.ts's usage, internal/cli/main.ts's command specs),
// every metric one /metrics serves, and the agent's flag table must list every flag with the
// code's default. The last block feeds the checks broken docs, so each is seen to fail.
import { describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { basename, dirname, join, relative, resolve } from "node:path";
import { renderUsage } from "../../internal/agent/options.ts";
import { COMMAND_SPECS } from "../../internal/cli/main.ts";
import { HELP_OPTION } from "../../internal/cli/spec.ts";
import { ROOT } from "../support/golden.ts";

interface Doc {
  /** Relative to the repository root, e.g. docs/agent.md. */
  path: string;
  text: string;
}

function readDocs(): Doc[] {
  const names = [
    "README.md",
    ...readdirSync(join(ROOT, "docs"))
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
  ];
  return names.map((path) => ({ path, text: readFileSync(join(ROOT, path), "utf8") }));
}

// ---- markdown: fenced blocks, inline code, headings ----

interface Parts {
  /** Lines inside fenced blocks, `\` continuations joined. */
  codeLines: string[];
  /** Lines outside fenced blocks. */
  proseLines: string[];
  headings: string[];
}

function splitMarkdown(text: string): Parts {
  const parts: Parts = { codeLines: [], proseLines: [], headings: [] };
  let fenced = false;
  let pending = "";
  for (const line of text.split("\n")) {
    if (/^\s*```/.test(line)) {
      fenced = !fenced;
      continue;
    }
    if (fenced) {
      if (line.endsWith("\\")) {
        pending += `${line.slice(0, -1)} `;
        continue;
      }
      parts.codeLines.push(pending + line);
      pending = "";
      continue;
    }
    parts.proseLines.push(line);
    const h = /^#{1,6}\s+(.*)$/.exec(line);
    if (h) parts.headings.push(h[1]!);
  }
  return parts;
}

/** Inline code spans of prose lines. */
function codeSpans(proseLines: readonly string[]): string[] {
  const spans: string[] = [];
  for (const line of proseLines) for (const m of line.matchAll(/`([^`]+)`/g)) spans.push(m[1]!);
  return spans;
}

/** Prose with its code spans taken out. */
const plainText = (proseLines: readonly string[]) => proseLines.map((l) => l.replace(/`[^`]*`/g, " ")).join("\n");

/** GitHub's anchor for a heading: inline markup dropped, lower case, punctuation out, spaces as -. */
export function slug(heading: string): string {
  const text = heading
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/[`*]/g, "")
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/ /g, "-");
}

function anchors(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const h of splitMarkdown(text).headings) {
    const base = slug(h);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

// ---- paths ----

const SOURCE_FOLDERS = ["internal", "test", "cmd", "bench", "scripts", "testdata", "manifests"];
const PATH_RE = new RegExp(`(?<![\\w./~-])(?:${SOURCE_FOLDERS.join("|")})/[\\w.*/{},<>@-]*`, "g");

/** A segment that stands for a name: NAME, NS, <arch>. */
const isPlaceholder = (segment: string) =>
  /<[^>]*>/.test(segment) || /(^|[^A-Za-z])[A-Z]{2,}([^A-Za-z]|$)/.test(segment);

function pathExists(root: string, path: string): boolean {
  if (/[*{]/.test(path)) {
    const glob = new Bun.Glob(path.replace(/\/$/, ""));
    for (const _ of glob.scanSync({ cwd: root, onlyFiles: false })) return true;
    return false;
  }
  const full = join(root, path);
  if (!existsSync(full)) return false;
  return path.endsWith("/") ? statSync(full).isDirectory() : true;
}

/** The source paths a doc names that are not in the tree. */
export function missingPaths(docs: readonly Doc[], root = ROOT): string[] {
  const problems: string[] = [];
  for (const doc of docs) {
    for (const m of doc.text.matchAll(PATH_RE)) {
      const path = m[0].replace(/[.,:;)]+$/, "");
      if (pathExists(root, path)) continue;
      const segments = path.split("/");
      const at = segments.findIndex(isPlaceholder);
      // internal/firewall/NAME/index.ts: the folder before the placeholder must exist.
      if (at > 0 && pathExists(root, `${segments.slice(0, at).join("/")}/`)) continue;
      problems.push(`${doc.path}: ${path} does not exist`);
    }
  }
  return problems;
}

// ---- links ----

/** Relative links that lead nowhere: a missing file, or a heading the file does not have. */
export function brokenLinks(docs: readonly Doc[], root = ROOT): string[] {
  const problems: string[] = [];
  for (const doc of docs) {
    const prose = plainText(splitMarkdown(doc.text).proseLines);
    for (const m of prose.matchAll(/\[[^\]]*\]\(([^)\s]+)\)/g)) {
      const target = m[1]!;
      if (/^[a-z]+:/.test(target)) continue;
      const [file, fragment] = target.split("#") as [string, string | undefined];
      const self = file === "";
      const full = self ? join(root, doc.path) : resolve(root, dirname(doc.path), file);
      const shown = relative(root, full);
      if (!self && !existsSync(full)) {
        problems.push(`${doc.path}: link ${target}: ${shown} does not exist`);
        continue;
      }
      if (fragment === undefined) continue;
      if (!self && !full.endsWith(".md")) {
        problems.push(`${doc.path}: link ${target}: a heading in a file that is not markdown`);
        continue;
      }
      const text = self ? doc.text : readFileSync(full, "utf8");
      if (!anchors(text).has(fragment))
        problems.push(`${doc.path}: link ${target}: ${shown} has no heading #${fragment}`);
    }
  }
  return problems;
}

// ---- flags ----

/** The flags of meshcni-installer, and their defaults, from its --help (internal/agent/options.ts). */
export function agentFlags(): Map<string, string | undefined> {
  const flags = new Map<string, string | undefined>();
  for (const m of renderUsage().matchAll(/^ {2}--([a-z][a-z0-9-]*)[^\n]*\n {6}([^\n]*)$/gm)) {
    const def = /\(default ([^:)][^)]*)\); env MESHCNI_/.exec(m[2]!)?.[1];
    flags.set(m[1]!, def);
  }
  return flags;
}

/** meshcnictl's commands and each one's flags (long names), from the command specs. */
export function ctlFlags(): Map<string, Set<string>> {
  const commands = new Map<string, Set<string>>();
  // --help as parseCommandArgs adds it to every command.
  for (const spec of COMMAND_SPECS)
    commands.set(spec.name, new Set(Object.keys({ ...spec.options, help: HELP_OPTION })));
  return commands;
}

/** The flags a script takes, from the usage lines of its opening comment (`// bun run build [--target=…]`). */
function scriptFlags(name: string): Set<string> {
  const file = join(ROOT, "scripts", `${name}.ts`);
  if (!existsSync(file)) return new Set();
  const head: string[] = [];
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line.startsWith("//")) break;
    head.push(line);
  }
  return new Set([...head.join("\n").matchAll(/--([a-z][a-z0-9-]*)/g)].map((m) => m[1]!));
}

const SCRIPTS = readdirSync(join(ROOT, "scripts"))
  .filter((f) => f.endsWith(".ts"))
  .map((f) => f.slice(0, -3));

/** Other programs' flags the docs name, each with its program. */
const FOREIGN_FLAGS: Record<string, string> = {
  noflush: "iptables-restore",
  wait: "iptables-restore",
  net: "nsenter",
  prune: "kubectl apply",
  "register-with-taints": "kubelet",
  proto: "curl",
  "proto-redir": "curl",
  "https-only": "wget",
  preload: "bun (BUN_OPTIONS)",
  require: "bun (BUN_OPTIONS)",
  import: "bun (BUN_OPTIONS)",
  config: "bun (BUN_OPTIONS), depcruise",
  "disallow-code-generation-from-strings": "bun build's exec argv",
  compile: "bun build",
  "bounding-set": "setpriv",
  digestfile: "podman manifest push",
  noEmit: "tsc",
  write: "biome check",
  timeout: "bun test",
  version: "iptables-restore",
};

/** Programs whose flags are their own business once named. */
const FOREIGN_PROGRAMS = new Set([
  "helm",
  "kubectl",
  "podman",
  "curl",
  "wget",
  "iptables-restore",
  "iptables",
  "ip6tables",
  "nsenter",
  "kubelet",
  "setpriv",
  "nft",
  "strace",
  "ip",
  "journalctl",
  "apt-get",
  "tar",
  "valgrind",
  "tsc",
  "depcruise",
  "biome",
  "npm",
]);

type Program =
  | { kind: "agent" }
  | { kind: "ctl"; command: string | undefined }
  | { kind: "script"; name: string }
  | { kind: "foreign"; name: string }
  | { kind: "none" };

interface FlagTables {
  agent: ReadonlySet<string>;
  ctl: ReadonlyMap<string, ReadonlySet<string>>;
  scripts: ReadonlyMap<string, ReadonlySet<string>>;
}

function tables(): FlagTables {
  return {
    agent: new Set(agentFlags().keys()),
    ctl: ctlFlags(),
    scripts: new Map(SCRIPTS.map((s) => [s, scriptFlags(s)])),
  };
}

/**
 * The --flags of one piece of code text (an inline span or a code line), each judged against the
 * program it is given to: the nearest meshcnictl COMMAND, meshcni-installer, `bun run SCRIPT` or
 * other program before it in the same command (pipes, `;` and `#` comments start another). A flag
 * with no program before it must be a flag of meshcni's or a known flag of another program.
 */
export function flagProblems(code: string, t: FlagTables): string[] {
  const problems: string[] = [];
  const ctlCommands = new Set(t.ctl.keys());
  const everyCtl = new Set([...t.ctl.values()].flatMap((s) => [...s]));
  const known = (flag: string) =>
    t.agent.has(flag) ||
    everyCtl.has(flag) ||
    [...t.scripts.values()].some((s) => s.has(flag)) ||
    flag in FOREIGN_FLAGS;
  const [command, comment] = splitComment(code);
  const segments = [
    // Only the line's first command may be taken for a meshcnictl command line; the others may be prose.
    ...command.split(/\s\|\s|;|&&|\$\(/).map((text, n) => ({ text, prose: n > 0 })),
    ...(comment === undefined ? [] : [{ text: comment, prose: true }]),
  ];
  for (const { text: segment, prose } of segments) {
    const tokens = segment.trim().split(/\s+/).filter(Boolean);
    let program: Program = { kind: "none" };
    for (let i = 0; i < tokens.length; i++) {
      const tok = tokens[i]!;
      const word = basename(tok.replace(/^[("'[]+/, ""));
      const next = tokens[i + 1];
      if (word === "meshcnictl") {
        if (next !== undefined && ctlCommands.has(next)) {
          program = { kind: "ctl", command: next };
          i++;
        } else if (next === undefined || next.startsWith("-")) {
          program = { kind: "ctl", command: undefined };
        } else if (!prose && (i === 0 || (i === 1 && tokens[0] === "$"))) {
          // A command line (not prose that names meshcnictl): its first word must be a command.
          problems.push(`meshcnictl has no command ${next} (in "${code}")`);
          program = { kind: "ctl", command: undefined };
        }
        continue;
      }
      if (word === "meshcni-installer") {
        program = { kind: "agent" };
        continue;
      }
      if (i === 0 && ctlCommands.has(word) && next?.startsWith("-")) {
        program = { kind: "ctl", command: word };
        continue;
      }
      if (word === "bun" && next === "run" && tokens[i + 2] !== undefined) {
        const name = tokens[i + 2]!;
        program = SCRIPTS.includes(name) ? { kind: "script", name } : { kind: "foreign", name: `bun run ${name}` };
        i += 2;
        continue;
      }
      if (word === "bun" || FOREIGN_PROGRAMS.has(word)) {
        program = { kind: "foreign", name: word };
        continue;
      }
      for (const m of tok.matchAll(/(?:^|["'([=])--([a-zA-Z][a-zA-Z0-9-]*)/g)) {
        const flag = m[1]!;
        const where = `--${flag} (in "${code}")`;
        if (program.kind === "agent" && !t.agent.has(flag)) problems.push(`meshcni-installer has no ${where}`);
        if (program.kind === "ctl") {
          const allowed = program.command === undefined ? new Set(["help", "version"]) : t.ctl.get(program.command)!;
          if (!allowed.has(flag))
            problems.push(`meshcnictl ${program.command ?? ""} has no ${where}`.replace("  ", " "));
        }
        if (program.kind === "script" && !t.scripts.get(program.name)!.has(flag))
          problems.push(`bun run ${program.name} has no ${where}`);
        if (program.kind === "none" && !known(flag)) problems.push(`no program takes ${where}`);
      }
    }
  }
  return problems;
}

/** A shell comment (` # …`) is prose about the command: judged on its own. */
function splitComment(code: string): [string, string | undefined] {
  const at = code.search(/(^|\s)#\s/);
  return at < 0 ? [code, undefined] : [code.slice(0, at), code.slice(at).replace(/^\s*#/, "")];
}

export function docFlagProblems(docs: readonly Doc[], t = tables()): string[] {
  const problems: string[] = [];
  for (const doc of docs) {
    const parts = splitMarkdown(doc.text);
    const pieces = [...codeSpans(parts.proseLines), ...parts.codeLines];
    // Flags in plain prose, outside any code.
    for (const m of plainText(parts.proseLines).matchAll(/(?<![\w-])--[a-zA-Z][a-zA-Z0-9-]*/g)) pieces.push(m[0]);
    for (const piece of pieces) for (const p of flagProblems(piece, t)) problems.push(`${doc.path}: ${p}`);
  }
  return problems;
}

/** The agent's flag table in docs/agent.md: every flag of the code, none other, the code's defaults. */
export function agentTableProblems(agentDoc: Doc): string[] {
  const problems: string[] = [];
  const code = agentFlags();
  const rows = new Map<string, string>();
  for (const m of agentDoc.text.matchAll(/^\| `--([a-z][a-z0-9-]*)[^`]*` \|([^|]*)\|/gm)) rows.set(m[1]!, m[2]!);
  for (const [flag, def] of code) {
    const cell = rows.get(flag);
    if (cell === undefined) problems.push(`${agentDoc.path}: the flag table lacks --${flag}`);
    else if (def !== undefined && !cell.includes(`\`${def}\``))
      problems.push(`${agentDoc.path}: --${flag}'s default is ${def} in the code, the table says ${cell.trim()}`);
  }
  for (const flag of rows.keys())
    if (!code.has(flag)) problems.push(`${agentDoc.path}: --${flag} is no flag of the agent`);
  return problems;
}

// ---- metrics ----

function servedMetrics(): Set<string> {
  const source = readFileSync(join(ROOT, "internal/agent/observe/metrics.ts"), "utf8");
  return new Set([...source.matchAll(/\bmeshcni_[a-z_]+/g)].map((m) => m[0]));
}

export function unknownMetrics(docs: readonly Doc[], served = servedMetrics()): string[] {
  const problems: string[] = [];
  for (const doc of docs)
    for (const m of doc.text.matchAll(/\bmeshcni_[a-z_]+/g))
      if (!served.has(m[0])) problems.push(`${doc.path}: /metrics serves no ${m[0]}`);
  return problems;
}

// ---- the code tour ----

/**
 * docs/architecture.md's tree: under a heading naming internal/ folders, every `*.ts` name and
 * every folder at a line's start exists in one of them, and every file of those folders (tests
 * aside) is named where it lives: as an entry of its own (a line's first word), or for a file in a
 * subfolder, inside that subfolder's entry (`install/` … `conflist/` … `chain.ts`).
 */
export function tourProblems(arch: Doc, root = ROOT): string[] {
  const problems: string[] = [];
  const sections = arch.text.split(/^### /m).slice(1);
  const named = new Set<string>();
  for (const section of sections) {
    const heading = section.split("\n")[0]!;
    const folders = [...heading.matchAll(/`(internal\/[^`]*\/)`/g)].map((m) => m[1]!);
    if (folders.length === 0) continue;
    const block = /```\n([\s\S]*?)```/.exec(section)?.[1] ?? "";
    // Paths are relative to the one folder, or to internal/ when the heading names several.
    const base = folders.length > 1 ? join(root, "internal") : join(root, folders[0]!);
    const files = folders.flatMap((f) => listTs(join(root, f)).map((p) => relative(base, p)));
    const dirs = folders.flatMap((f) => listDirs(join(root, f)).map((p) => `${relative(base, p)}/`));
    const entries = tourEntries(block);
    for (const m of block.matchAll(/[\w./-]+\.ts\b/g)) {
      const name = m[0];
      if (!files.some((f) => f === name || f.endsWith(`/${name}`)))
        problems.push(`${arch.path}: ${heading}: no file ${name}`);
    }
    for (const e of entries)
      if (e.name.endsWith("/") && !dirs.includes(e.name))
        problems.push(`${arch.path}: ${heading}: no folder ${e.name}`);
    for (const f of files) {
      const parts = f.split("/");
      const top = parts.length > 1 ? entries.find((e) => e.name === `${parts[0]}/`) : undefined;
      const listed =
        entries.some((e) => e.name === f) ||
        (top !== undefined &&
          parts.slice(1, -1).every((d) => top.text.includes(`${d}/`)) &&
          hasWord(top.text, parts.at(-1)!)) ||
        (parts.length === 1 && entries.some((e) => !e.name.endsWith("/") && hasWord(e.text, f)));
      if (!listed)
        problems.push(
          `${arch.path}: ${heading}: ${relative(join(root, "internal"), join(base, f))} is not in the tour`,
        );
    }
    for (const f of folders) named.add(f);
  }
  for (const dir of readdirSync(join(root, "internal"), { withFileTypes: true }))
    if (dir.isDirectory() && !named.has(`internal/${dir.name}/`))
      problems.push(`${arch.path}: no section for internal/${dir.name}/`);
  return problems;
}

/** A tour block's entries: a line at the first column starts one (its first word names it). */
function tourEntries(block: string): { name: string; text: string }[] {
  const entries: { name: string; text: string }[] = [];
  for (const line of block.split("\n")) {
    if (line.trim() === "") continue;
    if (/^\S/.test(line)) entries.push({ name: line.split(/[\s,]+/)[0]!, text: line });
    else if (entries.length > 0) entries.at(-1)!.text += `\n${line}`;
  }
  return entries;
}

const hasWord = (text: string, word: string) =>
  new RegExp(`(^|[^\\w./-])${word.replace(/\./g, "\\.")}(?![\\w-])`).test(text);

function listTs(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts"))
    .map((f) => join(dir, f));
}

function listDirs(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { recursive: true, encoding: "utf8" })
    .map((f) => join(dir, f))
    .filter((f) => statSync(f).isDirectory());
}

// ---- the tests ----

const DOCS = readDocs();
const doc = (path: string) => DOCS.find((d) => d.path === path)!;

describe("the docs", () => {
  test("README.md and the docs/ files are there", () => {
    for (const f of [
      "README.md",
      "docs/architecture.md",
      "docs/plugin.md",
      "docs/agent.md",
      "docs/backends.md",
      "docs/operations.md",
      "docs/error-codes.md",
      "docs/development.md",
      "docs/benchmarks.md",
    ])
      expect(DOCS.map((d) => d.path)).toContain(f);
  });
  test("the README is read in five minutes: at most 300 lines", () => {
    expect(doc("README.md").text.split("\n").length).toBeLessThanOrEqual(300);
  });
  test("every path named under internal/, test/, cmd/, bench/, scripts/, testdata/, manifests/ exists", () => {
    expect(missingPaths(DOCS)).toEqual([]);
  });
  test("every relative link resolves, to a heading where it names one", () => {
    expect(brokenLinks(DOCS)).toEqual([]);
  });
  test("every --flag given to meshcni-installer, meshcnictl or a script is one their code parses", () => {
    expect(docFlagProblems(DOCS)).toEqual([]);
  });
  test("docs/agent.md's flag table is meshcni-installer's flags, with the code's defaults", () => {
    expect(agentTableProblems(doc("docs/agent.md"))).toEqual([]);
  });
  test("every metric named is one /metrics serves", () => {
    expect(unknownMetrics(DOCS)).toEqual([]);
  });
  test("the code tour names every file of internal/, and no file that is not there", () => {
    expect(tourProblems(doc("docs/architecture.md"))).toEqual([]);
  });
});

describe("the checks fail on docs that are wrong", () => {
  const bad = (text: string, path = "docs/bad.md"): Doc[] => [{ path, text }];
  test("a path that is not there", () => {
    expect(missingPaths(bad("see `internal/io/agent-repair.ts` and test/installer/"))).toEqual([
      "docs/bad.md: internal/io/agent-repair.ts does not exist",
      "docs/bad.md: test/installer/ does not exist",
    ]);
    expect(missingPaths(bad("one folder: `internal/firewall/NAME/`; `internal/nothing/NAME.ts`"))).toEqual([
      "docs/bad.md: internal/nothing/NAME.ts does not exist",
    ]);
  });
  test("a link to a missing file or heading", () => {
    expect(
      brokenLinks(bad("[a](agent.md#the-socket) [b](agent.md#no-such-heading) [c](gone.md) [d](#here)\n## Here")),
    ).toEqual([
      "docs/bad.md: link agent.md#no-such-heading: docs/agent.md has no heading #no-such-heading",
      "docs/bad.md: link gone.md: docs/gone.md does not exist",
    ]);
  });
  test("a flag the program does not take", () => {
    const t = tables();
    expect(flagProblems("meshcni-installer --repair off --dest-lib-dir /opt/cni/bin", t)).toEqual([
      'meshcni-installer has no --dest-lib-dir (in "meshcni-installer --repair off --dest-lib-dir /opt/cni/bin")',
    ]);
    expect(flagProblems("meshcnictl check --pods --mesh istio", t)).toEqual([
      'meshcnictl check has no --mesh (in "meshcnictl check --pods --mesh istio")',
    ]);
    expect(flagProblems("meshcnictl install-cni --mesh istio | kubectl apply --prune -f -", t)).toEqual([]);
    expect(flagProblems("meshcnictl inspect", t)).toEqual([
      'meshcnictl has no command inspect (in "meshcnictl inspect")',
    ]);
    expect(flagProblems("--no-such-flag", t)).toEqual(['no program takes --no-such-flag (in "--no-such-flag")']);
    expect(flagProblems("bun run image --tag=x --arch=arm64 --seed 1", t)).toEqual([
      'bun run image has no --seed (in "bun run image --tag=x --arch=arm64 --seed 1")',
    ]);
  });
  test("an agent flag table that lacks a flag, names one too many, or another default", () => {
    const table = [...agentFlags()]
      .filter(([f]) => f !== "state-dir")
      .map(([f, def]) => `| \`--${f}\` | ${f === "repair-rate" ? "`5`" : def ? `\`${def}\`` : "none"} | |`);
    table.push("| `--verify-every N` | `60` | |");
    const problems = agentTableProblems({ path: "docs/agent.md", text: table.join("\n") });
    expect(problems).toContain("docs/agent.md: the flag table lacks --state-dir");
    expect(problems).toContain("docs/agent.md: --verify-every is no flag of the agent");
    expect(problems).toContain("docs/agent.md: --repair-rate's default is 10 in the code, the table says `5`");
    expect(problems).toHaveLength(3);
  });
  test("a metric /metrics does not serve", () => {
    expect(unknownMetrics(bad("`meshcni_repairs_total` and `meshcni_agent_cache_hits_total`"))).toEqual([
      "docs/bad.md: /metrics serves no meshcni_agent_cache_hits_total",
    ]);
  });
  test("a tour that names a file not there, or leaves one out", () => {
    const arch = doc("docs/architecture.md");
    const text = arch.text.replace("names.ts ", "aliases.ts ").replace(/^net\/ip-addr\.ts.*$/m, "");
    const problems = tourProblems({ path: arch.path, text });
    expect(problems).toContain("docs/architecture.md: `internal/kube/`: Kubernetes: no file aliases.ts");
    expect(problems).toContain("docs/architecture.md: `internal/kube/`: Kubernetes: kube/names.ts is not in the tour");
    expect(problems.some((p) => p.endsWith("net/ip-addr.ts is not in the tour"))).toBe(true);
    // agent/run.ts is not covered by install/run.ts's line.
    const withoutRun = arch.text.replace(/^run\.ts +the agent's process.*\n/m, "");
    expect(tourProblems({ path: arch.path, text: withoutRun })).toEqual([
      "docs/architecture.md: `internal/agent/`: the node agent: agent/run.ts is not in the tour",
    ]);
  });
});
