// The plugin's start-up in instructions, not seconds: valgrind's callgrind counts the instructions
// a run executes, the same count whatever else the machine is doing (wall-clock ratios move with
// the load on a shared 2-core machine). VERSION of dist/meshcni (the node binary: plugin and
// agent) against an empty program compiled the same way, and against a build of cmd/plugin.ts
// alone (the plugin without the agent's code in its binary). Run alone:
// node_modules/.bin/bun bench/startup-instructions.ts
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoPath } from "../test/support/golden.ts";
import { buildEmptyProgram } from "./lib.ts";
import { JIT_POLICY, NODE_EXEC_ARGV } from "../scripts/build.ts";

const RUNS = Number(Bun.env.BENCH_CALLGRIND_RUNS ?? 3);

function instructions(argv: string[], env: Record<string, string>, stdin: string): number {
  const r = Bun.spawnSync(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", ...argv], {
    env: { PATH: Bun.env.PATH!, ...env },
    stdin: new TextEncoder().encode(stdin),
    stdout: "pipe",
    stderr: "pipe",
  });
  const m = /Collected : (\d+)/.exec(r.stderr.toString());
  if (!m) throw new Error(`callgrind gave no count for ${argv.join(" ")}: ${r.stderr.toString().slice(-500)}`);
  return Number(m[1]);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

export async function benchStartupInstructions(): Promise<string> {
  if (Bun.which("valgrind") === null)
    return "## Plugin start-up in instructions\n\n(valgrind is not installed: skipped)\n";
  const dir = mkdtempSync(join(tmpdir(), "meshcni-bench-instr-"));
  try {
    const build = async (entry: string, outfile: string) => {
      const r = await Bun.build({
        entrypoints: [entry],
        target: "bun",
        format: "esm",
        minify: true,
        splitting: true,
        bytecode: true,
        compile: {
          jitPolicy: JIT_POLICY,
          execArgv: NODE_EXEC_ARGV,
          outfile,
          autoloadDotenv: false,
          autoloadBunfig: false,
          autoloadTsconfig: false,
          autoloadPackageJson: false,
        },
      });
      if (!r.success) throw new Error(`building ${entry} failed`);
    };
    await buildEmptyProgram(dir);
    await build(repoPath("cmd/plugin.ts"), join(dir, "plugin-alone"));
    const env = { CNI_COMMAND: "VERSION" };
    const stdin = '{"cniVersion":"1.0.0"}';
    const rows: [string, string][] = [
      ["empty Bun program (same build)", join(dir, "empty")],
      ["cmd/plugin.ts alone (same build)", join(dir, "plugin-alone")],
      ["dist/meshcni (plugin + agent)", repoPath("dist/meshcni")],
    ];
    const counts = rows.map(([, bin]) => median(Array.from({ length: RUNS }, () => instructions([bin], env, stdin))));
    const [empty, alone, node] = counts as [number, number, number];
    const ratio = node / empty;
    return [
      "## Plugin start-up in instructions",
      "",
      `VERSION under valgrind --tool=callgrind, median of ${RUNS} runs each: ` +
        `instructions executed, repeatable whatever the machine's load.`,
      "",
      "| program | instructions | vs empty |",
      "|---|---|---|",
      ...rows.map(
        ([name], i) => `| ${name} | ${counts[i]!.toLocaleString("en-US")} | ${(counts[i]! / empty).toFixed(3)}x |`,
      ),
      "",
      "| figure | value | target |",
      "|---|---|---|",
      `| dist/meshcni VERSION / empty Bun program | ${ratio.toFixed(3)}x | ` +
        `${ratio <= 1.1 ? "≤ 1.1x ✓" : "> 1.1x ✗"} |`,
      `| dist/meshcni VERSION / cmd/plugin.ts alone | ${(node / alone).toFixed(3)}x | (reported) |`,
      "",
    ].join("\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(await benchStartupInstructions());
