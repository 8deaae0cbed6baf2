// bun run image [--arch=amd64,arm64] [--tag=localhost/meshcni:dev] [--musl] [--outdir=dist/image]
// Builds the DaemonSet image for each architecture, offline, and a manifest list tying them:
//
// 1. the node binary (dist/meshcni's build, cross-compiled with Bun's bun-linux-<arch> target)
//    and its meshcni-installer link go to OUTDIR/<arch>/opt/meshcni/;
// 2. Debian's libc6 for that architecture comes from the package registry (apt-get download,
//    cached under .cache/debs) and is unpacked into a sysroot (.cache/sysroot/<arch>);
// 3. internal/agent/install/hostcheck, the same check the agent runs on a node, lists the loader and
//    the libraries the binary loads in that sysroot, and exactly those files are copied into
//    OUTDIR/<arch>/ at the paths the loader looks for them;
// 4. `podman build --platform linux/<arch>` of the Containerfile (FROM scratch; COPY <arch>/ /)
//    tags TAG-<arch> and adds it to the manifest list TAG.
//
// --musl also puts the musl build of the node binary in the image as /opt/meshcni/meshcni-musl
// (the agent installs it on hosts without glibc). It is a second Bun runtime, ~100 MB:
// that variant is over the 120 MB budget, so it is tagged TAG-musl and is not the default.
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { checkBinaryOnHost } from "../internal/agent/install/io/host-root.ts";
import { build, buildBinary, describeVersion } from "./build.ts";

export const ARCHS = {
  amd64: { bun: "bun-linux-x64", musl: "bun-linux-x64-musl", debian: "amd64" },
  arm64: { bun: "bun-linux-arm64", musl: "bun-linux-arm64-musl", debian: "arm64" },
} as const satisfies Record<string, { bun: Bun.Build.CompileTarget; musl: Bun.Build.CompileTarget; debian: string }>;
export type Arch = keyof typeof ARCHS;

/** At most this many bytes per architecture (the image without the musl variant). */
export const IMAGE_BUDGET_BYTES = 120 * 1000 * 1000;

const REPO = join(import.meta.dir, "..");
const CACHE = join(REPO, ".cache");

export type Podman = (args: string[]) => { code: number; stdout: string; stderr: string };
export const podman: Podman = (args) => {
  const r = Bun.spawnSync(["podman", ...args], { stdout: "pipe", stderr: "pipe" });
  return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
};

function run(argv: string[], cwd?: string): string {
  const r = Bun.spawnSync(argv, { cwd, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr.toString().trim() || `exit ${r.exitCode}`}`);
  return r.stdout.toString();
}

/**
 * Debian's libc6 for `arch`, unpacked into a folder (the same version as this machine's when it
 * has one). Downloads once; apt needs `dpkg --add-architecture arm64` and an apt-get update for
 * a foreign architecture (scripts/setup.sh does both).
 */
export function debianSysroot(arch: Arch, log: (l: string) => void = () => {}): string {
  const debs = join(CACHE, "debs", arch);
  const root = join(CACHE, "sysroot", arch);
  const want = `libc6:${ARCHS[arch].debian}`;
  mkdirSync(debs, { recursive: true });
  let deb = readdirSync(debs).find((f) => f.startsWith("libc6_") && f.endsWith(".deb"));
  if (!deb) {
    log(`image: apt-get download ${want}`);
    run(["apt-get", "download", want], debs);
    deb = readdirSync(debs).find((f) => f.startsWith("libc6_") && f.endsWith(".deb"));
    if (!deb) throw new Error(`apt-get download ${want} wrote no package into ${debs}`);
    rmSync(root, { recursive: true, force: true });
  }
  if (!existsSync(join(root, "DEBIAN-PACKAGE"))) {
    rmSync(root, { recursive: true, force: true });
    mkdirSync(root, { recursive: true });
    run(["dpkg-deb", "-x", join(debs, deb), root]);
    Bun.write(join(root, "DEBIAN-PACKAGE"), `${deb}\n`);
  }
  return root;
}

export interface StagedArch {
  arch: Arch;
  dir: string;
  /** Files in the image: the path inside it and its size. */
  files: { path: string; bytes: number }[];
  /** The libraries and loader copied from the sysroot (paths inside the image). */
  libraries: string[];
}

/** Stages OUTDIR/<arch>/: the node binary, its link, and exactly the libraries it loads. */
export async function stageArch(
  arch: Arch,
  outdir: string,
  opts: { musl?: boolean; log?: (l: string) => void } = {},
): Promise<StagedArch> {
  const log = opts.log ?? (() => {});
  const dir = join(outdir, arch);
  rmSync(dir, { recursive: true, force: true });
  const bin = join(dir, "opt/meshcni");
  mkdirSync(bin, { recursive: true });
  await build(["meshcni"], { outdir: bin, target: ARCHS[arch].bun, log });
  if (opts.musl) {
    await buildBinary("meshcni", {
      target: ARCHS[arch].musl,
      outfile: join(bin, "meshcni-musl"),
      version: await describeVersion(),
    });
    log(`built ${join(bin, "meshcni-musl")} (${ARCHS[arch].musl})`);
  }
  const sysroot = debianSysroot(arch, log);
  const verdict = checkBinaryOnHost(sysroot, join(bin, "meshcni"), `the ${arch} node binary`);
  if (verdict.ok !== true) {
    const why = verdict.ok === false ? verdict.problems : verdict.skipped;
    throw new Error(`Debian's libc6 for ${arch} does not satisfy the node binary: ${why.join("; ")}`);
  }
  for (const f of verdict.files) {
    const dest = join(dir, f.path);
    mkdirSync(dirname(dest), { recursive: true });
    copyFileSync(join(sysroot, f.real), dest);
  }
  return { arch, dir, files: listFiles(dir), libraries: verdict.files.map((f) => f.path).sort() };
}

