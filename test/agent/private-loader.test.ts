// The agent installs a plugin that brings its own loader and C library (internal/agent/install/
// installer.ts with private-loader.ts), on real folders, without a process: a small real
// program (a copy of this machine's /usr/bin/true, glibc, PIE) stands for the node binary.
// - the bin folder gets the binary and meshcni.d/<id>/ with the loader and exactly the
//   libraries it loads, the binary naming them where the host sees the folder (--dest-bin-dir),
//   for each platform preset's folder, a path of 3,000 bytes and one a run path cannot hold
//   (a ':'); the installed program runs, loading nothing of this host's C library;
// - reinstalled with other libraries (an upgrade), the new folder is written before the binary,
//   the old one stays a few seconds (a starting plugin may be loading from it), then goes;
// - what a kill -9 can leave (a half-written folder, a temp binary) goes at start; a changed
//   library is seen by check() and put back by reconcile;
// - undo leaves the bin folder as it was before, byte for byte (others' plugins untouched), and
//   leaves a file in meshcni.d that meshcni did not write.
import { afterEach, describe, expect, test } from "bun:test";
import { appendFileSync, copyFileSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";
import { entryFromConfigText } from "../../internal/agent/install/entry.ts";
import { Installer } from "../../internal/agent/install/installer.ts";
import { createHostFs } from "../../internal/agent/install/io/fs.ts";
import { checkBinaryOnHost, readHostLibc } from "../../internal/agent/install/io/host-root.ts";
import { PLATFORMS } from "../../internal/cli/manifests/values.ts";
import { repoPath } from "../support/golden.ts";
import { HostDirs } from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");
const GLIBC_FILES = ["ld-linux-x86-64.so.2", "libc.so.6"];
const hasStrace = Bun.which("strace") !== null;

let dirs: HostDirs | undefined;
afterEach(() => {
  dirs?.cleanup();
  dirs = undefined;
});
const d = () => dirs!;

/** Every file and folder under `dir` with its bytes (links as their target), for byte-for-byte comparison. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const path = join(e.parentPath, e.name);
    const rel = relative(dir, path);
    const st = statSync(path);
    out[rel] = e.isDirectory()
      ? `dir ${(st.mode & 0o7777).toString(8)}`
      : `${(st.mode & 0o7777).toString(8)} ${new Bun.CryptoHasher("sha256").update(readFileSync(path)).digest("hex")}`;
  }
  return out;
}

function readelf(file: string): { interpreter: string; rpath?: string } {
  const out = Bun.spawnSync(["readelf", "-l", "-d", "-W", file], { stdout: "pipe" }).stdout.toString();
  const rpath = /Library rpath: \[([^\]]*)\]/.exec(out)?.[1];
  return { interpreter: /program interpreter: ([^\]]+)\]/.exec(out)![1]!, ...(rpath ? { rpath } : {}) };
}

interface MakeOptions {
  /** The bin folder here (default dirs.bin) and as the host sees it (default: the same). */
  bin?: string;
  dest?: string;
  libraryRoot?: string;
  clock?: () => number;
  plugin?: string;
  /** null: the host is not looked at. */
  hostRoot?: string | null;
}

function make(opts: MakeOptions = {}) {
  dirs ??= new HostDirs();
  const plugin = opts.plugin ?? join(dirs.root, "meshcni-build");
  if (!opts.plugin) copyFileSync("/usr/bin/true", plugin);
  const lines: string[] = [];
  const log = {
    debug: () => {},
    info: (m: string) => lines.push(`info ${m}`),
    warn: (m: string) => lines.push(`warn ${m}`),
    error: (m: string) => lines.push(`error ${m}`),
  };
  const inst = new Installer(
    {
      hostNetDir: dirs.net,
      hostBinDir: opts.bin ?? dirs.bin,
      ...(opts.dest ? { destBinDir: opts.dest } : {}),
      pluginBinary: plugin,
      ...(opts.hostRoot === null ? {} : { hostRoot: opts.hostRoot ?? "/" }),
      ...(opts.libraryRoot ? { libraryRoot: opts.libraryRoot } : {}),
      serviceAccountDir: dirs.sa,
      entry: entryFromConfigText(undefined, "/etc/cni/net.d"),
    },
    {
      fs: createHostFs(),
      log,
      now: () => performance.now(),
      canRun: checkBinaryOnHost,
      hostLibc: readHostLibc,
      ...(opts.clock ? { wallClock: opts.clock } : {}),
    },
  );
  inst.prepare();
  return { inst, lines, plugin };
}

const folders = () => readdirSync(join(d().bin, "meshcni.d")).sort();

