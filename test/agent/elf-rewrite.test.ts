// The compiled node binary given a loader and C library of its own by the ELF rewrite
// (internal/agent/install/hostcheck/elf-rewrite.ts), as the agent will install it on any host:
// - in a root that has no C library at all (only /proc and /dev bind-mounted, the loader and
//   the libraries in their private folder), it answers VERSION, with a private folder path of
//   over 200 bytes and with a short one; the binary as built does not even start there;
// - on this glibc host, every library comes from the private folder (the loader's own log),
//   even with LD_LIBRARY_PATH naming the host's (DT_RPATH comes first), where the binary as
//   built loads the host's;
// - readelf reads it, the same input gives the same bytes, rewriting it again to another path
//   gives what rewriting the original does, and Bun's program (the .bun section) is untouched;
// - small executables (test/support/elf-builder.ts), ET_EXEC with a large .bss and PIE, x86-64
//   and aarch64, rewritten, run: the kernel maps the added segment and the loader reads it;
// - the arm64 build, with Debian's arm64 libc6 (scripts/image.ts downloads it once), answers
//   VERSION under qemu-user in such a root.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { buildElfRewrite, planElfRewrite } from "../../internal/agent/install/hostcheck/elf-rewrite.ts";
import { parseElf } from "../../internal/agent/install/hostcheck/elf.ts";
import { buildBinary, describeVersion } from "../../scripts/build.ts";
import { debianSysroot } from "../../scripts/image.ts";
import { type ExecutableSpec, makeExecutable } from "../support/elf-builder.ts";
import { isRoot } from "../support/netns.ts";
import { type PrivateLoader, stagePrivateLoader, writeRewritten } from "../support/private-loader.ts";
import { ensureBuilt, PLUGIN } from "./harness.ts";

const QEMU = Bun.which("qemu-aarch64-static");
const VERSION_IN = '{"cniVersion":"1.0.0"}';
const GLIBC_FILES = ["ld-linux-x86-64.so.2", "libc.so.6", "libdl.so.2", "libm.so.6", "libpthread.so.0"];

