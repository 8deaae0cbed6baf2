// bun run fuzz [--seed N] [--cases N] [--binary-every N] [--case K] [--only plugin|socket|records|installer]
//              [--requests N] [--sequences N] [--ops N]
//
// The plugin fuzzer (test/hardening/fuzz/): seeded and reproducible; by default 100,000 cases
// in-process through the real code path in dry-run mode, every 50th also through dist/meshcni,
// and every ADD also as a warm ADD the node agent plans (fuzz/agent-fuzz.ts), compared with the plugin
// alone. `--case K` replays one case of a seed: its inputs, all three runs, and the verdict.
// Then the agent's socket under 20,000 hostile requests (fuzz/socket-fuzz.ts: raw bytes to the
// compiled agent, and to its handler), 200 sequences of ADD/CHECK/DEL/GC through dist/meshcni
// with and without the agent, checking the records (fuzz/records-fuzz.ts), and the agent
// chaos run (test/hardening/chaos/): 1,000 operations of a simulated primary CNI against
// dist/meshcni-installer, with SIGTERM and kill -9 at random moments. `--only socket --case K`
// replays request K, `--only records --case K` sequence K.
// Exits 1 when anything failed.
import { parseArgs } from "node:util";
import { buildCase } from "../test/hardening/fuzz/generate.ts";
import { startFuzzHarness } from "../test/hardening/fuzz/harness.ts";
import { judge } from "../test/hardening/fuzz/oracle.ts";
import { startAgentFuzz } from "../test/hardening/fuzz/agent-fuzz.ts";
import { judgeAgent, renderFailure, renderSummary, runFuzz } from "../test/hardening/fuzz/run-fuzz.ts";

const { values } = parseArgs({
  args: Bun.argv.slice(2),
  options: {
    seed: { type: "string" },
    cases: { type: "string", default: "100000" },
    "binary-every": { type: "string", default: "50" },
    case: { type: "string" },
    only: { type: "string" },
    ops: { type: "string", default: "1000" },
    requests: { type: "string", default: "20000" },
    sequences: { type: "string", default: "200" },
    length: { type: "string", default: "30" },
  },
});

const seed = values.seed !== undefined ? Number(values.seed) : (Date.now() ^ (process.pid << 16)) >>> 0;
if (!Number.isInteger(seed) || seed < 0) throw new Error(`--seed ${values.seed}: expected a whole number`);

async function replay(index: number): Promise<number> {
  const c = buildCase(seed, index);
  const h = await startFuzzHarness();
  try {
    h.serve(c);
    console.log(`case ${index} of seed ${seed} [${c.tags.join(" ")}]`);
    console.log(`expected: ${JSON.stringify(c.expect, null, 2).slice(0, 4000)}`);
    console.log(`env: ${JSON.stringify(c.env, null, 2)}`);
    console.log(`stdin: ${h.stdinOf(c).slice(0, 6000)}`);
    console.log(`objects: ${JSON.stringify(c.objects, null, 2).slice(0, 6000)}`);
    let bad = 0;
    let alone: Awaited<ReturnType<typeof h.runInProcess>> | undefined;
    for (const [where, run] of [
      ["in-process", () => h.runInProcess(c)],
      ["dist/meshcni", () => h.runBinary(c, 0)],
    ] as const) {
      const r = await run();
      alone ??= r;
      const problems = judge(c, r);
      bad += problems.length;
      console.log(
        `\n--- ${where}: exit ${r.exitCode} in ${r.ms.toFixed(1)} ms\n` +
          `stdout: ${r.stdout}\npayload: ${r.payload ?? "(not written)"}\nlog:\n${r.log}`,
      );
      console.log(problems.length ? `PROBLEMS:\n${problems.map((p) => `  - ${p}`).join("\n")}` : "verdict: fine");
    }
    const agent = startAgentFuzz(h.kubeconfig);
    try {
      const a = await agent.run(c);
      if (a && alone) {
        const { own, versus } = judgeAgent(c, a, alone);
        bad += own.length + versus.length;
        console.log(`\n--- agent-planned: the agent answered ${a.status} in ${a.ms.toFixed(1)} ms`);
        console.log(`answer: ${a.body.slice(0, 6000)}`);
        console.log(`the plugin's side: ${JSON.stringify(a.planned)?.slice(0, 3000)}`);
        console.log(`payload: ${a.outcome?.payload ?? "(none)"}\nlog:\n${a.log}`);
        const all = [...own, ...versus];
        console.log(all.length ? `PROBLEMS:\n${all.map((p) => `  - ${p}`).join("\n")}` : "verdict: fine");
      }
    } finally {
      agent.close();
    }
    return bad ? 1 : 0;
  } finally {
    await h.close();
  }
}

