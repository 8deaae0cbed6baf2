// One plugin for every Linux node: the plugin as the agent installs it (the node binary with its
// own loader and C library in meshcni.d/) runs in a root that has no C library at all, in a root
// whose only C library is musl, and, built for arm64, under qemu-user. Each root holds only
// /proc, /dev, /sys, the CNI folders, /var/run/netns and the agent's socket folder, bind-mounted
// in, and meshcni's own files: the plugin answers VERSION there, and a meshed pod's ADD works
// with the real chain's result. The primary plugins (Debian's bridge and host-local, which need
// glibc) run outside that root, meshcni inside it with their prevResult, the real agent
// (dist/meshcni-installer) outside, answering over its socket from its watch cache of the
// stand-in API server; the rules land in the pod's namespace and real TCP reaches the proxy
// ports.
//
// How the plugin applies in those roots: until the agent applies rules itself (issue "agent
// applies", not on main yet), the plugin runs nsenter and iptables-nft-restore, which such a
// root lacks (its fallback fails closed without them). So each root also gets just nsenter and
// iptables (xtables-nft-multi, its links and extensions) from the image's pinned Debian packages,
// rewritten the same way to load a private copy of their libraries (/opt/tools/lib): still no C
// library where a loader would look. In the arm64 root these are the amd64 build: qemu-user
// emulates no nftables netlink socket, so arm64 iptables cannot program the kernel under it.
//
// First of all, qemu-user's aarch64 binfmt handler is registered (test/support/binfmt.ts): arm64
// programs then run under chroot as native ones do. Needs root, podman is not needed.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { buildElfRewrite } from "../../internal/agent/install/hostcheck/elf-rewrite.ts";
import { recordPath } from "../../internal/wire/state.ts";
import { checkBinaryOnHost } from "../../internal/agent/install/io/host-root.ts";
import { build } from "../../scripts/build.ts";
import { type Arch, ARCHS, debianRoot, debianSysroot, XTABLES_EXTENSIONS } from "../../scripts/image.ts";
import { type Binfmt, registerQemuAarch64 } from "../support/binfmt.ts";
import { type Attachment, CniRuntime, type Conflist } from "../support/cni-runtime.ts";
import { isRoot, listen, Netns, probe, sh, uniq } from "../support/netns.ts";
import { REFERENCE_PLUGINS } from "../support/pod-lab.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  INSTALLER_ENV,
  type InstallerProcess,
  installerArgs,
  isChainedIn,
  startCluster,
  startInstaller,
  until,
} from "./harness.ts";

const NS = "emojivoto";
const PRIMARY = "10-bridge.conflist";
const VERSION_IN = '{"cniVersion":"1.0.0"}';
const canRun = isRoot() && process.arch === "x64" && Bun.which("unshare") !== null;
/**
 * sh -c SCRIPT sh ROOT N DIR1..DIRN ARGV...: ARGV chrooted in ROOT, in a mount namespace of its
 * own, with /proc and /dev and the N folders bind-mounted at their own paths inside.
 */
const CHROOT_WITH = [
  "exec unshare --mount --propagation private sh -c '",
  'r="$1"; n="$2"; shift 2',
  'mkdir -p "$r/proc" "$r/dev" && mount --bind /proc "$r/proc" && mount --rbind /dev "$r/dev" || exit 1',
  'while [ "$n" -gt 0 ]; do mkdir -p "$r$1" && mount --bind "$1" "$r$1" || exit 1; shift; n=$((n-1)); done',
  'exec chroot "$r" "$@"\' sh "$@"',
].join("\n");

let binfmt: Binfmt | undefined;
let cluster: Cluster;
let scratch: string;

beforeAll(async () => {
  if (!canRun) return;
  // First: arm64 programs run under chroot through qemu-user (binfmt_misc is not mounted here by default).
  binfmt = registerQemuAarch64();
  ensureBuilt();
  cluster = await startCluster();
  cluster.setDaemonSet("present");
  cluster.api.addNamespace({ metadata: { name: NS } });
  scratch = mkdtempSync(join(tmpdir(), "meshcni-any-host-"));
}, 600_000);

