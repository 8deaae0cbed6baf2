// The fuzz loop: cases in-process (the bulk), every Nth also through the compiled plugin, with
// the oracle on each outcome and the two runs compared with each other. Used by
// test/hardening/fuzz.test.ts (quick) and scripts/fuzz.ts (`bun run fuzz`, full).
import { type AgentRun, startAgentFuzz } from "./agent-fuzz.ts";
import { buildCase, type FuzzCase } from "./generate.ts";
import { type FuzzHarness, type RunResult, startFuzzHarness } from "./harness.ts";
import { jsonEqual } from "./expect.ts";
import { judge } from "./oracle.ts";

export interface Failure {
  seed: number;
  index: number;
  where:
    | "in-process"
    | "binary"
    | "in-process vs binary"
    | "in-process, nftables"
    | "agent-planned"
    | "agent-planned vs plugin";
  problems: string[];
  tags: string[];
  log: string;
}

export interface FuzzReport {
  seed: number;
  cases: number;
  binaryCases: number;
  /** Cases run a second time with the mesh section's iptables-mode set to nftables. */
  nftablesCases: number;
  /** ADD cases also sent to the node agent as a warm ADD, and how it answered ("planned", "declined: why"). */
  agentCases: number;
  agentOutcomes: Map<string, number>;
  failures: Failure[];
  /** "ok" / "rules" / "code N" -> count. */
  outcomes: Map<string, number>;
  tags: Map<string, number>;
  ms: number;
  slowestMs: number;
}

export interface FuzzOptions {
  seed: number;
  cases: number;
  /** Every Nth case also runs through dist/meshcni (0: none). */
  binaryEvery: number;
  /** Stop after this many failures. */
  maxFailures?: number;
  /** Every Nth case, when it is an ADD, also goes to the node agent (agent-fuzz.ts) and is compared (0: none). */
  agentEvery?: number;
  onProgress?: (done: number, report: FuzzReport) => void;
}

function outcomeKey(r: RunResult): string {
  if (r.crash) return "crash";
  if (r.timedOut) return "hang";
  if (r.exitCode === 0) return r.payload ? "ok with rules" : "ok";
  try {
    return `code ${JSON.parse(r.stdout).code}`;
  } catch {
    return "unparsable";
  }
}

/** The two runs of one case must agree (VERSION may answer in its own version in the binary). */
function compare(c: FuzzCase, a: RunResult, b: RunResult): string[] {
  const p: string[] = [];
  if (a.exitCode !== b.exitCode) p.push(`exit code ${a.exitCode} in-process, ${b.exitCode} compiled`);
  if (c.env.CNI_COMMAND !== "VERSION" && a.stdout !== b.stdout)
    p.push(`stdout differs:\n  in-process: ${a.stdout.slice(0, 400)}\n  compiled:   ${b.stdout.slice(0, 400)}`);
  if (a.payload !== b.payload) p.push("the dry-run payloads differ");
  return p;
}

const VALID_MODES = new Set([undefined, "", "auto", "legacy", "nft", "plain"]);

/**
 * The same case on the nftables backend: its stdin with the mesh section's iptables-mode set to
 * nftables, and the same expectation (the backend changes the payload's form, not its meaning).
 * Only for non-havoc cases whose stdin is a JSON object that survives being written again
 * unchanged and whose mode is a valid one (a bad mode is part of what the case tests).
 */
export function nftablesVariant(c: FuzzCase): FuzzCase | undefined {
  if (c.expect.weak || c.env.CNI_COMMAND === "VERSION") return undefined;
  let conf: any;
  try {
    conf = JSON.parse(c.stdin);
  } catch {
    return undefined;
  }
  if (typeof conf !== "object" || conf === null || Array.isArray(conf)) return undefined;
  const key = c.mesh;
  const section = conf[key] ?? {};
  if (typeof section !== "object" || section === null || Array.isArray(section)) return undefined;
  if (!VALID_MODES.has(section["iptables-mode"])) return undefined;
  const stdin = JSON.stringify({ ...conf, [key]: { ...section, "iptables-mode": "nftables" } });
  const back = JSON.parse(stdin);
  if (!jsonEqual({ ...back, [key]: undefined }, { ...conf, [key]: undefined })) return undefined;
  return { ...c, stdin, tags: [...c.tags, "nftables"] };
}

