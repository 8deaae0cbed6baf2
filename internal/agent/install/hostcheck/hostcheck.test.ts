// The host check on in-memory host roots: the layouts real distributions have (merged /usr with
// an absolute loader link, Debian multiarch folders, libraries only in ld.so.cache, musl), and
// each way a host can fail to run the plugin, with the message the agent shows.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { makeElf, makeLdCache, memoryRoot } from "../../../../test/support/elf-builder.ts";
import { checkHostCanRun, HOST_CHECK_PATHS, type HostVerdict, limitView, resolveInRoot } from "./check.ts";
import { parseElf } from "./elf.ts";
import { parseLdCache } from "./ldcache.ts";

const X86 = 62;
const ARM = 183;
const GLIBC_X86 = "/lib64/ld-linux-x86-64.so.2";
const GLIBC_ARM = "/lib/ld-linux-aarch64.so.1";
const MUSL_X86 = "/lib/ld-musl-x86_64.so.1";
const BUN_NEEDED = ["libc.so.6", "ld-linux-x86-64.so.2", "libpthread.so.0", "libdl.so.2", "libm.so.6"];
const plugin = (spec: Parameters<typeof makeElf>[0]) => makeElf(spec);
const lib = (machine = X86, needed: string[] = []) => makeElf({ machine, needed });

function check(tree: Parameters<typeof memoryRoot>[0], bin: Uint8Array): HostVerdict {
  return checkHostCanRun(
    memoryRoot(tree),
    (o, n) => bin.subarray(o, o + n),
    bin.length,
    "/opt/meshcni/meshcni",
    "/host/root",
  );
}

/** As a node's agent checks: only the host paths the DaemonSet mounts. */
function checkMounted(tree: Parameters<typeof memoryRoot>[0], bin: Uint8Array): HostVerdict {
  return checkHostCanRun(
    limitView(memoryRoot(tree)),
    (o, n) => bin.subarray(o, o + n),
    bin.length,
    "/opt/meshcni/meshcni",
    "/host/root",
  );
}
const SEES = "outside what the agent sees of the host (/usr, /lib, /lib64, /etc/ld.so.cache through /host/root)";

/** Debian 12: /lib64 and /lib are links into /usr, the loader link is absolute. */
const debian = (machine = X86) => ({
  "/lib": { link: "usr/lib" },
  "/lib64": { link: "usr/lib64" },
  "/usr/lib64/ld-linux-x86-64.so.2": { link: "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" },
  "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": lib(machine),
  "/usr/lib/x86_64-linux-gnu/libc.so.6": lib(machine, ["ld-linux-x86-64.so.2"]),
  "/usr/lib/x86_64-linux-gnu/libpthread.so.0": lib(machine, ["libc.so.6"]),
  "/usr/lib/x86_64-linux-gnu/libdl.so.2": lib(machine, ["libc.so.6"]),
  "/usr/lib/x86_64-linux-gnu/libm.so.6": lib(machine, ["libc.so.6"]),
});

