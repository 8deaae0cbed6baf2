// bun run bench: every benchmark, each figure as a ratio to a floor measured in the same run,
// written to bench/RESULTS.md together with the machine it ran on.
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, totalmem } from "node:os";
import { join } from "node:path";

/** Benchmark modules and the function each exports (returning a markdown section). */
const SUITES: [file: string, fn: string][] = [
  ["plugin.ts", "benchPlugin"],
  ["private-loader.ts", "benchPrivateLoader"],
  ["backends.ts", "benchBackends"],
  ["startup-instructions.ts", "benchStartupInstructions"],
  ["burst.ts", "benchBurst"],
  ["agent-applies.ts", "benchAgentApplies"],
  ["installer-rechain.ts", "benchRechain"],
  ["installer-idle.ts", "benchIdle"],
  ["agent-cache.ts", "benchAgentCache"],
  ["agent-verify.ts", "benchAgentVerify"],
  ["agent-status.ts", "benchAgentStatus"],
  ["cli-install-cni.ts", "benchInstallCni"],
  ["image.ts", "benchImage"],
  ["bounds.ts", "benchBounds"],
];

function machine(): string {
  const sh = (argv: string[]) => Bun.spawnSync(argv, { stdout: "pipe", stderr: "pipe" }).stdout.toString().trim();
  const os = readFileSync("/etc/os-release", "utf8").match(/^PRETTY_NAME="(.*)"$/m)?.[1] ?? "Linux";
  return [
    `- date: ${new Date().toISOString()}`,
    `- machine: ${cpus().length} × ${cpus()[0]?.model ?? "cpu"}, ` +
      `${(totalmem() / 2 ** 30).toFixed(1)} GiB, ${os}, kernel ${sh(["uname", "-r"])}`,
    `- bun ${Bun.version}, ${sh(["iptables", "--version"])}, Debian containernetworking-plugins ` +
      `${sh(["dpkg-query", "-W", "-f=${Version}", "containernetworking-plugins"])}`,
    `- meshcni ${sh([join(import.meta.dir, "../dist/meshcnictl"), "version"]) || "(meshcnictl not built)"}`,
  ].join("\n");
}

const only = Bun.argv.slice(2);
const sections: string[] = [];
for (const [file, fn] of SUITES) {
  const path = join(import.meta.dir, file);
  if (only.length && !only.some((o) => file.startsWith(o))) continue;
  if (!existsSync(path)) {
    sections.push(`## ${file}\n\n(not present in this checkout)\n`);
    continue;
  }
  console.error(`bench: running ${file}`);
  const started = performance.now();
  try {
    const mod = (await import(path)) as Record<string, () => Promise<string>>;
    const run = mod[fn];
    if (!run) throw new Error(`${file} does not export ${fn}`);
    sections.push(await run());
  } catch (e) {
    sections.push(`## ${file}\n\nFAILED: ${(e as Error).message}\n`);
    process.exitCode = 1;
  }
  console.error(`bench: ${file} took ${((performance.now() - started) / 1000).toFixed(1)} s`);
}

const report = [
  "# meshcni benchmark results",
  "",
  "Written by `bun run bench` (bench/run.ts); each figure is measured against a floor measured in the same run.",
  "",
  machine(),
  "",
  ...sections,
].join("\n");
writeFileSync(join(import.meta.dir, "RESULTS.md"), `${report}\n`);
console.log(report);