afterAll(async () => {
  binfmt?.undo();
  await cluster?.close();
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

let podN = 0;
/** A Linkerd-injected pod of node-a, as the API server holds it. */
function meshedPod() {
  const name = `web-${++podN}-${uniq()}`;
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: NS,
      uid: `a0a0a0a0-0000-4000-8000-${String(podN).padStart(12, "0")}`,
      annotations: { "linkerd.io/inject": "enabled" },
    },
    spec: {
      nodeName: "node-a",
      initContainers: [
        { name: "linkerd-proxy", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1", restartPolicy: "Always" },
      ],
      containers: [{ name: "web", image: "buoyantio/emojivoto-web:v11" }],
    },
    status: { phase: "Pending" },
  };
}

/**
 * Copies `programs` (paths in `sysroot`) into `root` at the same paths, each rewritten to load
 * its loader and libraries from `root`/opt/tools/lib (a copy of those `sysroot` holds), with
 * iptables' extensions (opened at run time) at the path xtables looks in.
 */
function addTools(root: string, arch: Arch, sysroot: string, programs: { path: string; links?: string[] }[]): void {
  const lib = "/opt/tools/lib";
  mkdirSync(join(root, lib), { recursive: true });
  const xtables = `/usr/lib/${ARCHS[arch].triplet}/xtables`;
  // The extensions the image carries.
  const extensions = XTABLES_EXTENSIONS.flatMap((x) =>
    ["xt", "ipt", "ip6t"].map((f) => `${xtables}/lib${f}_${x}.so`),
  ).filter((x) => existsSync(join(sysroot, x)));
  let loader = "";
  const libs = new Map<string, string>();
  for (const p of programs) {
    const v = checkBinaryOnHost(sysroot, join(sysroot, p.path), p.path, ["/"]);
    if (v.ok !== true) throw new Error(`${p.path}: ${JSON.stringify(v)}`);
    loader = v.files[0]!.path;
    for (const f of v.files) libs.set(basename(f.path), f.real);
  }
  for (const x of extensions) {
    const v = checkBinaryOnHost(sysroot, join(sysroot, x), x, ["/"], loader);
    if (v.ok !== true) throw new Error(`${x}: ${JSON.stringify(v)}`);
    for (const f of v.files.slice(1)) libs.set(basename(f.path), f.real);
    mkdirSync(join(root, xtables), { recursive: true });
    copyFileSync(join(sysroot, x), join(root, x));
  }
  for (const [name, real] of libs) copyFileSync(join(sysroot, real), join(root, lib, name));
  chmodSync(join(root, lib, basename(loader)), 0o755);
  for (const p of programs) {
    const dest = join(root, p.path);
    mkdirSync(dirname(dest), { recursive: true });
    const interpreter = `${lib}/${basename(loader)}`;
    const r = buildElfRewrite(readFileSync(join(sysroot, p.path)), { interpreter, runPath: lib });
    writeFileSync(dest, r.bytes, { mode: 0o755 });
    for (const l of p.links ?? []) symlinkSync(basename(p.path), join(dirname(dest), l));
  }
}

/** Every regular file and link under `root` (not descending into the mount points), as paths inside it. */
function filesIn(root: string, skip: string[], prefix = ""): string[] {
  return readdirSync(join(root, prefix), { withFileTypes: true }).flatMap((e) => {
    const rel = `${prefix}/${e.name}`;
    if (skip.includes(rel)) return [];
    return e.isDirectory() ? filesIn(root, skip, rel) : [rel];
  });
}

interface Case {
  name: string;
  /** The plugin's architecture; the tools and the agent are amd64. */
  arch: Arch;
  /** The root's C library: none, or musl's (Debian's musl package: its loader and libc). */
  libc: "none" | "musl";
}

const CASES: Case[] = [
  { name: "a root with no C library", arch: "amd64", libc: "none" },
  { name: "a root whose C library is musl", arch: "amd64", libc: "musl" },
  { name: "arm64, under qemu-user, in a root with no C library", arch: "arm64", libc: "none" },
];

for (const c of CASES) {
  describe.skipIf(!canRun)(c.name, () => {
    let dirs: HostDirs;
    let agent: InstallerProcess;
    let root: string;
    /** The bin folder bind-mounted at the root's /opt/cni/bin. */
    let bin: string;
    /** Where the plugin runs chrooted, as a runtime would find it (a wrapper named meshcni). */
    let wrapperDir: string;
    let bridge: string;
    let port: number;
    const netnses: Netns[] = [];
    const mounts = ["/proc", "/dev", "/sys", "/opt/cni/bin", "/etc/cni/net.d", "/var/run/netns"];
    const failMsg = (e: unknown) => `${(e as Error).message}\n--- agent ---\n${agent?.log()}`;

    /** Runs argv chrooted in the root with its mounts, in a mount namespace of its own. */
    const chrooted = (argv: string[], env: Record<string, string>, stdin?: string) => {
      const r = Bun.spawnSync([join(wrapperDir, "chrooted"), ...argv], {
        env: { PATH: "/usr/sbin:/usr/bin", ...env },
        ...(stdin !== undefined ? { stdin: new TextEncoder().encode(stdin) } : {}),
        stdout: "pipe",
        stderr: "pipe",
      });
      return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
    };

    beforeAll(async () => {
      if (!canRun) return;
      if (c.arch === "arm64" && binfmt?.missing) throw new Error(`cannot run arm64 programs: ${binfmt.missing}`);
      dirs = cluster.dirs(`token-${c.arch}-${c.libc}`);
      root = join(scratch, `${c.arch}-${c.libc}`, "root");
      for (const m of [...mounts, dirs.state]) mkdirSync(join(root, m), { recursive: true });
      if (c.libc === "musl") {
        // Debian's musl, laid out as its package lays it out: libc.so, and the loader a link to it.
        const musl = debianRoot("amd64", { musl: "1.2.3-1" }, join(scratch, "musl"));
        mkdirSync(join(root, "lib/x86_64-linux-musl"), { recursive: true });
        copyFileSync(join(musl, "lib/x86_64-linux-musl/libc.so"), join(root, "lib/x86_64-linux-musl/libc.so"));
        chmodSync(join(root, "lib/x86_64-linux-musl/libc.so"), 0o755);
        symlinkSync("x86_64-linux-musl/libc.so", join(root, "lib/ld-musl-x86_64.so.1"));
        // It runs there: musl's loader answers for itself.
        const r = Bun.spawnSync(["chroot", root, "/lib/ld-musl-x86_64.so.1"], { stderr: "pipe" });
        if (!r.stderr.toString().includes("musl libc")) throw new Error(`musl's loader: ${r.stderr}`);
      }
      const iptables = ["iptables", "ip6tables"].flatMap((t) =>
        ["", "-nft", "-nft-restore", "-nft-save", "-restore", "-save"].map((s) => `${t}${s}`),
      );
      addTools(root, "amd64", debianSysroot("amd64"), [
        { path: "/usr/sbin/xtables-nft-multi", links: iptables },
        { path: "/usr/bin/nsenter" },
      ]);

      // The chain: bridge + host-local, ipMasq off (its iptables would run outside, on the host).
      bridge = `mah${uniq()}`.slice(0, 15);
      const octet = 150 + CASES.indexOf(c);
      writeFileSync(
        join(dirs.net, PRIMARY),
        JSON.stringify({
          cniVersion: "1.0.0",
          name: "node-net",
          plugins: [
            {
              type: "bridge",
              bridge,
              isGateway: true,
              ipMasq: false,
              ipam: { type: "host-local", subnet: `10.${octet}.0.0/24`, dataDir: join(dirs.root, "ipam") },
            },
          ],
        }),
      );

      // The agent, outside: the root's folders are the host's, seen by the host at /opt/cni/bin
      // and /etc/cni/net.d (--dest-*), the socket folder at its own path. --host-root: the root.
      port = freePort();
      bin = dirs.bin;
      // The plugin applies the rules itself, in the root, with the root's tools: what this test is
      // about (an agent that applies would leave the plugin only printing).
      const common = [
        "--dest-bin-dir",
        "/opt/cni/bin",
        "--host-root",
        root,
        "--resync-seconds",
        "3600",
        "--agent-applies=false",
      ];
      if (c.arch === "amd64") {
        agent = startInstaller(dirs, [...common, "--health-port", String(port)], cluster.env);
      } else {
        // The arm64 agent installs its plugin (--once, chrooted in the arm64 image's files
        // through qemu-user), into a bin folder of its own; the amd64 agent answers the socket.
        const arm = join(scratch, "arm64-image");
        await build(["meshcni"], { outdir: join(arm, "opt/meshcni"), target: ARCHS.arm64.bun, log: () => {} });
        const sys = debianSysroot("arm64");
        mkdirSync(join(arm, "lib"), { recursive: true });
        for (const f of ["lib/ld-linux-aarch64.so.1", "lib/aarch64-linux-gnu"]) {
          const r = sh(["cp", "-a", join(sys, f), join(arm, f)]);
          if (r.code !== 0) throw new Error(`cp ${f}: ${r.stderr}`);
        }
        bin = join(scratch, "arm64-bin");
        mkdirSync(bin);
        const armArgs = installerArgs({ ...dirs, bin } as HostDirs, ["--once", ...common.slice(0, 2)]);
        const once = Bun.spawn(
          ["sh", "-c", CHROOT_WITH, "sh", arm, "2", dirs.root, bin, "/opt/meshcni/meshcni-installer", ...armArgs],
          {
            env: { PATH: Bun.env.PATH!, ...INSTALLER_ENV, ...cluster.env },
            stdout: "pipe",
            stderr: "pipe",
          },
        );
        const [out, err, code] = await Promise.all([
          new Response(once.stdout).text(),
          new Response(once.stderr).text(),
          once.exited,
        ]);
        if (code !== 0) throw new Error(`the arm64 agent's --once: exit ${code}\n${out}${err}`);
        // The amd64 agent serves the socket; its own plugin (a stand-in) goes into the amd64 bin folder.
        const standIn = join(dirs.root, "stand-in");
        writeFileSync(standIn, "#!/bin/sh\nexit 1\n", { mode: 0o755 });
        agent = startInstaller(
          dirs,
          [
            ...common,
            "--host-root",
            join(dirs.root, "none"),
            "--plugin-binary",
            standIn,
            "--health-port",
            String(port),
          ],
          cluster.env,
        );
      }
      await until(() => isChainedIn(dirs, PRIMARY), 60_000, "the chain").catch((e) => {
        throw new Error(failMsg(e));
      });
      await until(() => existsSync(dirs.socket), 30_000, "the agent's socket").catch((e) => {
        throw new Error(failMsg(e));
      });

      // The runtime runs meshcni through this: the root's mounts, then the installed plugin, chrooted.
      wrapperDir = join(scratch, `${c.arch}-${c.libc}`, "wrapper");
      mkdirSync(wrapperDir, { recursive: true });
      const binds = [
        `mount --rbind /proc "$r/proc"`,
        `mount --rbind /dev "$r/dev"`,
        `mount --rbind /sys "$r/sys"`,
        `mount --bind ${JSON.stringify(bin)} "$r/opt/cni/bin"`,
        `mount --bind ${JSON.stringify(dirs.net)} "$r/etc/cni/net.d"`,
        `mount --rbind /run/netns "$r/var/run/netns"`,
        `mount --bind ${JSON.stringify(dirs.state)} "$r"${JSON.stringify(dirs.state)}`,
      ].join(" && ");
      writeFileSync(
        join(wrapperDir, "chrooted"),
        "#!/bin/sh\nexec unshare --mount --propagation private /bin/sh -c " +
          `'r=${JSON.stringify(root)}; ${binds} && exec chroot "$r" "$@"' sh "$@"\n`,
        { mode: 0o755 },
      );
      writeFileSync(
        join(wrapperDir, "meshcni"),
        `#!/bin/sh\nexec ${join(wrapperDir, "chrooted")} /opt/cni/bin/meshcni\n`,
        {
          mode: 0o755,
        },
      );
      mkdirSync("/run/netns", { recursive: true });
    }, 600_000);

    afterAll(async () => {
      for (const n of netnses) n.delete();
      if (bridge) sh(["ip", "link", "del", bridge]);
      await agent?.stop("SIGKILL");
      dirs?.cleanup();
    });

    test("the root holds no C library: only the plugin's own, the tools' own, and the mount points", () => {
      const files = filesIn(root, mounts);
      const libc = files.filter((f) => /(^|\/)(libc\.so|libc\.musl|ld-linux|ld-musl)/.test(f));
      const musl = ["/lib/ld-musl-x86_64.so.1", "/lib/x86_64-linux-musl/libc.so"];
      const allowed = (f: string) => f.startsWith("/opt/tools/lib/") || (c.libc === "musl" && musl.includes(f));
      if (c.libc === "musl") expect(libc.filter((f) => musl.includes(f)).sort()).toEqual(musl);
      expect(libc.filter((f) => !allowed(f))).toEqual([]);
      // The plugin's own loader and C library are in the bin folder, mounted at /opt/cni/bin.
      const [id] = readdirSync(join(bin, "meshcni.d"));
      const loader = c.arch === "amd64" ? "ld-linux-x86-64.so.2" : "ld-linux-aarch64.so.1";
      expect(readdirSync(join(bin, "meshcni.d", id!)).sort()).toEqual(
        [loader, "libc.so.6", "libdl.so.2", "libm.so.6", "libpthread.so.0"].sort(),
      );
      const elf = Bun.spawnSync(["readelf", "-l", "-d", "-W", join(bin, "meshcni")]).stdout.toString();
      expect(elf).toContain(`[Requesting program interpreter: /opt/cni/bin/meshcni.d/${id}/${loader}]`);
      expect(elf).toContain(`Library rpath: [/opt/cni/bin/meshcni.d/${id}]`);
    });

    test("the installed plugin answers VERSION inside it (the binary as built does not even start there)", () => {
      const r = chrooted(["/opt/cni/bin/meshcni"], { CNI_COMMAND: "VERSION" }, VERSION_IN);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expect(JSON.parse(r.stdout)).toEqual({
        cniVersion: "1.1.0",
        supportedVersions: ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
      });
      if (c.arch === "amd64") {
        // As built, it names the host's glibc loader, which this root does not have.
        copyFileSync(join(import.meta.dir, "../../dist/meshcni"), join(root, "opt/built-meshcni"));
        try {
          const built = chrooted(["/opt/built-meshcni"], { CNI_COMMAND: "VERSION" }, VERSION_IN);
          expect(built.code).not.toBe(0);
          expect(built.stdout).toBe("");
        } finally {
          rmSync(join(root, "opt/built-meshcni"));
        }
      }
    });

    test("a meshed pod's ADD through the real chain: rules in its namespace, real TCP to the proxy ports; then DEL", async () => {
      const pod = meshedPod();
      cluster.api.addPod(pod);
      const status = async () => (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
      await until(async () => (await status()).cache.pods.objects >= podN, 30_000, "the watch delivering the pod");
      const conflist = JSON.parse(readFileSync(join(dirs.net, PRIMARY), "utf8")) as Conflist;
      expect(conflist.plugins.map((p) => p.type)).toEqual(["bridge", "meshcni"]);
      const runtime = new CniRuntime(conflist, [REFERENCE_PLUGINS, wrapperDir], join(dirs.root, "cni-cache"), {
        PATH: "/usr/sbin:/usr/bin:/sbin:/bin",
      });
      const netns = Netns.create(`mah-${uniq()}`);
      netnses.push(netns);
      const a: Attachment = {
        containerId: `c${uniq()}${uniq()}`,
        netns: netns.path,
        ifname: "eth0",
        cniArgs:
          `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${pod.metadata.name};` +
          `K8S_POD_UID=${pod.metadata.uid}`,
      };
      const result = (await runtime.add(a).catch((e) => {
        const runs = runtime.runs.map((r) => `${r.type} ${r.code}\n${r.stdout}\n${r.stderr}`).join("\n");
        throw new Error(`${failMsg(e)}\n--- runs ---\n${runs}`);
      })) as { ips: { address: string; gateway: string }[] };
      // meshcni ran inside the root, with bridge's result as its prevResult, and passed it on.
      const meshcni = runtime.runs.find((r) => r.type === "meshcni")!;
      expect(meshcni.code).toBe(0);
      const bridgeRun = runtime.runs.find((r) => r.type === "bridge")!;
      expect(result).toEqual(JSON.parse(bridgeRun.stdout));
      // The rules, read from outside with this machine's iptables.
      const nat = netns.save("nft", 4, "nat");
      expect(nat).toContain("PROXY_INIT_REDIRECT");
      expect(nat).toContain("--to-ports 4143");
      expect(nat).toContain("--to-ports 4140");
      // Real TCP: into the pod to any port reaches the inbound proxy port; out of the pod, the outbound one.
      const proxy = await listen(netns, { 4143: "inbound-proxy", 4140: "outbound-proxy" });
      try {
        const podIp = result.ips[0]!.address.split("/")[0]!;
        const gateway = result.ips[0]!.gateway;
        expect(probe(undefined, podIp, 8080)).toBe("inbound-proxy port=4143");
        expect(probe(netns, gateway, 9999)).toBe("outbound-proxy port=4140");
      } finally {
        proxy.stop();
      }
      // The agent planned it from its cache (the plugin made no API request), and wrote its record.
      await until(
        () => agent.log().includes(`plugin ADD pod=${NS}/${pod.metadata.name} outcome=`),
        10_000,
        "the report",
      );
      const line = agent
        .log()
        .split("\n")
        .find((l) => l.includes(`plugin ADD pod=${NS}/${pod.metadata.name} `))!;
      expect(line).toContain("outcome=meshed rules=7 backend=nft lookup=agent-cache");
      expect(existsSync(recordPath(dirs.state, a.containerId))).toBe(true);
      await runtime.del(a);
      expect(existsSync(recordPath(dirs.state, a.containerId))).toBe(false);
    }, 120_000);
  });
}

test.skipIf(!canRun)(
  "the CNI bin folder with an older install (a plain copy of the binary) and others' plugins: installed over it, then undone, it is as it was before any install",
  async () => {
    const dirs = cluster.dirs("token-undo");
    try {
      writeFileSync(
        join(dirs.net, PRIMARY),
        readFileSync(join(import.meta.dir, "../../testdata/hosts/calico/10-calico.conflist")),
      );
      writeFileSync(join(dirs.bin, "bridge"), "#!/bin/sh\n", { mode: 0o755 });
      mkdirSync(join(dirs.bin, "other.d"));
      writeFileSync(join(dirs.bin, "other.d", "file"), "theirs");
      const pristine = snapshotDir(dirs.bin);
      // The older install: the binary copied as it is, as meshcni did before.
      copyFileSync(join(import.meta.dir, "../../dist/meshcni"), join(dirs.bin, "meshcni"));
      cluster.setDaemonSet("absent");
      const agent = startInstaller(dirs, ["--host-root", "/"], cluster.env);
      await until(() => isChainedIn(dirs, PRIMARY) && existsSync(join(dirs.bin, "meshcni.d")), 30_000, "the install");
      const [id] = readdirSync(join(dirs.bin, "meshcni.d"));
      const v = Bun.spawnSync([join(dirs.bin, "meshcni")], {
        env: { CNI_COMMAND: "VERSION" },
        stdin: new TextEncoder().encode(VERSION_IN),
      });
      expect(JSON.parse(v.stdout.toString()).cniVersion).toBe("1.1.0");
      expect(Bun.spawnSync(["readelf", "-l", join(dirs.bin, "meshcni")]).stdout.toString()).toContain(
        `${dirs.bin}/meshcni.d/${id}/ld-linux-x86-64.so.2`,
      );
      expect(await agent.stop()).toBe(0);
      expect(agent.log()).toContain("undoing the installation");
      expect(snapshotDir(dirs.bin)).toEqual(pristine);
    } finally {
      cluster.setDaemonSet("present");
      dirs.cleanup();
    }
  },
  120_000,
);

/** Each file and folder under `dir` with its mode and bytes' digest. */
function snapshotDir(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const e of readdirSync(dir, { recursive: true, withFileTypes: true })) {
    const path = join(e.parentPath, e.name);
    const st = statSync(path);
    out[path.slice(dir.length)] = e.isDirectory()
      ? `dir ${(st.mode & 0o7777).toString(8)}`
      : `${(st.mode & 0o7777).toString(8)} ${new Bun.CryptoHasher("sha256").update(readFileSync(path)).digest("hex")}`;
  }
  return out;
}