describe("ELF reading", () => {
  test("interpreter, needed libraries and run path, 64- and 32-bit", () => {
    for (const bits of [64, 32] as const) {
      const bin = makeElf({
        bits,
        machine: ARM,
        interpreter: GLIBC_ARM,
        needed: ["libc.so.6", "libm.so.6"],
        runpath: "/opt/x:/opt/y",
      });
      expect(parseElf((o, n) => bin.subarray(o, o + n), bin.length)).toEqual({
        bits,
        littleEndian: true,
        machine: ARM,
        interpreter: GLIBC_ARM,
        needed: ["libc.so.6", "libm.so.6"],
        runpath: ["/opt/x", "/opt/y"],
      });
    }
  });

  test("matches readelf on this machine's own binaries", () => {
    const file = "/bin/ls";
    const bytes = readFileSync(file);
    const info = parseElf((o, n) => bytes.subarray(o, o + n), bytes.length);
    const readelf = Bun.spawnSync(["readelf", "-d", "-l", file], { stdout: "pipe" }).stdout.toString();
    expect(info.interpreter).toBe(/program interpreter: ([^\]]+)\]/.exec(readelf)?.[1]);
    expect(info.needed).toEqual([...readelf.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]!));
  });

  test("truncated or foreign files are refused with a reason, never read past their end", () => {
    const bin = makeElf({ interpreter: GLIBC_X86, needed: ["libc.so.6"] });
    const cut = bin.subarray(0, 100);
    expect(() => parseElf((o, n) => cut.subarray(o, o + n), cut.length)).toThrow(/truncated/);
    const text = new TextEncoder().encode("#!/bin/sh\necho hi\n");
    expect(() => parseElf((o, n) => text.subarray(o, o + n), text.length)).toThrow("not an ELF file");
  });

  test("ld.so.cache entries, also after an old-format part", () => {
    const cache = makeLdCache([
      { name: "libc.so.6", path: "/opt/glibc/lib/libc.so.6" },
      { name: "libm.so.6", path: "/opt/glibc/lib/libm.so.6" },
    ]);
    expect(parseLdCache(cache)).toEqual([
      { name: "libc.so.6", path: "/opt/glibc/lib/libc.so.6" },
      { name: "libm.so.6", path: "/opt/glibc/lib/libm.so.6" },
    ]);
    expect(parseLdCache(new TextEncoder().encode("garbage"))).toEqual([]);
    expect(parseLdCache(readFileSync("/etc/ld.so.cache")).some((e) => e.name === "libc.so.6")).toBe(true);
  });
});

describe("resolving paths inside the host root", () => {
  const root = memoryRoot({
    "/lib": { link: "usr/lib" },
    "/usr/lib/a": { link: "../../usr/./lib/b" },
    "/usr/lib/b": "x",
    "/loop": { link: "/loop" },
    "/esc": { link: "../../../usr/lib/b" },
  });
  test("relative, absolute and upward links stay inside the root", () => {
    expect(resolveInRoot(root, "/lib/a")?.real).toBe("/usr/lib/b");
    expect(resolveInRoot(root, "/esc")?.real).toBe("/usr/lib/b");
    expect(resolveInRoot(root, "/loop")).toBeUndefined();
    expect(resolveInRoot(root, "/lib/missing")).toBeUndefined();
  });
});