export async function runFuzz(opts: FuzzOptions, harness?: FuzzHarness): Promise<FuzzReport> {
  const h = harness ?? (await startFuzzHarness());
  const report: FuzzReport = {
    seed: opts.seed,
    cases: 0,
    binaryCases: 0,
    nftablesCases: 0,
    agentCases: 0,
    agentOutcomes: new Map(),
    failures: [],
    outcomes: new Map(),
    tags: new Map(),
    ms: 0,
    slowestMs: 0,
  };
  const agentEvery = opts.agentEvery ?? 0;
  const agent = agentEvery > 0 ? startAgentFuzz(h.kubeconfig) : undefined;
  const started = performance.now();
  const inflight = new Set<Promise<void>>();
  const slots = [0, 1];
  const fail = (c: FuzzCase, where: Failure["where"], problems: string[], log: string) =>
    report.failures.push({ seed: opts.seed, index: c.index, where, problems, tags: c.tags, log: log.slice(-3000) });
  try {
    for (let i = 0; i < opts.cases; i++) {
      if (opts.maxFailures !== undefined && report.failures.length >= opts.maxFailures) break;
      const c = buildCase(opts.seed, i);
      h.serve(c);
      const r = await h.runInProcess(c);
      report.cases++;
      report.slowestMs = Math.max(report.slowestMs, r.ms);
      const key = outcomeKey(r);
      report.outcomes.set(key, (report.outcomes.get(key) ?? 0) + 1);
      for (const t of c.tags) report.tags.set(t, (report.tags.get(t) ?? 0) + 1);
      const problems = judge(c, r);
      if (problems.length > 0) fail(c, "in-process", problems, r.log);
      const v = nftablesVariant(c);
      if (v) {
        const rv = await h.runInProcess(v);
        report.nftablesCases++;
        const vp = judge(v, rv);
        if (vp.length > 0) fail(v, "in-process, nftables", vp, rv.log);
        // Same exit, same stdout; rules on one backend exactly when on the other.
        if (rv.exitCode !== r.exitCode || rv.stdout !== r.stdout || (rv.payload === "") !== (r.payload === "")) {
          fail(
            v,
            "in-process, nftables",
            [
              `differs from the iptables run: exit ${r.exitCode}/${rv.exitCode}, ` +
                `stdout ${r.stdout.slice(0, 200)} / ${rv.stdout.slice(0, 200)}`,
            ],
            rv.log,
          );
        }
      }
      if (agent && i % agentEvery === 0) {
        const ar = await agent.run(c);
        if (ar) {
          report.agentCases++;
          const key = agentOutcomeKey(ar);
          report.agentOutcomes.set(key, (report.agentOutcomes.get(key) ?? 0) + 1);
          const { own, versus } = judgeAgent(c, ar, r);
          if (own.length > 0) fail(c, "agent-planned", own, ar.log);
          if (versus.length > 0) fail(c, "agent-planned vs plugin", versus, ar.log);
        }
      }
      if (opts.binaryEvery > 0 && i % opts.binaryEvery === 0) {
        while (slots.length === 0) await Promise.race(inflight);
        const slot = slots.pop()!;
        const task = (async () => {
          try {
            const b = await h.runBinary(c, slot);
            report.binaryCases++;
            const bp = judge(c, b);
            if (bp.length > 0) fail(c, "binary", bp, b.log);
            const diff = compare(c, r, b);
            if (diff.length > 0) fail(c, "in-process vs binary", diff, b.log);
          } finally {
            h.release(c);
            slots.push(slot);
          }
        })();
        inflight.add(task);
        void task.finally(() => inflight.delete(task));
      } else {
        h.release(c);
      }
      if (opts.onProgress && (i + 1) % 1000 === 0) opts.onProgress(i + 1, report);
    }
    await Promise.all(inflight);
  } finally {
    agent?.close();
    if (!harness) await h.close();
  }
  report.ms = performance.now() - started;
  return report;
}

/** "planned: ok with rules", "declined: the agent does not hold namespace", "413", ... */
export function agentOutcomeKey(a: AgentRun): string {
  if (a.outcome) {
    const o = a.outcome;
    return `planned: ${o.exitCode === 0 ? (o.payload ? "ok with rules" : "ok") : `code ${codeOf(o.stdout)}`}`;
  }
  if (a.status === 409) {
    const why = String(JSON.parse(a.body).details ?? "");
    return `declined: ${why.replace(/ (namespace|pod|service|for) \S+/g, " $1 …").slice(0, 70)}`;
  }
  if (a.status === 200 && a.planned?.kind === "declined") return "answer refused by the plugin (documented)";
  return a.status === 0 ? "no answer" : String(a.status);
}

