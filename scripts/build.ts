// bun run build [name...] [--target=bun-linux-arm64] [--outdir=dist]
// Compiles the three binaries. The compiled programs never read .env, bunfig.toml, tsconfig or
// package.json from the directory they run in (a runtime's working directory is not ours), and
// carry their version.
import { $ } from "bun";
import pkg from "../package.json" with { type: "json" };

export const BINARIES = {
  meshcni: "cmd/plugin.ts",
  "meshcni-installer": "cmd/installer.ts",
  meshcnictl: "cmd/cli.ts",
} as const;
export type BinaryName = keyof typeof BINARIES;

export async function describeVersion(): Promise<string> {
  const rev = await $`git rev-parse --short HEAD`.quiet().nothrow();
  const dirty = await $`git status --porcelain --untracked-files=no`.quiet().nothrow();
  const sha = rev.exitCode === 0 ? rev.stdout.toString().trim() : "";
  if (!sha) return pkg.version;
  return `${pkg.version}+${sha}${dirty.stdout.toString().trim() ? ".dirty" : ""}`;
}

export async function buildBinary(name: BinaryName, opts: { target?: Bun.Build.CompileTarget; outfile: string; version: string }) {
  const result = await Bun.build({
    entrypoints: [BINARIES[name]],
    target: "bun",
    format: "esm",
    minify: true,
    // Split chunks stay inside the executable; a command only parses the code it imports, and
    // bytecode saves compiling it. Together they keep the plugin's start near Bun's floor.
    splitting: true,
    bytecode: true,
    define: { MESHCNI_VERSION: JSON.stringify(opts.version) },
    compile: {
      ...(opts.target ? { target: opts.target } : {}),
      outfile: opts.outfile,
      autoloadDotenv: false,
      autoloadBunfig: false,
      autoloadTsconfig: false,
      autoloadPackageJson: false,
    },
  });
  if (!result.success) {
    for (const log of result.logs) console.error(log);
    throw new Error(`building ${name} failed`);
  }
}

if (import.meta.main) {
  const args = Bun.argv.slice(2);
  const target = args.find((a) => a.startsWith("--target="))?.slice(9) as Bun.Build.CompileTarget | undefined;
  const outdir = args.find((a) => a.startsWith("--outdir="))?.slice(9) ?? "dist";
  const names = args.filter((a) => !a.startsWith("--")) as BinaryName[];
  const version = await describeVersion();
  for (const name of names.length ? names : (Object.keys(BINARIES) as BinaryName[])) {
    if (!(name in BINARIES)) throw new Error(`unknown binary ${name}; one of ${Object.keys(BINARIES).join(", ")}`);
    const started = performance.now();
    await buildBinary(name, { target, outfile: `${outdir}/${name}`, version });
    console.log(`built ${outdir}/${name} ${version} in ${Math.round(performance.now() - started)} ms`);
  }
}
