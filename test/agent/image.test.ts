// The DaemonSet image, for amd64 and arm64: scripts/image.ts builds both offline (the node
// binary cross-compiled by Bun, Debian's pinned packages for each architecture, `podman build`
// FROM scratch) and a manifest list tying them. First, qemu-user's aarch64 binfmt handler is
// registered (test/support/binfmt.ts), so arm64 programs run under chroot. Checked from outside:
// each image holds the node binary, the userland (iptables nft and legacy, nft, libnftables,
// nsenter, ip) and exactly what they load (readelf's needs, nothing unneeded); each program runs
// inside its image's root (--version under chroot), and amd64's iptables (both variants) and
// nft apply rules with their extensions in a network namespace; each image is within 130 MB.
// The amd64 image runs against host folders bind-mounted at /host/etc/cni/net.d,
// /host/opt/cni/bin and /var/run/meshcni, the host's /usr, /lib, /lib64 and /etc/ld.so.cache
// under /host/root, with a stand-in API server on ::1 (install with the image's loader and C
// library beside the plugin, the agent's socket, re-chain, undo once the DaemonSet is gone); the
// arm64 image's files run under qemu-user: VERSION, an ADD in dry-run mode against the stand-in
// API server (the same payload as amd64), and the agent's --once against a temp folder, whose
// installed plugin answers VERSION on its own loader.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HOST_CHECK_PATHS } from "../../internal/agent/install/hostcheck/check.ts";
import { parseElf } from "../../internal/agent/install/hostcheck/elf.ts";
import { buildElfRewrite } from "../../internal/agent/install/hostcheck/elf-rewrite.ts";
import { type BuiltImage, buildImages, IMAGE_BUDGET_BYTES } from "../../scripts/image.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { repoPath } from "../support/golden.ts";
import { type Binfmt, registerQemuAarch64 } from "../support/binfmt.ts";
import { isRoot, uniq } from "../support/netns.ts";
import { cniEnv, PLUGIN as AMD64_PLUGIN, runPlugin } from "../support/plugin-run.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  HostDirs,
  INSTALLER_ENV,
  installerArgs,
  isChainedIn,
  readyz,
  startCluster,
  until,
} from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");
const QEMU = Bun.which("qemu-aarch64-static");
const canRun = isRoot() && Bun.which("podman") !== null;
const canNetns = isRoot() && Bun.which("unshare") !== null;
const ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"];

/** ELF facts read with binutils' readelf, independent of internal/agent/install/hostcheck. */
function readelfNeeds(file: string): { interpreter: string; needed: string[] } {
  const out = Bun.spawnSync(["readelf", "-d", "-l", file], { stdout: "pipe" }).stdout.toString();
  return {
    interpreter: /program interpreter: ([^\]]+)\]/.exec(out)![1]!,
    needed: [...out.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)].map((m) => m[1]!).sort(),
  };
}

/** The files ldd says a binary of this machine loads (the vDSO is the kernel's). */
function lddFiles(bin: string): string[] {
  const out = new Set<string>();
  const r = Bun.spawnSync(["ldd", bin], { stdout: "pipe" });
  for (const line of r.stdout.toString().split("\n")) {
    const m = /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(line);
    if (m) out.add(m[1]!);
  }
  return [...out].sort();
}

const base = (p: string) => p.slice(p.lastIndexOf("/") + 1);