async function fuzzPlugin(): Promise<number> {
  const cases = Number(values.cases);
  console.log(`plugin fuzz: seed ${seed}, ${cases} cases (replay one with: bun run fuzz --seed ${seed} --case K)`);
  const report = await runFuzz({
    seed,
    cases,
    binaryEvery: Number(values["binary-every"]),
    maxFailures: 200,
    agentEvery: 1,
    onProgress: (done, r) => {
      if (done % 10_000 === 0)
        console.log(`  ${done} cases, ${r.failures.length} failures, ${(performance.now() / 1000).toFixed(0)} s`);
    },
  });
  for (const f of report.failures.slice(0, 30)) console.log(renderFailure(f));
  console.log(renderSummary(report));
  return report.failures.length > 0 ? 1 : 0;
}

async function chaos(): Promise<number> {
  const { runChaos, renderChaosSummary } = await import("../test/hardening/chaos/run-chaos.ts");
  const ops = Number(values.ops);
  console.log(`installer chaos: seed ${seed}, ${ops} operations`);
  const report = await runChaos({ seed, ops });
  console.log(renderChaosSummary(report));
  return report.violations.length > 0 ? 1 : 0;
}

async function socketFuzz(only?: number): Promise<number> {
  const { renderSocketFailure, renderSocketSummary, startSocketFuzz } = await import(
    "../test/hardening/fuzz/socket-fuzz.ts"
  );
  const requests = only !== undefined ? 1 : Number(values.requests);
  console.log(`agent socket fuzz: seed ${seed}, ${requests} requests`);
  console.log(`  (replay one with: bun run fuzz --only socket --seed ${seed} --case K)`);
  const f = await startSocketFuzz();
  try {
    const r = await f.run({
      seed,
      requests,
      handlerEvery: 1,
      maxFailures: 200,
      ...(only !== undefined ? { first: only } : {}),
      onAnswer: (c, a) => {
        if (only === undefined) return;
        console.log(`request ${c.index} [${c.tags.join(" ")}], valid: ${c.valid}:`);
        console.log(new TextDecoder().decode(c.bytes.subarray(0, 3000)));
        const status = a.status ?? (a.timedOut ? "none (timed out)" : "none (closed)");
        console.log(`\nanswer in ${a.ms.toFixed(1)} ms: ${status}\n${a.head}\n\n${a.body.slice(0, 3000)}`);
      },
      onProgress: (done) => {
        if (done % 2000 === 0) console.log(`  ${done} requests, ${(performance.now() / 1000).toFixed(0)} s`);
      },
    });
    for (const x of r.failures.slice(0, 30)) console.log(renderSocketFailure(x));
    console.log(renderSocketSummary(r));
    return r.failures.length > 0 ? 1 : 0;
  } finally {
    await f.close();
  }
}

async function recordsFuzz(only?: number): Promise<number> {
  const { renderRecordsFailure, renderRecordsSummary, startRecordsFuzz } = await import(
    "../test/hardening/fuzz/records-fuzz.ts"
  );
  const sequences = only !== undefined ? 1 : Number(values.sequences);
  console.log(`records fuzz: seed ${seed}, ${sequences} sequences of ${values.length} commands`);
  console.log(`  (replay one with: bun run fuzz --only records --seed ${seed} --case K)`);
  const f = await startRecordsFuzz();
  try {
    const r = await f.run({
      seed,
      sequences,
      length: Number(values.length),
      maxFailures: 200,
      ...(only !== undefined ? { first: only } : {}),
      onSequence: (s, failures) => {
        if (only !== undefined) {
          console.log(`sequence ${s.index} [${s.tags.join(" ")}]`);
          console.log(`containers: ${JSON.stringify(s.containers, null, 1)}\ncommands: ${JSON.stringify(s.ops)}`);
        } else if ((s.index + 1) % 20 === 0) {
          console.log(`  ${s.index + 1} sequences, ${failures} failures, ${(performance.now() / 1000).toFixed(0)} s`);
        }
      },
    });
    for (const x of r.failures.slice(0, 30)) console.log(renderRecordsFailure(x));
    console.log(renderRecordsSummary(r));
    return r.failures.length > 0 ? 1 : 0;
  } finally {
    await f.close();
  }
}

let code = 0;
const only = values.case !== undefined ? Number(values.case) : undefined;
if (values.only === "socket") code = await socketFuzz(only);
else if (values.only === "records") code = await recordsFuzz(only);
else if (only !== undefined) code = await replay(only);
else {
  if (values.only === undefined || values.only === "plugin") code |= await fuzzPlugin();
  if (values.only === undefined) code |= await socketFuzz();
  if (values.only === undefined) code |= await recordsFuzz();
  if (values.only === undefined || values.only === "installer") code |= await chaos();
}
process.exit(code);
