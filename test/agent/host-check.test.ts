// The compiled installer looks at the host and says what C library it has, which the plugin
// (its own loader and C library beside it) never loads: this machine's own root (glibc), a
// host root with musl and no glibc (installed, chained and ready all the same: on main nothing
// was installed there), a loader link that leads outside the paths the DaemonSet mounts (said
// so). Of several --plugin-binary candidates the first that exists is installed. This machine's
// paths bind-mounted as the DaemonSet mounts them (/lib64 and /lib then show folders, not the
// links the host has) give the same answer, file for file, as its whole root. A stand-in cluster
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
  /** /status's binary part, once the plugin is installed and the agent ready. */
  async function installed(root: string) {
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const port = freePort();
    const p = start(["--host-root", root, "--health-port", String(port)]);
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 15_000, "the chain");
    await readyzUntil(port, 200);
    const status = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as {
      binary: Record<string, unknown>;
    };
    const [id] = readdirSync(join(dirs.bin, "meshcni.d"));
    const own = `The plugin loads none of it: its own loader and C library are in ${dirs.bin}/meshcni.d/${id}`;
    return { p, status, own };
  }

  test("this machine's own root: it has glibc, which the plugin does not load; installed and chained", async () => {
    dirs = cluster.dirs();
    const { p, status, own } = await installed("/");
    const said = `the host's C library: glibc (/lib64/ld-linux-x86-64.so.2). ${own}`;
    expect(status.binary).toEqual({ path: join(dirs.bin, "meshcni"), current: true, hostCheck: said });
    expect(p.log()).toContain(said);
  });

  test("a loader link that leads outside the mounted host paths: said so, and the plugin installed", async () => {
    dirs = cluster.dirs();
    const root = join(dirs.root, "nixos");
    mkdirSync(join(root, "lib64"), { recursive: true });
    symlinkSync("/nix/store/abc-nix-ld/lib/ld.so", join(root, "lib64/ld-linux-x86-64.so.2"));
    const { status, own } = await installed(root);
    expect(status.binary.hostCheck).toBe(
      "the host's C library: neither glibc's loader (/lib64/ld-linux-x86-64.so.2) nor musl's " +
        "(/lib/ld-musl-x86_64.so.1); /lib64/ld-linux-x86-64.so.2 leads to /nix/store/abc-nix-ld/lib/ld.so, which " +
        `the agent does not see (${PLUGIN} starts with /lib64/ld-linux-x86-64.so.2 (glibc's loader for x86-64), ` +
        "which leads to /nix/store/abc-nix-ld/lib/ld.so, outside what the agent sees of the host (/usr, /lib, " +
        `/lib64, /etc/ld.so.cache through ${root})). ${own}`,
    );
  });

  test("a host without glibc (musl, libstdc++): the plugin is installed and chained all the same, and ready", async () => {
    dirs = cluster.dirs();
    const { status, own } = await installed(alpineRoot());
    expect(status.binary).toEqual({
      path: join(dirs.bin, "meshcni"),
      current: true,
      hostCheck: `the host's C library: musl (${MUSL_LOADER}). ${own}`,
    });
  });

  test("of several --plugin-binary candidates, the first that exists is installed", async () => {
    dirs = cluster.dirs();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const script = join(dirs.root, "meshcni-script");
    writeFileSync(script, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
    const p = start([
      "--host-root",
      join(dirs.root, "none"),
      "--plugin-binary",
      `${dirs.root}/absent,${script},${PLUGIN}`,
    ]);
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 15_000, "the chain");
    // A script names no loader: copied as it is, no folder beside it.
    expect(readFileSync(join(dirs.bin, "meshcni"), "utf8")).toBe("#!/bin/sh\nexit 0\n");
    expect(readdirSync(dirs.bin)).toEqual(["meshcni"]);
    expect(p.log()).toContain(`host check skipped: ${join(dirs.root, "none")} is not there`);
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