describe("can the host run the plugin", () => {
  const bun = plugin({ interpreter: GLIBC_X86, needed: BUN_NEEDED });

  test("Debian 12 (merged /usr, an absolute loader link): yes, and every file it loads", () => {
    const v = check(debian(), bun);
    expect(v).toEqual({
      ok: true,
      libc: "glibc",
      machine: "x86-64",
      files: [
        { path: GLIBC_X86, real: "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" },
        { path: "/lib/x86_64-linux-gnu/libc.so.6", real: "/usr/lib/x86_64-linux-gnu/libc.so.6" },
        { path: "/lib/x86_64-linux-gnu/libpthread.so.0", real: "/usr/lib/x86_64-linux-gnu/libpthread.so.0" },
        { path: "/lib/x86_64-linux-gnu/libdl.so.2", real: "/usr/lib/x86_64-linux-gnu/libdl.so.2" },
        { path: "/lib/x86_64-linux-gnu/libm.so.6", real: "/usr/lib/x86_64-linux-gnu/libm.so.6" },
      ],
    });
  });

  test("Fedora-like (/usr/lib64) and libraries found only through ld.so.cache", () => {
    const fedora = {
      "/lib64": { link: "usr/lib64" },
      "/usr/lib64/ld-linux-x86-64.so.2": lib(),
      ...Object.fromEntries(BUN_NEEDED.slice(2).map((n) => [`/usr/lib64/${n}`, lib()])),
      "/opt/glibc/libc.so.6": lib(),
      "/etc/ld.so.cache": makeLdCache([{ name: "libc.so.6", path: "/opt/glibc/libc.so.6" }]),
    };
    const v = check(fedora, bun);
    expect(v.ok).toBe(true);
    expect(v.ok && v.files.map((f) => f.path)).toContain("/opt/glibc/libc.so.6");
  });

  test("no glibc loader (Alpine, NixOS, Talos): not ready, naming the loader", () => {
    const v = check({ [MUSL_X86]: lib(), "/usr/lib/libstdc++.so.6": lib() }, bun);
    expect(v).toEqual({
      ok: false,
      libc: "glibc",
      machine: "x86-64",
      problems: [
        `the host has no ${GLIBC_X86} (glibc's loader for x86-64), which /opt/meshcni/meshcni needs to start: ` +
          `every ADD would fail with "no such file or directory" (looked through /host/root)`,
      ],
    });
  });

  test("an arm64 plugin on an amd64 host: the loader path is missing there", () => {
    const v = check(debian(), plugin({ machine: ARM, interpreter: GLIBC_ARM, needed: ["libc.so.6"] }));
    expect(v.ok).toBe(false);
    expect(v.ok === false && v.problems[0]).toContain(`the host has no ${GLIBC_ARM} (glibc's loader for aarch64)`);
  });

  test("a loader of the wrong machine, or not ELF at all, is named", () => {
    const tree = { ...debian(), "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": lib(ARM) };
    const v = check(tree, bun);
    expect(v.ok === false && v.problems).toEqual([
      `the host's ${GLIBC_X86} is for aarch64 (64-bit), not x86-64 (64-bit): ` +
        `/opt/meshcni/meshcni needs glibc's loader for x86-64 (looked through /host/root)`,
    ]);
    const text = check({ ...debian(), "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2": "#!/bin/sh\n" }, bun);
    expect(text.ok === false && text.problems[0]).toContain("is not an ELF file");
  });

  test("a missing library, directly or through another one, each named with where it was looked for", () => {
    const tree: Record<string, ReturnType<typeof lib> | { link: string }> = { ...debian() };
    delete tree["/usr/lib/x86_64-linux-gnu/libm.so.6"];
    tree["/usr/lib/x86_64-linux-gnu/libdl.so.2"] = lib(X86, ["libgone.so.1"]);
    const v = check(tree, bun);
    expect(v.ok === false && v.problems).toEqual([
      "the host has no libm.so.6 for x86-64, which /opt/meshcni/meshcni loads (looked in ld.so.cache, " +
        "/lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib64, /usr/lib64, /lib, /usr/lib through /host/root)",
      "the host has no libgone.so.1 for x86-64, which libdl.so.2 (needed by " +
        "/opt/meshcni/meshcni) loads (looked in ld.so.cache, /lib/x86_64-linux-gnu, " +
        "/usr/lib/x86_64-linux-gnu, /lib64, /usr/lib64, /lib, /usr/lib through /host/root)",
    ]);
  });

  test("a library of another machine is passed over, as the loader does", () => {
    const tree = { ...debian(), "/usr/lib/x86_64-linux-gnu/libm.so.6": lib(ARM), "/usr/lib64/libm.so.6": lib() };
    const v = check(tree, bun);
    expect(v.ok && v.files.find((f) => f.path.endsWith("libm.so.6"))).toEqual({
      path: "/lib64/libm.so.6",
      real: "/usr/lib64/libm.so.6",
    });
    const only = check({ ...debian(), "/usr/lib/x86_64-linux-gnu/libm.so.6": lib(ARM) }, bun);
    expect(only.ok === false && only.problems[0]).toContain(
      "passed over /lib/x86_64-linux-gnu/libm.so.6 is for aarch64 (64-bit), not x86-64 (64-bit)",
    );
  });

  describe("the musl build", () => {
    const muslBin = plugin({ interpreter: MUSL_X86, needed: ["libstdc++.so.6", "libc.musl-x86_64.so.1"] });
    const alpine = {
      [MUSL_X86]: lib(),
      "/lib/libc.musl-x86_64.so.1": { link: "ld-musl-x86_64.so.1" },
      "/usr/lib/libstdc++.so.6": lib(X86, ["libgcc_s.so.1", "libc.musl-x86_64.so.1"]),
      "/usr/lib/libgcc_s.so.1": lib(X86, ["libc.musl-x86_64.so.1"]),
    };

    test("runs on Alpine with libstdc++ (musl answers for its own libc)", () => {
      const v = check(alpine, muslBin);
      expect(v.ok && v.files.map((f) => f.path)).toEqual([
        MUSL_X86,
        "/usr/lib/libstdc++.so.6",
        "/usr/lib/libgcc_s.so.1",
      ]);
    });

    test("not without libstdc++, and glibc's libstdc++ in Debian's folders does not count", () => {
      const debianMusl = {
        ...debian(),
        "/usr/lib/x86_64-linux-musl/libc.so": lib(),
        "/usr/lib/ld-musl-x86_64.so.1": { link: "x86_64-linux-musl/libc.so" },
        "/usr/lib/x86_64-linux-gnu/libstdc++.so.6": lib(),
        "/etc/ld-musl-x86_64.path": "/lib/x86_64-linux-musl\n/usr/lib/x86_64-linux-musl\n",
      };
      const v = check(debianMusl, muslBin);
      expect(v.ok === false && v.problems).toEqual([
        "the host has no libstdc++.so.6 for x86-64, which /opt/meshcni/meshcni loads " +
          "(looked in /lib/x86_64-linux-musl, /usr/lib/x86_64-linux-musl through /host/root)",
      ]);
    });

    test("the glibc build does not run on Alpine, the musl build does not run on Debian", () => {
      expect(check(alpine, bun).ok).toBe(false);
      expect(check(debian(), muslBin)).toMatchObject({
        ok: false,
        libc: "musl",
        problems: [expect.stringContaining(`no ${MUSL_X86} (musl's loader for x86-64)`)],
      });
    });
  });

  test("a static executable needs nothing from the host", () => {
    expect(check({}, plugin({ needed: [] }))).toEqual({ ok: true, libc: "static", machine: "x86-64", files: [] });
  });
});

