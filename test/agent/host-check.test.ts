// The compiled installer checks that the host can run the plugin before it installs and chains
// it: against this machine's own root (it can), a host root without glibc's loader (it cannot:
// not ready, nothing installed or chained, the reason in /readyz and the log), and the same host
// with a musl build among the candidates (that one is installed). It looks only at the host
// paths the DaemonSet mounts: a loader link that leads elsewhere makes it skip the check (the
// plugin installed unchecked, the log and /status saying why); and this machine's paths
// bind-mounted as the DaemonSet mounts them (/lib64 and /lib then show folders, not the links
// the host has) give the same answer, file for file, as its whole root. A stand-in cluster
// issues the plugin's token, the kubeconfig's part of readiness.
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { HOST_CHECK_PATHS } from "../../internal/agent/install/hostcheck/check.ts";
import { checkBinaryOnHost } from "../../internal/agent/install/io/host-root.ts";
import { makeElf } from "../support/elf-builder.ts";
import { isRoot } from "../support/netns.ts";
import { repoPath } from "../support/golden.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  type InstallerProcess,
  isChainedIn,
  PLUGIN,
  readyz,
  startCluster,
  startInstaller,
  until,
} from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");
const MUSL_LOADER = "/lib/ld-musl-x86_64.so.1";

let dirs: HostDirs;
let running: InstallerProcess[] = [];
let cluster: Cluster;
beforeAll(async () => {
  ensureBuilt();
  cluster = await startCluster();
}, 60_000);
afterAll(() => cluster?.close());
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
    if (performance.now() > deadline)
      throw new Error(`/readyz never answered ${status} (last: ${r?.status} ${r?.body})`);
    await Bun.sleep(20);
  }
}

function start(extra: string[]): InstallerProcess {
  const p = startInstaller(dirs, extra, cluster.env);
  running.push(p);
  return p;
}

describe.skipIf(process.arch !== "x64")("the agent's host check", () => {
  test("this machine's own root can run dist/meshcni: installed and chained", async () => {
    dirs = cluster.dirs();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const port = freePort();
    const p = start(["--host-root", "/", "--health-port", String(port)]);
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 10_000, "the chain");
    await readyzUntil(port, 200);
    await p.waitForLog(/this host can run \S+\/meshcni \(x86-64, glibc, loader \/lib64\/ld-linux-x86-64\.so\.2\)/);
    const status = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as {
      binary: Record<string, unknown>;
    };
    expect(status.binary.hostCheck).toBe(
      `this host can run ${PLUGIN} (x86-64, glibc, loader /lib64/ld-linux-x86-64.so.2)`,
    );
  });

  test("a loader link that leads outside the mounted host paths: the check is skipped, saying so, and the plugin installed", async () => {
    dirs = cluster.dirs();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const root = join(dirs.root, "nixos");
    mkdirSync(join(root, "lib64"), { recursive: true });
    symlinkSync("/nix/store/abc-nix-ld/lib/ld.so", join(root, "lib64/ld-linux-x86-64.so.2"));
    const port = freePort();
    const p = start(["--host-root", root, "--health-port", String(port)]);
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 10_000, "the chain");
    const why =
      `host check skipped: ${PLUGIN} starts with /lib64/ld-linux-x86-64.so.2 ` +
      `(glibc's loader for x86-64), which leads to /nix/store/abc-nix-ld/lib/ld.so, ` +
      `outside what the agent sees of the host (/usr, /lib, /lib64, /etc/ld.so.cache through ${root})`;
    await p.waitForLog(
      new RegExp(
        `${why.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}; installing ${PLUGIN.replace(/[./]/g, "\\$&")} unchecked`,
      ),
    );
    await readyzUntil(port, 200);
    const status = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as {
      binary: Record<string, unknown>;
    };
    expect(status.binary).toEqual({ path: join(dirs.bin, "meshcni"), current: true, hostCheck: why });
  });

  test("a host without glibc's loader: not ready, saying why, and nothing installed or chained", async () => {
    dirs = cluster.dirs();
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
    dirs = cluster.dirs();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const root = alpineRoot();
    const musl = join(dirs.root, "meshcni-musl");
    writeFileSync(musl, makeElf({ interpreter: MUSL_LOADER, needed: ["libstdc++.so.6", "libc.musl-x86_64.so.1"] }), {
      mode: 0o755,
    });
    const port = freePort();
    const p = start(["--host-root", root, "--plugin-binary", `${PLUGIN},${musl}`, "--health-port", String(port)]);
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 10_000, "the chain");
    expect(Buffer.compare(readFileSync(join(dirs.bin, "meshcni")), readFileSync(musl))).toBe(0);
    await readyzUntil(port, 200);
    await p.waitForLog(
      /this host can run \S+meshcni-musl \(x86-64, musl, loader \/lib\/ld-musl-x86_64\.so\.1\) \(not \S+\/meshcni: the host has no \/lib64\/ld-linux-x86-64\.so\.2/,
    );
  });
});

describe.skipIf(process.arch !== "x64" || !isRoot())(
  "this machine's paths mounted as the DaemonSet mounts them",
  () => {
    test("the same loader and libraries, at the same real paths, as through the whole root", () => {
      const root = mkdtempSync(join(tmpdir(), "meshcni-host-root-"));
      const mounted: string[] = [];
      try {
        for (const p of HOST_CHECK_PATHS) {
          const at = join(root, p);
          if (p.endsWith(".cache")) {
            mkdirSync(dirname(at), { recursive: true });
            writeFileSync(at, "");
          } else mkdirSync(at, { recursive: true });
          const r = Bun.spawnSync(["mount", "--bind", "-o", "ro", p, at], { stderr: "pipe" });
          if (r.exitCode !== 0) throw new Error(`mount --bind ${p}: ${r.stderr}`);
          mounted.push(at);
        }
        const whole = checkBinaryOnHost("/", PLUGIN, "meshcni", ["/"]);
        const viaMounts = checkBinaryOnHost(root, PLUGIN, "meshcni");
        expect(whole.ok).toBe(true);
        expect(viaMounts).toEqual(whole);
      } finally {
        for (const at of mounted.reverse()) Bun.spawnSync(["umount", at]);
        rmSync(root, { recursive: true, force: true });
      }
    });
  },
);