/** A copy of this machine's glibc files with a byte appended to each (loaders ignore trailing bytes): another build. */
function otherLibraryRoot(): string {
  const root = join(d().root, "other-libc");
  for (const path of [
    "/lib64/ld-linux-x86-64.so.2",
    "/lib/x86_64-linux-gnu/libc.so.6",
    "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
  ]) {
    mkdirSync(join(root, path, ".."), { recursive: true });
    copyFileSync(path, join(root, path));
    appendFileSync(join(root, path), "\0");
  }
  return root;
}

describe.skipIf(process.arch !== "x64")("the plugin with its own loader and C library", () => {
  test("installs the binary and meshcni.d/<id> with the loader and the libraries it loads; it runs, loading none of the host's", () => {
    const { inst, lines } = make();
    expect(inst.installBinary()).toBe(true);
    const [id, ...more] = folders();
    expect(more).toEqual([]);
    expect(id).toMatch(/^[0-9a-f]{16}$/);
    const folder = join(d().bin, "meshcni.d", id!);
    expect(readdirSync(folder).sort()).toEqual(GLIBC_FILES);
    for (const f of GLIBC_FILES)
      expect(readFileSync(join(folder, f))).toEqual(readFileSync(`/lib/x86_64-linux-gnu/${f}`));
    // The interpreter is executable (the kernel opens it as a program); the libraries need not be.
    expect(statSync(join(folder, "ld-linux-x86-64.so.2")).mode & 0o777).toBe(0o755);
    expect(statSync(join(folder, "libc.so.6")).mode & 0o777).toBe(0o644);
    expect(readelf(join(d().bin, "meshcni"))).toEqual({
      interpreter: `${folder}/ld-linux-x86-64.so.2`,
      rpath: folder,
    });
    expect(Bun.spawnSync([join(d().bin, "meshcni")]).exitCode).toBe(0);
    expect(inst.check().problems).not.toContainEqual(expect.stringContaining(d().bin));
    expect(lines).toContainEqual(
      "info the host's C library: glibc (/lib64/ld-linux-x86-64.so.2). The plugin loads none of it: " +
        `its own loader and C library are in ${folder}`,
    );
    // The same again writes nothing.
    const before = snapshot(d().bin);
    const ino = statSync(join(d().bin, "meshcni")).ino;
    expect(inst.installBinary()).toBe(true);
    expect(snapshot(d().bin)).toEqual(before);
    expect(statSync(join(d().bin, "meshcni")).ino).toBe(ino);
  });

  test.skipIf(!hasStrace)(
    "the installed program opens no library of this host's, even with LD_LIBRARY_PATH set",
    () => {
      const { inst } = make();
      inst.installBinary();
      const r = Bun.spawnSync(["strace", "-f", "-e", "trace=openat,open", join(d().bin, "meshcni")], {
        env: { PATH: Bun.env.PATH!, LD_LIBRARY_PATH: "/lib/x86_64-linux-gnu" },
        stderr: "pipe",
      });
      expect(r.exitCode).toBe(0);
      const opened = [...r.stderr.toString().matchAll(/open(?:at)?\([^"]*"([^"]+)"[^=]*= (\d+)/g)].map((m) => m[1]!);
      const libraries = opened.filter((p) => /\.so(\.|$)/.test(p) || p.endsWith("ld.so.cache"));
      expect(libraries.length).toBeGreaterThan(0);
      for (const p of libraries) expect(p.startsWith(join(d().bin, "meshcni.d/"))).toBe(true);
    },
  );

  for (const [name, dest] of [
    ...Object.entries(PLATFORMS).map(([p, d]) => [p, d.cniBinDir] as const),
    ["default", "/opt/cni/bin"] as const,
    ["3,000 bytes", `/${"a".repeat(250)}/${"b".repeat(250)}/${"c/".repeat(1200)}bin`] as const,
  ]) {
    test(`names its loader where the host sees the bin folder: ${name}`, () => {
      const { inst } = make({ dest });
      inst.installBinary();
      const [id] = folders();
      expect(readelf(join(d().bin, "meshcni"))).toEqual({
        interpreter: `${dest}/meshcni.d/${id}/ld-linux-x86-64.so.2`,
        rpath: `${dest}/meshcni.d/${id}`,
      });
    });
  }

  test("a bin folder whose name a run path cannot hold (a ':'): the run path is $ORIGIN's, and it runs", () => {
    dirs = new HostDirs();
    const odd = join(d().root, "cni:bin");
    mkdirSync(odd);
    const { inst } = make({ bin: odd });
    inst.installBinary();
    const [id] = readdirSync(join(odd, "meshcni.d"));
    expect(readelf(join(odd, "meshcni"))).toEqual({
      interpreter: `${odd}/meshcni.d/${id}/ld-linux-x86-64.so.2`,
      rpath: `$ORIGIN/meshcni.d/${id}`,
    });
    expect(Bun.spawnSync([join(odd, "meshcni")]).exitCode).toBe(0);
  });

  test("reinstalled with other libraries: the new folder, then the binary; the old folder goes after the grace; undo leaves the bin folder as it was", () => {
    dirs = new HostDirs();
    // Others' plugins in the bin folder, which must come out untouched.
    writeFileSync(join(d().bin, "bridge"), "#!/bin/sh\n", { mode: 0o755 });
    mkdirSync(join(d().bin, "other.d"));
    writeFileSync(join(d().bin, "other.d", "x"), "x");
    const pristine = snapshot(d().bin);
    let now = Date.now();
    const clock = () => now;
    const first = make({ clock });
    first.inst.installBinary();
    const [oldId] = folders();

    const second = make({ clock, libraryRoot: otherLibraryRoot(), plugin: first.plugin });
    now = Date.now();
    second.inst.installBinary();
    const newId = folders().find((f) => f !== oldId)!;
    expect(folders()).toEqual([oldId!, newId].sort());
    expect(readelf(join(d().bin, "meshcni")).rpath).toBe(join(d().bin, "meshcni.d", newId));
    expect(Bun.spawnSync([join(d().bin, "meshcni")]).exitCode).toBe(0);
    // The folder was written before the binary.
    const written = second.lines.filter((l) => l.startsWith("info installed"));
    expect(written[0]).toContain(`wrote ${join(d().bin, "meshcni.d", newId)}`);
    expect(written[1]).toContain(`wrote ${join(d().bin, "meshcni")}`);
    expect(second.lines.join("\n")).toContain("may still be loading from it");
    // Seconds later the old folder goes.
    now += 11_000;
    second.inst.installBinary();
    expect(folders()).toEqual([newId]);
    expect(second.lines).toContain(
      `info removed ${join(d().bin, "meshcni.d", oldId!)}: no plugin binary loads from it any more`,
    );

    second.inst.uninstall();
    expect(snapshot(d().bin)).toEqual(pristine);
  });

  test("what a kill -9 leaves goes at start; a changed library is seen and put back", () => {
    const { inst } = make();
    inst.installBinary();
    const [id] = folders();
    const pd = join(d().bin, "meshcni.d");
    // A folder being filled and a binary being written when the agent died.
    mkdirSync(join(pd, `.${id}.0badc0de.meshcni-tmp`));
    writeFileSync(join(pd, `.${id}.0badc0de.meshcni-tmp`, "libc.so.6"), "half");
    writeFileSync(join(d().bin, ".meshcni.deadbeef.meshcni-tmp"), "half");
    const again = make();
    expect(readdirSync(pd)).toEqual([id!]);
    expect(readdirSync(d().bin).sort()).toEqual(["meshcni", "meshcni.d"]);

    again.inst.installBinary();
    const ofBin = () => again.inst.check().problems.filter((p) => p.includes(d().bin));
    expect(ofBin()).toEqual([]);
    writeFileSync(join(pd, id!, "libc.so.6"), "not a C library");
    expect(ofBin()).toEqual([`${join(pd, id!, "libc.so.6")} is not what meshcni installed`]);
    again.inst.installBinary();
    expect(readFileSync(join(pd, id!, "libc.so.6"))).toEqual(readFileSync("/lib/x86_64-linux-gnu/libc.so.6"));
    expect(Bun.spawnSync([join(d().bin, "meshcni")]).exitCode).toBe(0);
  });

  test("chained and undone, with a file in meshcni.d that meshcni did not write: that file stays, and so does its folder", () => {
    const { inst, lines } = make();
    writeFileSync(join(d().net, "10-calico.conflist"), CALICO);
    inst.reconcile();
    writeFileSync(join(d().bin, "meshcni.d", "notes.txt"), "mine");
    inst.uninstall();
    expect(readdirSync(d().bin)).toEqual(["meshcni.d"]);
    expect(readdirSync(join(d().bin, "meshcni.d"))).toEqual(["notes.txt"]);
    expect(lines).toContainEqual(
      `warn left ${join(d().bin, "meshcni.d")}: it holds notes.txt, which meshcni did not write`,
    );
  });

  test("a script or a static binary is installed as it is, with no folder", () => {
    dirs = new HostDirs();
    const script = join(d().root, "meshcni-script");
    writeFileSync(script, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
    // Not looked at: the host check reads ELF, and would refuse a script.
    const { inst } = make({ plugin: script, hostRoot: null });
    expect(inst.installBinary()).toBe(true);
    expect(readdirSync(d().bin)).toEqual(["meshcni"]);
    expect(readFileSync(join(d().bin, "meshcni"), "utf8")).toBe("#!/bin/sh\nexit 0\n");
  });
});
