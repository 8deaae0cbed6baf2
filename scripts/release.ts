// bun run release [--outdir=dist/release] [--platforms=linux-amd64,darwin-arm64] [--node=linux-amd64,...]
//                 [--image-digest=sha256:...]
// Builds meshcnictl for every platform install.sh knows and the node binary (meshcni: the plugin,
// and the agent as meshcni-installer) for every Linux architecture, glibc and musl builds (Bun's
// cross-compile targets), and writes SHA256SUMS beside them, in the format `sha256sum -c` reads.
// Upload the folder's files to a release; install.sh downloads meshcnictl-<os>-<arch> and
// SHA256SUMS from there.
// With --image-digest (or MESHCNI_IMAGE_DIGEST: the published manifest list's digest, e.g. from
// `podman manifest push --digestfile`), meshcnictl carries it and install-cni pins the default
// image by it, and the chart is packaged as meshcni-<version>.tgz with values.yaml's digest set.
import { createHash } from "node:crypto";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { buildBinary, describeVersion, IMAGE_DIGEST, imageDigestOf } from "./build.ts";

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

/** values.yaml with its `digest: ""` line set to `digest` (the rest, comments too, as it is). */
export function stampDigest(valuesYaml: string, digest: string): string {
  if (!IMAGE_DIGEST.test(digest))
    throw new Error(`image digest ${JSON.stringify(digest)}: must be sha256: and 64 hex digits`);
  const out = valuesYaml.replace(/^digest: ""$/m, `digest: "${digest}"`);
  if (out === valuesYaml) throw new Error('manifests/values.yaml has no top-level `digest: ""` line to set');
  return out;
}

/** The chart as `helm package` lays it out (meshcni/... in a gzipped tar), its digest set. */
function packageChart(outdir: string, digest: string): string {
  const chartDir = join(import.meta.dir, "../manifests");
  const version = /^version:\s*"?([^"\s]+)"?$/m.exec(readFileSync(join(chartDir, "Chart.yaml"), "utf8"))?.[1];
  if (!version) throw new Error("manifests/Chart.yaml has no version");
  const stage = mkdtempSync(join(tmpdir(), "meshcni-chart-"));
  try {
    cpSync(chartDir, join(stage, "meshcni"), { recursive: true });
    const values = join(stage, "meshcni/values.yaml");
    writeFileSync(values, stampDigest(readFileSync(values, "utf8"), digest));
    const file = join(outdir, `meshcni-${version}.tgz`);
    const r = Bun.spawnSync(["tar", "-czf", file, "--owner=0", "--group=0", "--sort=name", "-C", stage, "meshcni"], {
      stdout: "pipe",
      stderr: "pipe",
    });
    if (r.exitCode !== 0) throw new Error(`packaging the chart: ${r.stderr.toString()}`);
    return file;
  } finally {
    rmSync(stage, { recursive: true, force: true });
  }
}

export async function release(
  outdir: string,
  platforms: readonly Platform[],
  log: (line: string) => void = console.log,
  node: readonly NodePlatform[] = [],
  opts: { imageDigest?: string } = {},
): Promise<string[]> {
  const version = await describeVersion();
  rmSync(outdir, { recursive: true, force: true });
  mkdirSync(outdir, { recursive: true });
  const files: string[] = [];
  for (const p of platforms) {
    const outfile = join(outdir, `meshcnictl-${p}`);
    const started = performance.now();
    await buildBinary("meshcnictl", {
      target: PLATFORMS[p],
      outfile,
      version,
      ...(opts.imageDigest ? { imageDigest: opts.imageDigest } : {}),
    });
    files.push(outfile);
    log(
      `built ${outfile} (${PLATFORMS[p]}, ${version}${opts.imageDigest ? `, image ${opts.imageDigest}` : ""}) ` +
        `in ${Math.round(performance.now() - started)} ms`,
    );
  }
  if (opts.imageDigest) {
    const file = packageChart(outdir, opts.imageDigest);
    files.push(file);
    log(`packaged ${file} (image ${opts.imageDigest})`);
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
  const wanted =
    args
      .find((a) => a.startsWith("--platforms="))
      ?.slice(12)
      .split(",") ?? Object.keys(PLATFORMS);
  for (const p of wanted) {
    if (!(p in PLATFORMS)) {
      console.error(`release: unknown platform ${p}; one of ${Object.keys(PLATFORMS).join(", ")}`);
      process.exit(2);
    }
  }
  const nodes =
    args
      .find((a) => a.startsWith("--node="))
      ?.slice(7)
      .split(",")
      .filter((p) => p !== "") ?? Object.keys(NODE_PLATFORMS);
  for (const p of nodes) {
    if (!(p in NODE_PLATFORMS)) {
      console.error(`release: unknown node platform ${p}; one of ${Object.keys(NODE_PLATFORMS).join(", ")}`);
      process.exit(2);
    }
  }
  const imageDigest = imageDigestOf(args, Bun.env);
  await release(outdir, wanted as Platform[], console.log, nodes as NodePlatform[], imageDigest ? { imageDigest } : {});
}
