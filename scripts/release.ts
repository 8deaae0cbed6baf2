// bun run release [--outdir=dist/release] [--platforms=linux-amd64,darwin-arm64] [--node=linux-amd64,...]
// Builds meshcnictl for every platform install.sh knows and the node binary (meshcni: the plugin,
// and the agent as meshcni-installer) for every Linux architecture, glibc and musl builds (Bun's
// cross-compile targets), and writes SHA256SUMS beside them, in the format `sha256sum -c` reads.
// Upload the folder's files to a release; install.sh downloads meshcnictl-<os>-<arch> and
// SHA256SUMS from there.
import { createHash } from "node:crypto";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { buildBinary, describeVersion } from "./build.ts";

/** Release file suffixes (as install.sh names them) and Bun's compile targets. */
export const PLATFORMS = {
  "linux-amd64": "bun-linux-x64",
  "linux-arm64": "bun-linux-arm64",
  "darwin-amd64": "bun-darwin-x64",
  "darwin-arm64": "bun-darwin-arm64",
} as const satisfies Record<string, Bun.Build.CompileTarget>;
export type Platform = keyof typeof PLATFORMS;

/**
 * The node binary's release files (meshcni-<suffix>) and Bun's compile targets. The musl builds
 * run on hosts without glibc; they still load musl's loader, libstdc++ and libgcc_s from the
 * host (README: "Which hosts run the plugin").
 */
export const NODE_PLATFORMS = {
  "linux-amd64": "bun-linux-x64",
  "linux-arm64": "bun-linux-arm64",
  "linux-amd64-musl": "bun-linux-x64-musl",
  "linux-arm64-musl": "bun-linux-arm64-musl",
} as const satisfies Record<string, Bun.Build.CompileTarget>;
export type NodePlatform = keyof typeof NODE_PLATFORMS;

export function renderChecksums(files: readonly { name: string; bytes: Uint8Array }[]): string {
  return files.map((f) => `${createHash("sha256").update(f.bytes).digest("hex")}  ${f.name}\n`).join("");
}

export async function release(outdir: string, platforms: readonly Platform[], log: (line: string) => void = console.log, node: readonly NodePlatform[] = []): Promise<string[]> {
  const version = await describeVersion();
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const files: string[] = [];
  for (const p of platforms) {
    const outfile = join(outdir, `meshcnictl-${p}`);
    const started = performance.now();
    await buildBinary("meshcnictl", { target: PLATFORMS[p], outfile, version });
    files.push(outfile);
    log(`built ${outfile} (${PLATFORMS[p]}, ${version}) in ${Math.round(performance.now() - started)} ms`);
  }
  for (const p of node) {
    const outfile = join(outdir, `meshcni-${p}`);
    const started = performance.now();
    await buildBinary("meshcni", { target: NODE_PLATFORMS[p], outfile, version });
    files.push(outfile);
    log(`built ${outfile} (${NODE_PLATFORMS[p]}, ${version}) in ${Math.round(performance.now() - started)} ms`);
  }
  const sums = renderChecksums(files.map((f) => ({ name: basename(f), bytes: readFileSync(f) })));
  writeFileSync(join(outdir, "SHA256SUMS"), sums);
  log(`wrote ${join(outdir, "SHA256SUMS")}`);
  return files;
}

if (import.meta.main) {
  const args = Bun.argv.slice(2);
  const outdir = args.find((a) => a.startsWith("--outdir="))?.slice(9) ?? "dist/release";
  const wanted = args.find((a) => a.startsWith("--platforms="))?.slice(12).split(",") ?? Object.keys(PLATFORMS);
  for (const p of wanted) {
    if (!(p in PLATFORMS)) {
      console.error(`release: unknown platform ${p}; one of ${Object.keys(PLATFORMS).join(", ")}`);
      process.exit(2);
    }
  }
  const nodes = args.find((a) => a.startsWith("--node="))?.slice(7).split(",").filter((p) => p !== "") ?? Object.keys(NODE_PLATFORMS);
  for (const p of nodes) {
    if (!(p in NODE_PLATFORMS)) {
      console.error(`release: unknown node platform ${p}; one of ${Object.keys(NODE_PLATFORMS).join(", ")}`);
      process.exit(2);
    }
  }
  await release(outdir, wanted as Platform[], console.log, nodes as NodePlatform[]);
}