/** Regular files and links under `dir`, as paths inside the image. */
export function listFiles(dir: string, prefix = ""): { path: string; bytes: number }[] {
  const out: { path: string; bytes: number }[] = [];
  for (const e of readdirSync(join(dir, prefix), { withFileTypes: true })) {
    const rel = `${prefix}/${e.name}`;
    if (e.isDirectory()) out.push(...listFiles(dir, rel));
    else out.push({ path: rel, bytes: e.isSymbolicLink() ? 0 : statSync(join(dir, rel)).size });
  }
  return out.sort((a, b) => a.path.localeCompare(b.path));
}

export interface BuiltImage {
  arch: Arch;
  tag: string;
  /** podman's size of the image (uncompressed). */
  bytes: number;
  staged: StagedArch;
}

/** Stages and builds each architecture, adding each image to the manifest list `tag`. */
export async function buildImages(opts: {
  archs: readonly Arch[];
  tag: string;
  outdir: string;
  musl?: boolean;
  podman?: Podman;
  log?: (l: string) => void;
}): Promise<BuiltImage[]> {
  const pm = opts.podman ?? podman;
  const log = opts.log ?? (() => {});
  const list = opts.musl ? `${opts.tag}-musl` : opts.tag;
  pm(["manifest", "rm", list]); // a rebuild starts a fresh list
  const out: BuiltImage[] = [];
  for (const arch of opts.archs) {
    const staged = await stageArch(arch, opts.outdir, { musl: opts.musl ?? false, log });
    const tag = `${list}-${arch}`;
    const r = pm([
      "build",
      "--platform",
      `linux/${arch}`,
      "-t",
      tag,
      "--manifest",
      list,
      "-f",
      join(REPO, "Containerfile"),
      opts.outdir,
    ]);
    if (r.code !== 0) throw new Error(`podman build for ${arch}: ${r.stderr}`);
    const size = pm(["image", "inspect", "--format", "{{.Size}}", tag]);
    const bytes = Number(size.stdout.trim());
    log(
      `image: ${tag} ${(bytes / 1e6).toFixed(1)} MB` +
        `${opts.musl ? "" : bytes > IMAGE_BUDGET_BYTES ? " (over the 120 MB budget)" : ""}`,
    );
    out.push({ arch, tag, bytes, staged });
  }
  log(`image: manifest list ${list} (${opts.archs.map((a) => `linux/${a}`).join(", ")})`);
  return out;
}

if (import.meta.main) {
  const args = Bun.argv.slice(2);
  const opt = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const archs = (opt("arch")?.split(",") ?? Object.keys(ARCHS)) as Arch[];
  for (const a of archs) {
    if (!(a in ARCHS)) {
      console.error(`image: unknown architecture ${a}; one of ${Object.keys(ARCHS).join(", ")}`);
      process.exit(2);
    }
  }
  const built = await buildImages({
    archs,
    tag: opt("tag") ?? "localhost/meshcni:dev",
    outdir: opt("outdir") ?? join(REPO, "dist/image"),
    musl: args.includes("--musl"),
    log: console.log,
  });
  if (!args.includes("--musl") && built.some((b) => b.bytes > IMAGE_BUDGET_BYTES)) process.exitCode = 1;
}
