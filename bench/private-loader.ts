// The plugin's start-up with a loader and C library of its own (issue 23): VERSION of the node
// binary as the agent installs it (internal/agent/install/installer.ts: the binary rewritten to
// name BIN/meshcni.d/<id>/, which holds this machine's glibc loader and the four libraries it
// loads), against the binary as built (today's VERSION, target ≤ 1.05x) and against an empty Bun
// program compiled the same way and installed alike by the same code (target ≤ 1.1x), all in
// the same run, interleaved.
// Run alone: node_modules/.bin/bun bench/private-loader.ts
import { mkdirSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { entryFromConfigText } from "../internal/agent/install/entry.ts";
import { Installer } from "../internal/agent/install/installer.ts";
import { createHostFs } from "../internal/agent/install/io/fs.ts";
import { checkBinaryOnHost } from "../internal/agent/install/io/host-root.ts";
import { repoPath } from "../test/support/golden.ts";
import { buildEmptyProgram, freshCopy, measure, ms, ratio, type Stats, table } from "./lib.ts";

const BUILT = repoPath("dist/meshcni");
const RUNS = Number(Bun.env.BENCH_RUNS ?? 200);

/** Installs `binary` as the agent does into `dir`/bin (the host seeing it there); returns the installed path. */
function install(binary: string, dir: string): string {
  const bin = join(dir, "bin");
  mkdirSync(join(dir, "net"), { recursive: true });
  const quiet = { debug() {}, info() {}, warn() {}, error() {} };
  const inst = new Installer(
    {
      hostNetDir: join(dir, "net"),
      hostBinDir: bin,
      pluginBinary: binary,
      serviceAccountDir: join(dir, "sa"),
      entry: entryFromConfigText(undefined, "/etc/cni/net.d"),
    },
    { fs: createHostFs(), log: quiet, now: () => performance.now(), canRun: checkBinaryOnHost },
  );
  inst.prepare();
  if (!inst.installBinary()) throw new Error(`${binary} was not installed`);
  return join(bin, "meshcni");
}

export async function benchPrivateLoader(): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "meshcni-bench-loader-"));
  try {
    const plugin = freshCopy(BUILT, dir);
    const empty = await buildEmptyProgram(dir);
    const pluginPrivate = install(plugin, join(dir, "plugin"));
    const emptyPrivate = install(empty, join(dir, "empty-installed"));
    const folder = join(dir, "plugin", "bin", "meshcni.d");
    const files = readdirSync(join(folder, readdirSync(folder)[0]!)).sort();

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
      "The binaries as the agent installs them (internal/agent/install/installer.ts), loading " +
        `${files.join(", ")} from their own folder (${folder.length + 17} bytes); ${RUNS} runs each, interleaved.`,
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