describe("only the mounted host paths (/usr, /lib, /lib64, /etc/ld.so.cache)", () => {
  const bun = plugin({ interpreter: GLIBC_X86, needed: BUN_NEEDED });

  test("the view shows those paths and the folders leading to them, nothing else", () => {
    expect(HOST_CHECK_PATHS).toEqual(["/usr", "/lib", "/lib64", "/etc/ld.so.cache"]);
    const view = limitView(memoryRoot({ ...debian(), "/etc/shadow": "root:x", "/etc/ld.so.cache": "", "/var/x": "y" }));
    expect(view.entry("/etc")).toEqual({ kind: "dir", size: 0 });
    expect(view.entry("/etc/ld.so.cache")?.kind).toBe("file");
    for (const p of ["/etc/shadow", "/var", "/var/x", "/proc", "/dev/shm", "/usrx"])
      expect(view.entry(p)).toEqual({ kind: "unseen", size: 0 });
    expect(view.readFile("/etc/shadow")).toBeUndefined();
    expect(() => view.reader("/etc/shadow")).toThrow("outside the host paths");
    // A link that leads out is followed no further.
    const out = limitView(memoryRoot({ "/lib64": { link: "../etc/x/lib64" }, "/usr/lib/a": { link: "/opt/b" } }));
    expect(resolveInRoot(out, "/lib64/ld.so")).toEqual({ real: "/etc/x/lib64/ld.so", kind: "unseen", size: 0 });
    expect(resolveInRoot(out, "/usr/lib/a")).toEqual({ real: "/opt/b", kind: "unseen", size: 0 });
  });

  test("Debian 12 through the mounts: the same answer as through the whole root", () => {
    expect(checkMounted(debian(), bun)).toEqual(check(debian(), bun));
  });

  test("without ld.so.cache (absent, or the empty file kubelet makes), glibc's default folders", () => {
    expect(checkMounted(debian(), bun).ok).toBe(true);
    expect(checkMounted({ ...debian(), "/etc/ld.so.cache": "" }, bun).ok).toBe(true);
  });

  test("a loader link that leads outside them (NixOS' nix-ld): skipped, saying where it leads", () => {
    const nix = { "/lib64/ld-linux-x86-64.so.2": { link: "/nix/store/abc-nix-ld/lib/ld.so" } };
    expect(checkMounted(nix, bun)).toEqual({
      ok: null,
      libc: "glibc",
      machine: "x86-64",
      skipped: [
        `/opt/meshcni/meshcni starts with ${GLIBC_X86} (glibc's loader for x86-64), ` +
          `which leads to /nix/store/abc-nix-ld/lib/ld.so, ${SEES}`,
      ],
    });
  });

  test("a library the cache places outside them, and in none of the loader's folders: skipped", () => {
    const tree = {
      ...debian(),
      "/etc/ld.so.cache": makeLdCache([{ name: "libm.so.6", path: "/opt/glibc/libm.so.6" }]),
      "/opt/glibc/libm.so.6": lib(),
    };
    delete (tree as Record<string, unknown>)["/usr/lib/x86_64-linux-gnu/libm.so.6"];
    const v = checkMounted(tree, bun);
    expect(v.ok).toBeNull();
    expect(v.ok === null && v.skipped).toEqual([
      `libm.so.6, which /opt/meshcni/meshcni loads, is not in ld.so.cache, /lib/x86_64-linux-gnu, ` +
        `/usr/lib/x86_64-linux-gnu, /lib64, /usr/lib64, /lib, /usr/lib as the agent sees them; ` +
        `the loader may also find it through /opt/glibc/libm.so.6, ${SEES}`,
    ]);
    // The whole root shows it: it runs.
    expect(check(tree, bun).ok).toBe(true);
    // Also found in a folder the check sees: it runs.
    expect(checkMounted({ ...tree, "/usr/lib64/libm.so.6": lib() }, bun).ok).toBe(true);
  });

  test("a library missing from every place the loader looks, all of them seen: cannot run, as before", () => {
    const tree: Record<string, ReturnType<typeof lib> | { link: string }> = { ...debian() };
    delete tree["/usr/lib/x86_64-linux-gnu/libm.so.6"];
    const v = checkMounted(tree, bun);
    expect(v.ok === false && v.problems).toEqual([
      "the host has no libm.so.6 for x86-64, which /opt/meshcni/meshcni loads (looked in ld.so.cache, " +
        "/lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib64, /usr/lib64, /lib, /usr/lib through /host/root)",
    ]);
  });

  test("a missing library outweighs one that cannot be seen: cannot run", () => {
    const tree = {
      ...debian(),
      "/etc/ld.so.cache": makeLdCache([{ name: "libm.so.6", path: "/opt/glibc/libm.so.6" }]),
    };
    delete (tree as Record<string, unknown>)["/usr/lib/x86_64-linux-gnu/libm.so.6"];
    delete (tree as Record<string, unknown>)["/usr/lib/x86_64-linux-gnu/libdl.so.2"];
    expect(checkMounted(tree, bun).ok).toBe(false);
  });

  describe("musl, whose path file (/etc/ld-musl-ARCH.path) is not mounted", () => {
    const muslBin = plugin({ interpreter: MUSL_X86, needed: ["libstdc++.so.6", "libc.musl-x86_64.so.1"] });
    const alpine = {
      [MUSL_X86]: lib(),
      "/lib/libc.musl-x86_64.so.1": { link: "ld-musl-x86_64.so.1" },
      "/usr/lib/libstdc++.so.6": lib(X86, ["libgcc_s.so.1", "libc.musl-x86_64.so.1"]),
      "/usr/lib/libgcc_s.so.1": lib(X86, ["libc.musl-x86_64.so.1"]),
    };
    test("runs on Alpine with libstdc++ in musl's default folders", () => {
      expect(checkMounted(alpine, muslBin).ok).toBe(true);
    });
    test("without libstdc++ there: cannot run, saying that musl's defaults were taken", () => {
      const { "/usr/lib/libstdc++.so.6": _, ...bare } = alpine;
      const v = checkMounted(
        { ...bare, "/etc/ld-musl-x86_64.path": "/opt/lib\n", "/opt/lib/libstdc++.so.6": lib() },
        muslBin,
      );
      expect(v.ok === false && v.problems).toEqual([
        `the host has no libstdc++.so.6 for x86-64, which /opt/meshcni/meshcni loads ` +
          `(looked in /lib, /usr/local/lib, /usr/lib through /host/root; /etc/ld-musl-x86_64.path, ` +
          `which can name other folders, is ${SEES}: these are musl's defaults)`,
      ]);
    });
  });
});