let dir: string;
/** A private folder path of over 200 bytes, on this machine and inside each scratch root. */
let longPath: string;
/** Debian's arm64 libc6, unpacked once (downloaded on a fresh clone: not within a test's time). */
let armSysroot = "";
beforeAll(() => {
  ensureBuilt();
  if (QEMU !== null) armSysroot = debianSysroot("arm64");
  dir = mkdtempSync(join(tmpdir(), "meshcni-elf-"));
  longPath = join(dir, `cni-bin-${"k".repeat(100)}`, `data-${"0123456789abcdef".repeat(6)}`, "meshcni.d");
}, 300_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** Files under `root`, as paths inside it (not descending into /proc and /dev). */
function filesIn(root: string, prefix = ""): string[] {
  return readdirSync(join(root, prefix), { withFileTypes: true })
    .flatMap((e) => {
      const rel = `${prefix}/${e.name}`;
      if (e.isDirectory()) return rel === "/proc" || rel === "/dev" ? [] : filesIn(root, rel);
      return [rel];
    })
    .sort();
}

/**
 * Runs `argv` chrooted in `root` with the host's /proc and /dev bind-mounted, in a mount
 * namespace of its own (the mounts end with it).
 */
function runChrooted(root: string, argv: string[], env: Record<string, string>) {
  mkdirSync(join(root, "proc"), { recursive: true });
  mkdirSync(join(root, "dev"), { recursive: true });
  const script = 'r="$1"; shift; mount --bind /proc "$r/proc" && mount --rbind /dev "$r/dev" && exec chroot "$r" "$@"';
  const r = Bun.spawnSync(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", root, ...argv], {
    env: { PATH: Bun.env.PATH!, ...env },
    stdin: new TextEncoder().encode(VERSION_IN),
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

/** The files the loader ran the init of, from LD_DEBUG=libs ("calling init: PATH"). */
const initialized = (log: string) => [...log.matchAll(/calling init: (\S+)/g)].map((m) => m[1]!).sort();

function expectVersion(r: { code: number; stdout: string; stderr: string }) {
  expect(r.stderr).not.toContain("rror");
  expect(r.code).toBe(0);
  expect(JSON.parse(r.stdout)).toMatchObject({
    cniVersion: "1.1.0",
    supportedVersions: expect.arrayContaining(["1.0.0"]),
  });
}

describe.skipIf(!isRoot())("the node binary (amd64) with a private loader and C library", () => {
  test.each([
    ["a private folder path of over 200 bytes", () => longPath],
    ["a short private folder path", () => "/m"],
  ])("answers VERSION in a root with no C library: %s", (_, path) => {
    const folder = path();
    expect(folder === "/m" || folder.length >= 200).toBe(true);
    const root = mkdtempSync(join(dir, "root-"));
    const loader = stagePrivateLoader(PLUGIN, "/", folder, root);
    expect(loader.files).toEqual(GLIBC_FILES);
    writeRewritten(PLUGIN, join(root, folder, "meshcni"), loader);
    copyFileSync(PLUGIN, join(root, "meshcni-as-built"));
    // nothing in the root but the binaries and the private folder
    const inFolder = [...GLIBC_FILES, "meshcni"].map((f) => join(folder, f));
    expect(filesIn(root)).toEqual(["/meshcni-as-built", ...inFolder].sort());

    expectVersion(runChrooted(root, [join(folder, "meshcni")], { CNI_COMMAND: "VERSION" }));
    // the binary as built needs the host's loader, which this root does not have
    const asBuilt = runChrooted(root, ["/meshcni-as-built"], { CNI_COMMAND: "VERSION" });
    expect(asBuilt.code).not.toBe(0);
    expect(asBuilt.stderr).toContain("No such file or directory");
    rmSync(root, { recursive: true, force: true });
  });

  test("on this glibc host every library comes from the private folder, whatever LD_LIBRARY_PATH says", () => {
    const loader = stagePrivateLoader(PLUGIN, "/", longPath);
    const bin = join(longPath, "meshcni");
    writeRewritten(PLUGIN, bin, loader);
    const hostLibs = "/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu:/lib64";
    const run = (file: string) => {
      const r = Bun.spawnSync([file], {
        env: { CNI_COMMAND: "VERSION", LD_DEBUG: "libs", LD_LIBRARY_PATH: hostLibs },
        stdin: new TextEncoder().encode(VERSION_IN),
        stdout: "pipe",
        stderr: "pipe",
      });
      expect(r.exitCode).toBe(0);
      expect(JSON.parse(r.stdout.toString()).cniVersion).toBe("1.1.0");
      return r.stderr.toString();
    };
    const log = run(bin);
    expect(initialized(log)).toEqual(GLIBC_FILES.map((f) => join(longPath, f)).sort());
    // the loader looked nowhere else: not in LD_LIBRARY_PATH's folders, not in ld.so.cache
    const tried = [...log.matchAll(/trying file=(\S+)/g)].map((m) => m[1]!);
    expect(tried.length).toBeGreaterThan(0);
    expect(tried.filter((f) => !f.startsWith(`${longPath}/`))).toEqual([]);
    expect(log).not.toContain("search cache");
    // the binary as built, with the same environment, loads the host's
    expect(initialized(run(PLUGIN)).filter((f) => f.startsWith("/lib/x86_64-linux-gnu/"))).toHaveLength(4);
  });

  test("readelf reads it; same input, same bytes; rewritten again = the original rewritten; .bun untouched", () => {
    const input = readFileSync(PLUGIN);
    const long = { interpreter: join(longPath, "ld-linux-x86-64.so.2"), runPath: longPath };
    const short = { interpreter: "/m/ld-linux-x86-64.so.2", runPath: "/m" };
    const once = buildElfRewrite(input, long);
    expect(Bun.deepEquals(buildElfRewrite(input, long).bytes, once.bytes)).toBe(true);
    const again = buildElfRewrite(once.bytes, short);
    expect(again.replaced).toBe(true);
    expect(Bun.deepEquals(again.bytes, buildElfRewrite(input, short).bytes)).toBe(true);

    // planning reads the headers, .dynamic, .dynstr and the section headers: kilobytes of 100 MB
    let read = 0;
    planElfRewrite(
      (o, n) => {
        read += n;
        return input.subarray(o, o + n);
      },
      input.length,
      long,
    );
    expect(read).toBeLessThan(64 * 1024);
    expect(input.length).toBeGreaterThan(50_000_000);

    const file = join(dir, "meshcni-readelf");
    writeRewritten(input, file, { ...long, files: [] });
    const readelf = (args: string[], f: string) => {
      const r = Bun.spawnSync(["readelf", ...args, f], { stdout: "pipe", stderr: "pipe" });
      expect(r.stderr.toString()).toBe("");
      expect(r.exitCode).toBe(0);
      return r.stdout.toString();
    };
    const segments = readelf(["-lW"], file);
    expect(segments).toContain(`[Requesting program interpreter: ${long.interpreter}]`);
    expect(segments).toContain(`There are 10 program headers, starting at offset ${once.segment.offset}`);
    const dynamic = readelf(["-d"], file);
    expect(dynamic).toContain(`Library rpath: [${longPath}]`);
    const needed = (text: string) => [...text.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]);
    expect(needed(dynamic)).toEqual(needed(readelf(["-d"], PLUGIN)));
    expect(needed(dynamic)).toHaveLength(5);

    // Bun's program: the .bun section at the same place, its bytes the same
    const bun = (text: string) => {
      const m = /\.bun\s+PROGBITS\s+([0-9a-f]+) ([0-9a-f]+) ([0-9a-f]+)/.exec(text);
      return m ? { addr: m[1], offset: parseInt(m[2]!, 16), size: parseInt(m[3]!, 16) } : undefined;
    };
    const before = bun(readelf(["-SW"], PLUGIN))!;
    expect(before.size).toBeGreaterThan(100_000);
    expect(bun(readelf(["-SW"], file))).toEqual(before);
    const section = (b: Uint8Array) => b.subarray(before.offset, before.offset + before.size);
    expect(Bun.deepEquals(section(once.bytes), section(input))).toBe(true);
    const info = parseElf((o, n) => once.bytes.subarray(o, o + n), once.bytes.length);
    expect(info).toMatchObject({ interpreter: long.interpreter, runpath: [longPath] });
  });
});

describe("small executables, as a linker lays them out, run with a private loader", () => {
  const cases: [string, ExecutableSpec][] = [
    ["x86-64, ET_EXEC, 3 MiB of .bss", { type: 2, bss: 3 << 20 }],
    ["x86-64, PIE", { type: 3, bss: 0x1234 }],
    ...(QEMU === null
      ? []
      : ([
          ["aarch64 under qemu-user, ET_EXEC", { machine: 183, type: 2, bss: 3 << 20 }],
          ["aarch64 under qemu-user, PIE", { machine: 183, type: 3 }],
        ] as [string, ExecutableSpec][])),
  ];
  test.each(cases)(
    "%s: mapped and loaded, libc from the folder, exit 42",
    (_, spec) => {
      const arm = spec.machine === 183;
      const sysroot = arm ? armSysroot : "/";
      const interpreter = arm ? "/lib/ld-linux-aarch64.so.1" : "/lib64/ld-linux-x86-64.so.2";
      const exe = join(dir, `small-${arm ? "arm64" : "amd64"}-${spec.type}`);
      writeFileSync(exe, makeExecutable({ ...spec, interpreter, needed: ["libc.so.6", "libm.so.6"] }));
      const loader = stagePrivateLoader(exe, sysroot, join(longPath, `small-${spec.type}`));
      const bin = join(dir, `${basename(exe)}.private`);
      writeRewritten(exe, bin, loader);
      const r = Bun.spawnSync(arm ? [QEMU!, "-E", "LD_DEBUG=libs", bin] : [bin], {
        env: arm ? {} : { LD_DEBUG: "libs" },
        stdout: "pipe",
        stderr: "pipe",
      });
      expect(r.exitCode).toBe(42);
      expect(initialized(r.stderr.toString())).toEqual(loader.files.map((f) => join(loader.runPath, f)).sort());
    },
    60_000,
  );
});

describe.skipIf(!isRoot() || QEMU === null)("the arm64 build under qemu-user", () => {
  let arm: string;
  let sysroot: string;
  beforeAll(async () => {
    arm = join(dir, "meshcni-arm64");
    await buildBinary("meshcni", { target: "bun-linux-arm64", outfile: arm, version: await describeVersion() });
    sysroot = armSysroot;
  }, 300_000);

  test("answers VERSION in a root with no C library, every library from the private folder", () => {
    const root = mkdtempSync(join(dir, "root-arm64-"));
    const loader: PrivateLoader = stagePrivateLoader(arm, sysroot, longPath, root);
    expect(loader.files).toEqual(["ld-linux-aarch64.so.1", "libc.so.6", "libdl.so.2", "libm.so.6", "libpthread.so.0"]);
    const r = writeRewritten(arm, join(root, longPath, "meshcni"), loader);
    expect(r.segment.offset % 0x10000).toBe(0);
    // qemu-user is a static executable: it needs no C library in the root either
    const qemu = readFileSync(QEMU!);
    expect(parseElf((o, n) => qemu.subarray(o, o + n), qemu.length).interpreter).toBeUndefined();
    copyFileSync(QEMU!, join(root, "qemu-aarch64-static"));
    expect(filesIn(root)).toEqual(
      ["/qemu-aarch64-static", ...[...loader.files, "meshcni"].map((f) => join(longPath, f))].sort(),
    );

    // -E: the loader's log for the arm64 process alone (not for unshare, mount and chroot)
    const argv = ["/qemu-aarch64-static", "-E", "LD_DEBUG=libs", join(longPath, "meshcni")];
    const run = runChrooted(root, argv, { CNI_COMMAND: "VERSION" });
    const log = run.stderr;
    expectVersion({ ...run, stderr: log.replace(/^\s*\d+:.*$/gm, "") });
    expect(initialized(log)).toEqual(loader.files.map((f) => join(longPath, f)).sort());
    rmSync(root, { recursive: true, force: true });
  }, 60_000);
});