/** The same result, as JSON (the key order of what each way prints is its own). */
function sameResult(a: string, b: string): boolean {
  try {
    return jsonEqual(JSON.parse(a), JSON.parse(b));
  } catch {
    return a === b;
  }
}

/**
 * The same CNI error: code and version, and its text unless it comes from where the pod was read
 * (106, 11: the agent's cache and the plugin's API server word a missing pod each their way).
 */
function sameError(a: string, b: string): boolean {
  try {
    const x = JSON.parse(a);
    const y = JSON.parse(b);
    if (x.code !== y.code || x.cniVersion !== y.cniVersion) return false;
    return x.code === 106 || x.code === 11 || (x.msg === y.msg && x.details === y.details);
  } catch {
    return a === b;
  }
}

function codeOf(stdout: string): unknown {
  try {
    return JSON.parse(stdout).code;
  } catch {
    return "?";
  }
}

/**
 * The agent-planned ADD of case `c` judged by the oracle, with the expectation of a warm ADD (the
 * plugin's kubeconfig is not read), and compared with the plugin alone's run `r` of the same case:
 * the same exit, stdout and payload, except where the plugin alone failed on its kubeconfig.
 */
export function judgeAgent(c: FuzzCase, a: AgentRun, r: RunResult): { own: string[]; versus: string[] } {
  const own = [...a.problems];
  const versus: string[] = [];
  if (!a.outcome) return { own, versus };
  const warm = { ...c, expect: buildCase(c.seed, c.index, { as: "agent" }).expect };
  const unseen = (p: string) => a.payloadUnseen === true && /did not write the dry-run file/.test(p);
  own.push(...judge(warm, a.outcome).filter((p) => !unseen(p)));
  // The plugin alone failed on its own way to the API server (its kubeconfig, 107; an answer
  // that is not a Pod, 11), which a warm ADD does not take: the oracle alone judges the agent's.
  const ownWay = r.exitCode === 1 && [107, 11].includes(codeOf(r.stdout) as number);
  if (r.crash || r.timedOut || ownWay) return { own, versus };
  const o = a.outcome;
  if (o.exitCode !== r.exitCode) {
    versus.push(
      `exit ${o.exitCode} agent-planned, ${r.exitCode} alone: ${o.stdout.slice(0, 300)} / ${r.stdout.slice(0, 300)}`,
    );
  } else if (o.exitCode === 0 ? !sameResult(o.stdout, r.stdout) : !sameError(o.stdout, r.stdout)) {
    const both = `agent-planned: ${o.stdout.slice(0, 400)}\n  alone:         ${r.stdout.slice(0, 400)}`;
    versus.push(`stdout differs:\n  ${both}`);
  }
  if (o.payload !== r.payload && !a.payloadUnseen) {
    const both =
      `agent-planned: ${String(o.payload).slice(0, 600)}\n` + `  alone:         ${String(r.payload).slice(0, 600)}`;
    versus.push(`the rules differ:\n  ${both}`);
  }
  return { own, versus };
}

export function renderFailure(f: Failure): string {
  return [
    `case ${f.index} (seed ${f.seed}) failed ${f.where}: [${f.tags.join(" ")}]`,
    ...f.problems.map((p) => `  - ${p}`),
    `  replay: bun run fuzz --seed ${f.seed} --case ${f.index}`,
  ].join("\n");
}

export function renderSummary(r: FuzzReport): string {
  const outcomes = [...r.outcomes]
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${k}: ${n}`)
    .join(", ");
  return [
    `seed ${r.seed}: ${r.cases} cases in ${(r.ms / 1000).toFixed(1)} s ` +
      `(${(r.ms / Math.max(1, r.cases)).toFixed(2)} ms each), ${r.nftablesCases} also on ` +
      `the nftables backend, ${r.binaryCases} also through dist/meshcni; slowest ${Math.round(r.slowestMs)} ms`,
    `outcomes: ${outcomes}`,
    ...(r.agentCases > 0
      ? [
          `agent-planned: ${r.agentCases} ADDs; ${[...r.agentOutcomes]
            .sort((a, b) => b[1] - a[1])
            .map(([k, n]) => `${k}: ${n}`)
            .join(", ")}`,
        ]
      : []),
    `failures: ${r.failures.length}`,
  ].join("\n");
}
