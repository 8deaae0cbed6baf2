// The plugin's start-up with a loader and C library of its own: VERSION of the node binary
// rewritten by internal/agent/install/hostcheck/elf-rewrite.ts (PT_INTERP and DT_RPATH naming a
// private folder that holds this machine's glibc loader and the four libraries it loads), against
// the binary as built (target ≤ 1.05x) and against an empty Bun program compiled the same way and
// rewritten alike (target ≤ 1.1x), all in the same run.
// Run alone: node_modules/.bin/bun bench/private-loader.ts
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoPath } from "../test/support/golden.ts";
import { stagePrivateLoader, writeRewritten } from "../test/support/private-loader.ts";
import { buildEmptyProgram, freshCopy, measure, ms, ratio, type Stats, table } from "./lib.ts";

const BUILT = repoPath("dist/meshcni");
const RUNS = Number(Bun.env.BENCH_RUNS ?? 200);

export async function benchPrivateLoader(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "meshcni-bench-loader-"));
  try {
    const plugin = freshCopy(BUILT, dir);
    const empty = await buildEmptyProgram(dir);
    // A folder of the CNI bin dir's depth (/opt/cni/bin/meshcni.d is 22 bytes; this is longer).
    const folder = join(dir, "bin", "meshcni.d");
    const loader = stagePrivateLoader(plugin, "/", folder);
    const pluginPrivate = join(folder, "meshcni");
    const emptyPrivate = join(folder, "empty");
    writeRewritten(plugin, pluginPrivate, loader);
    writeRewritten(empty, emptyPrivate, loader);

    const env = { PATH: Bun.env.PATH!, CNI_COMMAND: "VERSION" };
    const stdin = '{"cniVersion":"1.0.0"}';
    const stats = measure(
      [
        { name: "meshcni VERSION, as built (the host's loader and libc)", argv: [plugin], env, stdin },
        { name: "meshcni VERSION, private loader and libc", argv: [pluginPrivate], env, stdin },
        { name: "empty Bun program (same build), as built", argv: [empty], env, stdin },
        { name: "empty Bun program (same build), private loader and libc", argv: [emptyPrivate], env, stdin },
      ],
      RUNS,
    );
    const [built, priv, emptyBuilt, emptyPriv] = stats as [Stats, Stats, Stats, Stats];
    const verdict = (x: number, max: number) => (x <= max ? `≤ ${max}x ✓` : `> ${max}x ✗`);
    const r1 = priv.median / built.median;
    const r2 = priv.median / emptyPriv.median;
    return [
      "## Start-up with a private loader and C library (bench/private-loader.ts)",
      "",
      "The binaries rewritten by internal/agent/install/hostcheck/elf-rewrite.ts to load " +
        `${loader.files.join(", ")} from one folder (${folder.length} bytes); ${RUNS} runs each, interleaved.`,
      "",
      table(stats, built),
      "",
      "| figure | value | target |",
      "|---|---|---|",
      `| meshcni VERSION private / as built = ${ms(priv.median)} / ${ms(built.median)} | ` +
        `${ratio(priv.median, built.median)} | ${verdict(Number(r1.toFixed(2)), 1.05)} |`,
      `| meshcni VERSION private / empty Bun program private = ${ms(priv.median)} / ${ms(emptyPriv.median)} | ` +
        `${ratio(priv.median, emptyPriv.median)} | ${verdict(Number(r2.toFixed(2)), 1.1)} |`,
      `| empty Bun program private / as built | ${ratio(emptyPriv.median, emptyBuilt.median)} | (reported) |`,
      "",
    ].join("\n");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) console.log(await benchPrivateLoader());
