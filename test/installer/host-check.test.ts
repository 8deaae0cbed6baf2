// The compiled installer checks that the host can run the plugin before it installs and chains
// it: against this machine's own root (it can), a host root without glibc's loader (it cannot:
// not ready, nothing installed or chained, the reason in /readyz and the log), and the same host
// with a musl build among the candidates (that one is installed).
import { afterEach, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { makeElf } from "../support/elf-builder.ts";
import { repoPath } from "../support/golden.ts";
import { ensureBuilt, freePort, HostDirs, type InstallerProcess, isChainedIn, PLUGIN, readyz, startInstaller, until } from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");
const MUSL_LOADER = "/lib/ld-musl-x86_64.so.1";

let dirs: HostDirs;
let running: InstallerProcess[] = [];
beforeAll(() => ensureBuilt(), 60_000);
afterEach(async () => {
  for (const p of running) await p.stop("SIGKILL");
  running = [];
  dirs?.cleanup();
});

/** An Alpine-like host root: musl's loader and libstdc++, no glibc. */
function alpineRoot(): string {
  const root = join(dirs.root, "alpine");
  const put = (path: string, bytes: Uint8Array) => {
    mkdirSync(dirname(join(root, path)), { recursive: true });
    writeFileSync(join(root, path), bytes);
  };
  put(MUSL_LOADER, makeElf({}));
  symlinkSync("ld-musl-x86_64.so.1", join(root, "lib/libc.musl-x86_64.so.1"));
  put("/usr/lib/libstdc++.so.6", makeElf({ needed: ["libgcc_s.so.1", "libc.musl-x86_64.so.1"] }));
  put("/usr/lib/libgcc_s.so.1", makeElf({ needed: ["libc.musl-x86_64.so.1"] }));
  return root;
}

/** Polls /readyz until it answers `status` (harness.until does not await an async condition). */
async function readyzUntil(port: number, status: number): Promise<{ status: number; body: string }> {
  const deadline = performance.now() + 10_000;
  for (;;) {
    const r = await readyz(port).catch(() => undefined);
    if (r?.status === status) return r;
    if (performance.now() > deadline) throw new Error(`/readyz never answered ${status} (last: ${r?.status} ${r?.body})`);
    await Bun.sleep(20);
  }
}

function start(extra: string[]): InstallerProcess {
  const p = startInstaller(dirs, extra);
  running.push(p);
  return p;
}

describe.skipIf(process.arch !== "x64")("the installer's host check", () => {
  test("this machine's own root can run dist/meshcni: installed and chained", async () => {
    dirs = new HostDirs();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const port = freePort();
    const p = start(["--host-root", "/", "--health-port", String(port)]);
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 10_000, "the chain");
    await readyzUntil(port, 200);
    await p.waitForLog(/this host can run \S+\/meshcni \(x86-64, glibc, loader \/lib64\/ld-linux-x86-64\.so\.2\)/);
  });

  test("a host without glibc's loader: not ready, saying why, and nothing installed or chained", async () => {
    dirs = new HostDirs();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const root = alpineRoot();
    const port = freePort();
    const p = start(["--host-root", root, "--health-port", String(port)]);
    const why = `the host has no /lib64/ld-linux-x86-64.so.2 (glibc's loader for x86-64), which ${PLUGIN} needs to start`;
    await p.waitForLog(new RegExp(why.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")));
    const r = await readyzUntil(port, 503);
    expect(r.body).toContain(`this host cannot run the plugin, so meshcni is not installed here: ${PLUGIN}: ${why}`);
    expect(p.log()).toContain("A host without glibc needs meshcni's musl build");
    // Nothing chained, no binary copied: the host's pods keep starting without meshcni.
    await Bun.sleep(300);
    expect(readFileSync(join(dirs.net, "10-calico.conflist"), "utf8")).toBe(CALICO);
    expect(readdirSync(dirs.bin)).toEqual([]);
    // The message is logged once, not at every look.
    expect(p.log().split(why).length - 1).toBe(1);
  });

  test("with a musl build among the candidates, that one is installed on the musl host", async () => {
    dirs = new HostDirs();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const root = alpineRoot();
    const musl = join(dirs.root, "meshcni-musl");
    writeFileSync(musl, makeElf({ interpreter: MUSL_LOADER, needed: ["libstdc++.so.6", "libc.musl-x86_64.so.1"] }), { mode: 0o755 });
    const port = freePort();
    const p = start(["--host-root", root, "--plugin-binary", `${PLUGIN},${musl}`, "--health-port", String(port)]);
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 10_000, "the chain");
    expect(Buffer.compare(readFileSync(join(dirs.bin, "meshcni")), readFileSync(musl))).toBe(0);
    await readyzUntil(port, 200);
    await p.waitForLog(/this host can run \S+meshcni-musl \(x86-64, musl, loader \/lib\/ld-musl-x86_64\.so\.1\) \(not \S+\/meshcni: the host has no \/lib64\/ld-linux-x86-64\.so\.2/);
  });
});
