// bun run build [name...] [--target=bun-linux-arm64] [--outdir=dist] [--image-digest=sha256:...]
// Compiles the binaries. The compiled programs never read .env, bunfig.toml, tsconfig or
// package.json from the directory they run in (a runtime's working directory is not ours), and
// carry their version.
//
// dist/meshcni is the node's multi-call binary (cmd/node.ts): the CNI plugin, and the agent
// when run as meshcni-installer. dist/meshcni-installer is a symbolic link to it, so the node
// carries one Bun runtime, not two.
import { rmSync, symlinkSync } from "node:fs";
import { $ } from "bun";
import pkg from "../package.json" with { type: "json" };

/** The compiled programs and their entrypoints. */
export const PROGRAMS = {
  meshcni: "cmd/node.ts",
  meshcnictl: "cmd/cli.ts",
} as const;
export type ProgramName = keyof typeof PROGRAMS;
/** Names that are links to a program: the program chooses what to be by the name it runs as. */
export const LINKS = {
  "meshcni-installer": "meshcni",
} as const satisfies Record<string, ProgramName>;
export type BinaryName = ProgramName | keyof typeof LINKS;
export const BINARY_NAMES = [...Object.keys(PROGRAMS), ...Object.keys(LINKS)] as BinaryName[];

export async function describeVersion(): Promise<string> {
  const rev = await $`git rev-parse --short HEAD`.quiet().nothrow();
  const dirty = await $`git status --porcelain --untracked-files=no`.quiet().nothrow();
  const sha = rev.exitCode === 0 ? rev.stdout.toString().trim() : "";
  if (!sha) return pkg.version;
  return `${pkg.version}+${sha}${dirty.stdout.toString().trim() ? ".dirty" : ""}`;
}

/** An image digest as a release names the published image: sha256: and 64 hex digits. */
export const IMAGE_DIGEST = /^sha256:[0-9a-f]{64}$/;

/**
 * The image digest to compile into meshcnictl (internal/cli/manifests/release-image.ts): the
 * --image-digest=sha256:... argument, else MESHCNI_IMAGE_DIGEST, else none. The digest is the
 * published manifest list's (e.g. from `podman manifest push --digestfile`).
 */
export function imageDigestOf(args: readonly string[], env: Record<string, string | undefined>): string | undefined {
  const d = args.find((a) => a.startsWith("--image-digest="))?.slice(15) ?? env.MESHCNI_IMAGE_DIGEST;
  if (d === undefined || d === "") return undefined;
  if (!IMAGE_DIGEST.test(d)) throw new Error(`image digest ${JSON.stringify(d)}: must be sha256: and 64 hex digits`);
  return d;
}

/**
 * The JIT policy the binaries start with: JavaScriptCore's tier-up thresholds × 10. The plugin
 * runs for a few milliseconds, in which compiling a function it calls a few hundred times costs
 * more than it saves (perf: see docs/benchmarks.md). The node agent, a long-lived process of the
 * same binary, goes back to the normal policy as it starts (cmd/node.ts).
 */
export const JIT_POLICY = 10;

/**
 * The Bun flags compiled into dist/meshcni, the node binary the container runtime runs as root.
 * libcni hands the plugin the runtime's whole environment, and a compiled Bun program reads
 * BUN_OPTIONS as flags: `--preload FILE` (or `--require`, `--import`, a `--config` whose bunfig
 * preloads) would run any file before the plugin. With code generation from strings refused at
 * its strict level, the engine runs only the code inside the executable: such a preload is
 * refused and the process exits 1 before the plugin starts (a failed ADD, never one without
 * rules), and so is BUN_INSPECT's debugger. BUN_OPTIONS can raise the level, not lower it.
 * BUN_BE_BUN=1 (the executable becomes the bun CLI, these flags gone) cannot be stopped from
 * inside: the README's trust assumptions say so.
 */
export const NODE_EXEC_ARGV = ["--disallow-code-generation-from-strings=strict"];

export async function buildBinary(
  name: ProgramName,
  opts: { target?: Bun.Build.CompileTarget; outfile: string; version: string; imageDigest?: string },
) {
  const result = await Bun.build({
    entrypoints: [PROGRAMS[name]],
    target: "bun",
    format: "esm",
    minify: true,
    // Split chunks stay inside the executable; a command only parses the code it imports, and
    // bytecode saves compiling it. Together they keep the plugin's start near Bun's floor.
    splitting: true,
    bytecode: true,
    define: {
      MESHCNI_VERSION: JSON.stringify(opts.version),
      ...(opts.imageDigest ? { MESHCNI_IMAGE_DIGEST: JSON.stringify(opts.imageDigest) } : {}),
    },
    compile: {
      ...(opts.target ? { target: opts.target } : {}),
      outfile: opts.outfile,
      autoloadDotenv: false,
      autoloadBunfig: false,
      autoloadTsconfig: false,
      autoloadPackageJson: false,
      jitPolicy: JIT_POLICY,
      ...(name === "meshcni" ? { execArgv: NODE_EXEC_ARGV } : {}),
    },
  });
  if (!result.success) {
    for (const log of result.logs) console.error(log);
    throw new Error(`building ${name} failed`);
  }
}

/** Builds `names` (a link builds its program) into `outdir`; returns the files written. */
export async function build(
  names: readonly BinaryName[],
  opts: { outdir: string; target?: Bun.Build.CompileTarget; imageDigest?: string; log?: (line: string) => void },
): Promise<string[]> {
  const version = await describeVersion();
  const programs = new Set(names.map((n) => (n in LINKS ? LINKS[n as keyof typeof LINKS] : (n as ProgramName))));
  const written: string[] = [];
  for (const name of programs) {
    const started = performance.now();
    await buildBinary(name, {
      ...(opts.target ? { target: opts.target } : {}),
      ...(opts.imageDigest && name === "meshcnictl" ? { imageDigest: opts.imageDigest } : {}),
      outfile: `${opts.outdir}/${name}`,
      version,
    });
    written.push(`${opts.outdir}/${name}`);
    opts.log?.(
      `built ${opts.outdir}/${name} ${version}${opts.target ? ` (${opts.target})` : ""} ` +
        `in ${Math.round(performance.now() - started)} ms`,
    );
  }
  for (const [link, program] of Object.entries(LINKS)) {
    if (!programs.has(program)) continue;
    const path = `${opts.outdir}/${link}`;
    rmSync(path, { force: true });
    symlinkSync(program, path);
    written.push(path);
    opts.log?.(`linked ${path} -> ${program}`);
  }
  return written;
}

if (import.meta.main) {
  const args = Bun.argv.slice(2);
  const target = args.find((a) => a.startsWith("--target="))?.slice(9) as Bun.Build.CompileTarget | undefined;
  const outdir = args.find((a) => a.startsWith("--outdir="))?.slice(9) ?? "dist";
  const names = args.filter((a) => !a.startsWith("--")) as BinaryName[];
  for (const name of names) {
    if (!BINARY_NAMES.includes(name)) throw new Error(`unknown binary ${name}; one of ${BINARY_NAMES.join(", ")}`);
  }
  const imageDigest = imageDigestOf(args, Bun.env);
  await build(names.length ? names : BINARY_NAMES, {
    outdir,
    ...(target ? { target } : {}),
    ...(imageDigest ? { imageDigest } : {}),
    log: console.log,
  });
}