describe.skipIf(!canRun)("DaemonSet image, amd64 and arm64 (podman, offline)", () => {
  let scratch: string;
  let dirs: HostDirs;
  let cluster: Cluster;
  let images: BuiltImage[];
  let binfmt: Binfmt | undefined;
  const list = `localhost/meshcni-test:${uniq()}`;
  const name = `meshcni-installer-${uniq()}`;
  const image = (arch: string) => images.find((i) => i.arch === arch)!;

  const podman = (args: string[]) => {
    const r = Bun.spawnSync(["podman", "--root", join(scratch, "root"), "--runroot", join(scratch, "run"), ...args], {
      env: { ...Bun.env, CONTAINERS_CONF: join(scratch, "containers.conf") },
      stdout: "pipe",
      stderr: "pipe",
    });
    return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
  };

  beforeAll(async () => {
    // First: arm64 programs run under chroot through qemu-user (binfmt_misc is not mounted here by default).
    binfmt = registerQemuAarch64();
    if (binfmt.missing) throw new Error(`cannot run arm64 programs: ${binfmt.missing}`);
    ensureBuilt();
    cluster = await startCluster({ host: "::1" });
    scratch = mkdtempSync(join(tmpdir(), "meshcni-image-"));
    mkdirSync(join(scratch, "net.d"));
    writeFileSync(
      join(scratch, "containers.conf"),
      [
        "[network]",
        'network_backend = "cni"',
        `network_config_dir = ${JSON.stringify(join(scratch, "net.d"))}`,
        "[engine]",
        'runtime = "runc"',
        'cgroup_manager = "cgroupfs"',
        'events_logger = "file"',
        "",
      ].join("\n"),
    );
    dirs = cluster.dirs("image-token");
    mkdirSync(dirs.state, { recursive: true });
    images = await buildImages({
      archs: ["amd64", "arm64"],
      tag: list,
      outdir: join(scratch, "context"),
      podman,
      log: (l) => console.log(l),
    });
  }, 300_000);

  afterAll(async () => {
    binfmt?.undo();
    await cluster?.close();
    dirs?.cleanup();
    if (!scratch) return;
    podman(["rm", "-f", "-t", "0", name]);
    podman(["manifest", "rm", list]);
    for (const i of images ?? []) podman(["rmi", "-f", i.tag]);
    // Podman's overlay storage leaves mounts under its root: undo them, deepest first.
    const mounts = readFileSync("/proc/self/mounts", "utf8")
      .split("\n")
      .map((l) => l.split(" ")[1] ?? "")
      .filter((m) => m.startsWith(scratch))
      .sort((a, b) => b.length - a.length);
    for (const m of mounts) Bun.spawnSync(["umount", "-l", m]);
    rmSync(scratch, { recursive: true, force: true });
  });

  test("each image holds the node binary, its link, the userland, and exactly the loader and libraries they load", () => {
    for (const { arch, staged } of images) {
      const bin = join(staged.dir, "opt/meshcni/meshcni");
      const elf = readelfNeeds(bin);
      const bytes = readFileSync(bin);
      expect(parseElf((o, n) => bytes.subarray(o, o + n), bytes.length).machine).toBe(arch === "amd64" ? 62 : 183);
      expect(readlinkSync(join(staged.dir, "opt/meshcni/meshcni-installer"))).toBe("meshcni");
      // The interpreter at its path, and each library the node binary needs.
      expect(staged.libraries).toContain(elf.interpreter);
      const names = staged.libraries.map(base);
      for (const n of elf.needed) expect(names).toContain(n);
      // Every file is the node binary, its link, a program of the userland, or a library one of them loads.
      expect(staged.files.map((f) => f.path)).toEqual(
        [...staged.libraries, ...staged.userland, "/opt/meshcni/meshcni", "/opt/meshcni/meshcni-installer"].sort(
          (a, b) => a.localeCompare(b),
        ),
      );
      // Every ELF file's needs (binutils' readelf, not the host check) are in the image by name,
      // and no library is there that nothing needs.
      const needed = new Set<string>([base(elf.interpreter), ...elf.needed]);
      for (const f of [...staged.userland, ...staged.libraries]) {
        const path = join(staged.dir, f);
        if (lstatSync(path).isSymbolicLink()) continue;
        const out = Bun.spawnSync(["readelf", "-d", path], { stdout: "pipe" }).stdout.toString();
        for (const m of out.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)) needed.add(m[1]!);
        const b = readFileSync(path);
        expect({ f, machine: parseElf((o, n) => b.subarray(o, o + n), b.length).machine }).toEqual({
          f,
          machine: arch === "amd64" ? 62 : 183,
        });
      }
      const inImage = new Set([...names, ...staged.userland.map(base)]);
      for (const n of needed) expect({ n, there: inImage.has(n) }).toEqual({ n, there: true });
      for (const n of names) expect({ n, needed: needed.has(n) }).toEqual({ n, needed: true });
      // The userland the agent applies rules with.
      for (const p of [
        "/usr/sbin/iptables-nft-restore",
        "/usr/sbin/iptables-nft-save",
        "/usr/sbin/ip6tables-nft-restore",
        "/usr/sbin/ip6tables-nft-save",
        "/usr/sbin/iptables-legacy-restore",
        "/usr/sbin/iptables-legacy-save",
        "/usr/sbin/ip6tables-legacy-restore",
        "/usr/sbin/ip6tables-legacy-save",
        "/usr/sbin/nft",
        "/usr/bin/nsenter",
        "/usr/bin/ip",
        `/usr/lib/${arch === "amd64" ? "x86_64" : "aarch64"}-linux-gnu/libnftables.so.1`,
      ])
        expect(staged.userland).toContain(p);
    }
    // On this (amd64) machine ldd can load the amd64 binary: it names the same files.
    for (const n of lddFiles(AMD64_PLUGIN).map(base)) expect(image("amd64").staged.libraries.map(base)).toContain(n);
  });

  test("each program runs inside its image's root: amd64 under chroot, arm64 under chroot through qemu-user", () => {
    for (const { arch, staged } of images) {
      const run = (argv: string[]) => {
        const r = Bun.spawnSync(["chroot", staged.dir, ...argv], { stdout: "pipe", stderr: "pipe" });
        return { code: r.exitCode, out: r.stdout.toString() + r.stderr.toString() };
      };
      for (const [argv, says] of [
        [["/usr/sbin/iptables-nft-restore", "--version"], "iptables-nft-restore v1.8.9 (nf_tables)"],
        [["/usr/sbin/ip6tables-nft-save", "--version"], "ip6tables-nft-save v1.8.9 (nf_tables)"],
        [["/usr/sbin/iptables-legacy-restore", "--version"], "iptables-restore v1.8.9 (legacy)"],
        [["/usr/sbin/ip6tables-legacy-save", "--version"], "ip6tables-save v1.8.9 (legacy)"],
        [["/usr/bin/nsenter", "--version"], "nsenter from util-linux 2.38.1"],
        [["/usr/bin/ip", "-V"], "iproute2-6.1.0"],
      ] as const) {
        expect({ arch, argv, ...run([...argv]) }).toMatchObject({
          arch,
          argv,
          code: 0,
          out: expect.stringContaining(says),
        });
      }
      // nft opens a netlink socket first, which qemu-user does not emulate for nftables.
      if (arch === "amd64") expect(run(["/usr/sbin/nft", "--version"]).out).toContain("nftables v1.0.6");
      const loader = arch === "amd64" ? "/lib64/ld-linux-x86-64.so.2" : "/lib/ld-linux-aarch64.so.1";
      const listed = run([loader, "--list", "/usr/sbin/nft"]);
      expect(listed.code).toBe(0);
      expect(listed.out).not.toContain("not found");
    }
  });

  test.skipIf(!canNetns)(
    "amd64: the image's iptables (both variants) and nft apply rules with their extensions in a network namespace",
    () => {
      const dir = image("amd64").staged.dir;
      const inNetns = (argv: string[], stdin: string) => {
        // The image has no /run: legacy iptables takes the lock file it is given (the plugin gives
        // it the pod's namespace file).
        const r = Bun.spawnSync(["unshare", "--net", "chroot", dir, ...argv], {
          env: { PATH: Bun.env.PATH!, XTABLES_LOCKFILE: "/usr/sbin/xtables-legacy-multi" },
          stdin: new TextEncoder().encode(stdin),
          stdout: "pipe",
          stderr: "pipe",
        });
        return { code: r.exitCode, out: r.stdout.toString() + r.stderr.toString() };
      };
      const payload = [
        "*nat",
        ":OUT - [0:0]",
        "-A OUTPUT -p tcp -j OUT",
        '-A OUT -m owner --uid-owner 2102 -m comment --comment "proxy" -j RETURN',
        "-A OUT -p tcp -m multiport --dports 25,443 -j RETURN",
        "-A OUT -p tcp -j REDIRECT --to-ports 4140",
        "COMMIT",
        "*mangle",
        "-A PREROUTING -p tcp -m mark --mark 0x539 -j CONNMARK --save-mark",
        "-A PREROUTING -p tcp -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT",
        "-A PREROUTING -p tcp -m socket --transparent -j MARK --set-mark 0x539",
        "-A PREROUTING -p tcp -j TPROXY --on-port 15006 --tproxy-mark 0x539/0xffffffff",
        "COMMIT",
        "",
      ].join("\n");
      for (const restore of ["/usr/sbin/iptables-nft-restore", "/usr/sbin/iptables-legacy-restore"]) {
        expect({ restore, ...inNetns([restore], payload) }).toEqual({ restore, code: 0, out: "" });
      }
      const nft = inNetns(
        ["/usr/sbin/nft", "-f", "-"],
        "table inet m {\n  chain o {\n    type nat hook output priority -100;\n    tcp dport 80 redirect to :4140\n  }\n}\n",
      );
      expect(nft).toEqual({ code: 0, out: "" });
    },
  );

  test("a manifest list ties linux/amd64 and linux/arm64", () => {
    const m = JSON.parse(podman(["manifest", "inspect", list]).stdout);
    expect(
      m.manifests
        .map((x: { platform: { os: string; architecture: string } }) => `${x.platform.os}/${x.platform.architecture}`)
        .sort(),
    ).toEqual(["linux/amd64", "linux/arm64"]);
    for (const i of images) {
      const arch = podman([
        "image",
        "inspect",
        "--format",
        "{{.Os}}/{{.Architecture}} {{.Config.Entrypoint}}",
        i.tag,
      ]).stdout.trim();
      expect(arch).toBe(`linux/${i.arch} [/opt/meshcni/meshcni-installer]`);
    }
  });

  test("each image is at most 130 MB", () => {
    for (const i of images) {
      console.log(`image size ${i.arch}: ${(i.bytes / 1e6).toFixed(1)} MB (budget ${IMAGE_BUDGET_BYTES / 1e6} MB)`);
      expect(i.bytes).toBeGreaterThan(50e6);
      expect(i.bytes).toBeLessThanOrEqual(IMAGE_BUDGET_BYTES);
    }
  });

  test("amd64: installs (after checking the host), re-chains and undoes from inside the container", async () => {
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const port = freePort();
    const apiPort = cluster.env.KUBERNETES_SERVICE_PORT!;
    // The DaemonSet's mounts: the host's CNI folders, the agent's folder at its own path, and
    // the host paths the host check reads, read-only under /host/root.
    const run = podman([
      "run",
      "-d",
      "--name",
      name,
      ...ULIMITS,
      "--network",
      "host",
      "-v",
      `${dirs.net}:/host/etc/cni/net.d`,
      "-v",
      `${dirs.bin}:/host/opt/cni/bin`,
      "-v",
      `${dirs.state}:/var/run/meshcni`,
      ...HOST_CHECK_PATHS.flatMap((p) => ["-v", `${p}:/host/root${p}:ro`]),
      "-v",
      `${dirs.sa}:/var/run/secrets/kubernetes.io/serviceaccount:ro`,
      "-e",
      "KUBERNETES_SERVICE_HOST=::1",
      "-e",
      `KUBERNETES_SERVICE_PORT=${apiPort}`,
      "-e",
      "POD_NAMESPACE=meshcni",
      "-e",
      "NODE_NAME=node-a",
      image("amd64").tag,
      "--health-port",
      String(port),
    ]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);

    await until(() => isChainedIn(dirs, "10-calico.conflist"), 15_000, "the chain from the container");
    const deadline = performance.now() + 10_000;
    while ((await readyz(port).catch(() => ({ status: 0 }))).status !== 200) {
      if (performance.now() > deadline) throw new Error("/readyz never answered 200");
      await Bun.sleep(50);
    }
    // The image's node binary, named to load the image's loader and C library from meshcni.d/
    // as the host sees the bin folder (the default --dest-bin-dir, /opt/cni/bin).
    const [id] = readdirSync(join(dirs.bin, "meshcni.d"));
    const folder = `/opt/cni/bin/meshcni.d/${id}`;
    expect(
      Buffer.compare(
        readFileSync(join(dirs.bin, "meshcni")),
        buildElfRewrite(readFileSync(join(image("amd64").staged.dir, "opt/meshcni/meshcni")), {
          interpreter: `${folder}/ld-linux-x86-64.so.2`,
          runPath: folder,
        }).bytes,
      ),
    ).toBe(0);
    for (const f of readdirSync(join(dirs.bin, "meshcni.d", id!))) {
      const inImage = image("amd64").staged.libraries.find((l) => base(l) === f)!;
      expect(readFileSync(join(dirs.bin, "meshcni.d", id!, f))).toEqual(
        readFileSync(join(image("amd64").staged.dir, inImage)),
      );
    }
    const kubeconfig = readFileSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"), "utf8");
    expect(kubeconfig).toContain(`server: https://[::1]:${apiPort}`);
    // A token of the plugin's own account, which the agent asked for: never its own.
    const pluginToken = cluster.api.issued
      .filter((t) => t.user === "system:serviceaccount:meshcni:meshcni-plugin")
      .at(-1)!;
    expect(kubeconfig).toContain(`token: "${pluginToken.token}"`);
    expect(kubeconfig).not.toContain("image-token");
    const entry = JSON.parse(readFileSync(join(dirs.net, "10-calico.conflist"), "utf8")).plugins.at(-1);
    expect(entry.kubernetes.pod_namespace).toBe("meshcni");
    expect([entry.agent_socket, entry.state_dir]).toEqual(["/var/run/meshcni/agent.sock", "/var/run/meshcni"]);
    // The socket the container serves is there on the host, root only, and answers.
    const socket = join(dirs.state, "agent.sock");
    await until(
      () => statSync(socket, { throwIfNoEntry: false })?.isSocket() === true,
      5000,
      "the agent's socket on the host",
    );
    expect(statSync(socket).mode & 0o7777).toBe(0);
    const answer = await fetch("http://localhost/v1/pods/Not_A_Name/x", { unix: socket } as RequestInit);
    expect(answer.status).toBe(400);

    const rewritten = CALICO.replace('"mtu": 0', '"mtu": 1450');
    dirs.writeHost("10-calico.conflist", rewritten);
    await until(
      () =>
        isChainedIn(dirs, "10-calico.conflist") &&
        readFileSync(join(dirs.net, "10-calico.conflist"), "utf8").includes('"mtu": 1450'),
      5000,
      "the re-chain",
    );

    // kubelet rotating the agent's own token leaves the plugin's kubeconfig as it is.
    dirs.projectToken("image-token-2");
    await Bun.sleep(300);
    expect(readFileSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"), "utf8")).toBe(kubeconfig);

    // podman stop sends SIGTERM: with its DaemonSet gone (the stand-in holds none) the
    // container undoes everything and exits 0.
    // Not spawnSync: the stand-in API server in this process must answer the agent meanwhile.
    const stop = Bun.spawn(
      ["podman", "--root", join(scratch, "root"), "--runroot", join(scratch, "run"), "stop", "-t", "20", name],
      {
        env: { ...Bun.env, CONTAINERS_CONF: join(scratch, "containers.conf") },
        stdout: "ignore",
        stderr: "inherit",
      },
    );
    expect(await stop.exited).toBe(0);
    expect(podman(["inspect", "--format", "{{.State.ExitCode}}", name]).stdout.trim()).toBe("0");
    expect(dirs.names()).toEqual(["10-calico.conflist"]);
    expect(readFileSync(join(dirs.net, "10-calico.conflist"), "utf8")).toBe(rewritten);
    expect(readdirSync(dirs.bin)).toEqual([]);
    expect(readdirSync(dirs.state)).toEqual([]);
    const logs = podman(["logs", name]);
    expect(logs.stdout + logs.stderr).toContain(
      "its DaemonSet meshcni/meshcni-node is gone (404); undoing the installation",
    );
    // The host check ran against this machine's root, mounted as the DaemonSet mounts the node's.
    expect(logs.stdout + logs.stderr).toContain(
      "the host's C library: glibc (/lib64/ld-linux-x86-64.so.2). The plugin loads none of it: its own loader and " +
        "C library are in /opt/cni/bin/meshcni.d/",
    );
    expect(logs.stdout + logs.stderr).toContain("meshcni is uninstalled from this node");
    expect(logs.stdout + logs.stderr).not.toContain("image-token");
    expect(logs.stdout + logs.stderr).not.toContain(pluginToken.token);
  }, 120_000);

  describe.skipIf(QEMU === null)("arm64 under qemu-user, from the image's own files", () => {
    let root: string;
    let api: ApiServer;
    let kubeconfig: string;
    /**
     * Runs an arm64 program of the image under qemu-user, its loader and libraries from the image
     * (-L). Async: the stand-in API server answers from this process.
     */
    const arm = async (argv: string[], env: Record<string, string>, stdin?: string) => {
      const p = Bun.spawn([QEMU!, "-L", root, ...argv], {
        env: { PATH: Bun.env.PATH!, ...env },
        stdin: stdin === undefined ? "ignore" : new Blob([stdin]),
        stdout: "pipe",
        stderr: "pipe",
      });
      const [stdout, stderr, code] = await Promise.all([
        new Response(p.stdout).text(),
        new Response(p.stderr).text(),
        p.exited,
      ]);
      return { code, stdout, stderr };
    };

    beforeAll(async () => {
      // The arm64 image's file system, exported by podman (not the staging folder).
      root = join(scratch, "arm64-root");
      mkdirSync(root);
      const c = `meshcni-arm64-export-${uniq()}`;
      expect(podman(["create", "--name", c, image("arm64").tag]).code).toBe(0);
      const tar = join(scratch, "arm64.tar");
      expect(podman(["export", "-o", tar, c]).code).toBe(0);
      podman(["rm", c]);
      expect(Bun.spawnSync(["tar", "-xf", tar, "-C", root]).exitCode).toBe(0);
      api = await startApiServer({ token: "arm-token" });
      api.addPod(JSON.parse(readFileSync(repoPath("testdata/pods/linkerd-meshed.json"), "utf8")));
      api.addNamespace(JSON.parse(readFileSync(repoPath("testdata/pods/namespace-emojivoto.json"), "utf8")));
      kubeconfig = join(scratch, "arm-kubeconfig");
      writeFileSync(kubeconfig, api.kubeconfig());
    }, 60_000);
    afterAll(async () => {
      await api?.close();
    });

    test("VERSION", async () => {
      const r = await arm([join(root, "opt/meshcni/meshcni")], { CNI_COMMAND: "VERSION" }, '{"cniVersion":"1.0.0"}');
      expect(r.stderr).toBe("");
      expect(JSON.parse(r.stdout)).toEqual({
        cniVersion: "1.1.0",
        supportedVersions: ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"],
      });
    });

    test("ADD for a meshed pod in dry-run mode: the same result and payload as amd64", async () => {
      const env = cniEnv("ADD", {
        CNI_ARGS: "IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=web-5b8b6f7c9d-x2x7q",
      });
      const stdin = JSON.stringify({
        cniVersion: "1.0.0",
        name: "k8s-pod-network",
        type: "meshcni",
        dry_run: true,
        kubernetes: { kubeconfig },
        prevResult: JSON.parse(readFileSync(repoPath("testdata/cni/prev-results/flannel-bridge.json"), "utf8")),
      });
      const dry = join(scratch, "arm64-payload");
      const r = await arm([join(root, "opt/meshcni/meshcni")], { ...env, MESHCNI_DRY_RUN_FILE: dry }, stdin);
      expect(r.code).toBe(0);
      const payload = readFileSync(dry, "utf8");
      expect(payload).toContain(
        `-A PROXY_INIT_REDIRECT -p tcp -m comment --comment ` +
          `"proxy-init/redirect-all-incoming-to-proxy-port" -j REDIRECT --to-ports 4143`,
      );
      const amd = await runPlugin(env, stdin, { dryRun: true });
      expect(amd.code).toBe(0);
      expect(r.stdout).toBe(amd.stdout);
      expect(payload).toBe(amd.payload!);
      expect(
        api.requests.filter((q) => q.path === "/api/v1/namespaces/emojivoto/pods/web-5b8b6f7c9d-x2x7q").length,
      ).toBe(2);
    });

    test("the agent's --once (run as meshcni-installer) installs the arm64 plugin into a temp folder, checked against an arm64 host root", async () => {
      const node = new HostDirs("arm-token", api.caPem);
      try {
        writeFileSync(join(node.net, "10-calico.conflist"), CALICO);
        // The host check looks at the exported image as the host's root: it has the arm64 loader.
        const env = {
          ...INSTALLER_ENV,
          KUBERNETES_SERVICE_HOST: "127.0.0.1",
          KUBERNETES_SERVICE_PORT: new URL(api.url).port,
        };
        // Chrooted in the image's root (qemu-user through its binfmt handler), the node's
        // folders bind-mounted at their own paths: the agent takes the loader and libraries from
        // its own root, which qemu-user's -L would mix with this machine's.
        const script =
          'r="$1"; d="$2"; shift 2; mkdir -p "$r/proc" "$r/dev" "$r$d" && mount --bind /proc "$r/proc" && ' +
          'mount --rbind /dev "$r/dev" && mount --bind "$d" "$r$d" && exec chroot "$r" "$@"';
        const p = Bun.spawn(
          [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            root,
            node.root,
            "/opt/meshcni/meshcni-installer",
            ...installerArgs(node, ["--once", "--host-root", "/"]),
          ],
          { env: { PATH: Bun.env.PATH!, ...env }, stdout: "pipe", stderr: "pipe" },
        );
        const [stdout, stderr, code] = await Promise.all([
          new Response(p.stdout).text(),
          new Response(p.stderr).text(),
          p.exited,
        ]);
        const r = { stdout, stderr, code };
        expect(r.stderr).not.toContain("error");
        expect(r.code).toBe(0);
        const [id] = readdirSync(join(node.bin, "meshcni.d"));
        const folder = join(node.bin, "meshcni.d", id!);
        expect(r.stdout + r.stderr).toContain(
          "the host's C library: glibc (/lib/ld-linux-aarch64.so.1). The plugin loads none of it: " +
            `its own loader and C library are in ${folder}`,
        );
        expect(isChainedIn(node, "10-calico.conflist")).toBe(true);
        expect(readdirSync(folder).sort()).toEqual(
          ["ld-linux-aarch64.so.1", "libc.so.6", "libdl.so.2", "libm.so.6", "libpthread.so.0"].sort(),
        );
        expect(
          Buffer.compare(
            readFileSync(join(node.bin, "meshcni")),
            buildElfRewrite(readFileSync(join(root, "opt/meshcni/meshcni")), {
              interpreter: `${folder}/ld-linux-aarch64.so.1`,
              runPath: folder,
            }).bytes,
          ),
        ).toBe(0);
        // The installed arm64 plugin runs on the loader and C library it was given.
        const v = await arm([join(node.bin, "meshcni")], { CNI_COMMAND: "VERSION" }, '{"cniVersion":"1.0.0"}');
        expect(JSON.parse(v.stdout).cniVersion).toBe("1.1.0");
        // The plugin's token, asked for with the agent's ("arm-token").
        expect(api.issued.at(-1)?.user).toBe("system:serviceaccount:meshcni:meshcni-plugin");
        expect(readFileSync(join(node.net, "ZZZ-meshcni-kubeconfig"), "utf8")).toContain(
          `token: "${api.issued.at(-1)!.token}"`,
        );
      } finally {
        node.cleanup();
      }
    }, 120_000);
  });
});
