// `meshcnictl install-cni` wall time (the bound: under 100 ms), compiled, measured
// interleaved against floors taken in the same run:
// - an empty program compiled the same way (Bun's start-up floor),
// - `meshcnictl version` (the same binary doing nothing),
// - `helm template` of the chart in manifests/ (the other way to render the same objects),
//   when the tests have fetched helm into .cache/.
// Run alone: node_modules/.bin/bun bench/cli-install-cni.ts
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoPath } from "../test/support/golden.ts";
import { type Cmd, measure, ms, ratio, table } from "./lib.ts";

const CLI = repoPath("dist/meshcnictl");
const HELM = repoPath(".cache/helm/helm");
const RUNS = Number(Bun.env.BENCH_RUNS ?? 100);
const BOUND_MS = 100;

async function buildFloor(dir: string): Promise<string> {
  const src = join(dir, "empty.ts");
  writeFileSync(src, "process.exit(0);\n");
  const outfile = join(dir, "empty");
  const r = await Bun.build({
    entrypoints: [src],
    target: "bun",
    minify: true,
    bytecode: true,
    compile: { outfile, autoloadDotenv: false, autoloadBunfig: false },
  });
  if (!r.success) throw new Error(`building the floor failed: ${r.logs.join("\n")}`);
  return outfile;
}

export async function benchInstallCni(): Promise<string> {
  if (!existsSync(CLI)) {
    const b = Bun.spawnSync([process.execPath, repoPath("scripts/build.ts"), "meshcnictl"], {
      cwd: repoPath(),
      stdout: "pipe",
      stderr: "pipe",
    });
    if (b.exitCode !== 0) throw new Error(`building meshcnictl failed: ${b.stderr}`);
  }
  const dir = mkdtempSync(join(tmpdir(), "bench-cli-"));
  try {
    const floor = await buildFloor(dir);
    const full = readFileSync(repoPath("testdata/cli/install-cni/fully-configured.args"), "utf8")
      .split("\n")
      .filter(Boolean);
    const cmds: Cmd[] = [
      { name: "empty compiled Bun program", argv: [floor] },
      { name: "meshcnictl version", argv: [CLI, "version"] },
      { name: "meshcnictl install-cni", argv: [CLI, "install-cni"] },
      { name: "meshcnictl install-cni (fully configured)", argv: [CLI, "install-cni", ...full] },
    ];
    if (existsSync(HELM)) {
      cmds.push({
        name: "helm template manifests/",
        argv: [HELM, "template", "meshcni", repoPath("manifests"), "-n", "meshcni"],
        env: { PATH: Bun.env.PATH, HOME: dir },
      });
    }
    const stats = measure(cmds, RUNS, 5);
    const [empty, version, plain, configured] = stats;
    const worst = Math.max(plain!.p90, configured!.p90);
    return [
      "## meshcnictl install-cni",
      "",
      `${RUNS} runs each, interleaved; the issue's bound is ${BOUND_MS} ms.`,
      "",
      table(stats, empty),
      "",
      `- install-cni median ${ms(plain!.median)} (${ratio(plain!.median, empty!.median)} ` +
        `Bun's floor, +${ms(plain!.median - version!.median)} over \`version\`); ` +
        `p90 of both renders ${ms(worst)}: ${worst < BOUND_MS ? "within" : "OVER"} the ${BOUND_MS} ms bound.`,
      "",
    ].join("\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(await benchInstallCni());
