// The DaemonSet image: `podman build` of the Containerfile offline (FROM scratch, the two
// binaries, the libraries ldd names), then the image run against host folders bind-mounted at
// /host/etc/cni/net.d, /host/opt/cni/bin and /var/run/meshcni, with a stand-in API server on
// ::1, checked from outside: install, the agent's socket, re-chain, undo once the DaemonSet is
// gone.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoPath } from "../support/golden.ts";
import { isRoot, uniq } from "../support/netns.ts";
import { type Cluster, ensureBuilt, freePort, type HostDirs, INSTALLER, isChainedIn, PLUGIN, readyz, startCluster, until } from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");
const canRun = isRoot() && Bun.which("podman") !== null;
const ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"];

/** The files ldd says the binaries load (the vDSO is the kernel's). */
function neededLibraries(): string[] {
  const out = new Set<string>();
  for (const bin of [INSTALLER, PLUGIN]) {
    const r = Bun.spawnSync(["ldd", bin], { stdout: "pipe" });
    for (const line of r.stdout.toString().split("\n")) {
      const m = /(?:=>\s*)?(\/\S+)\s+\(0x/.exec(line);
      if (m) out.add(m[1]!);
    }
  }
  return [...out].sort();
}

describe.skipIf(!canRun)("DaemonSet image (podman, offline)", () => {
  let scratch: string;
  let dirs: HostDirs;
  let cluster: Cluster;
  const tag = `localhost/meshcni-test:${uniq()}`;
  const name = `meshcni-installer-${uniq()}`;

  const podman = (args: string[]) => {
    const r = Bun.spawnSync(["podman", "--root", join(scratch, "root"), "--runroot", join(scratch, "run"), ...args], {
      env: { ...Bun.env, CONTAINERS_CONF: join(scratch, "containers.conf") },
      stdout: "pipe",
      stderr: "pipe",
    });
    return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
  };

  beforeAll(async () => {
    ensureBuilt();
    cluster = await startCluster({ host: "::1" });
    scratch = mkdtempSync(join(tmpdir(), "meshcni-image-"));
    mkdirSync(join(scratch, "net.d"));
    writeFileSync(join(scratch, "containers.conf"), [
      "[network]", 'network_backend = "cni"', `network_config_dir = ${JSON.stringify(join(scratch, "net.d"))}`,
      "[engine]", 'runtime = "runc"', 'cgroup_manager = "cgroupfs"', 'events_logger = "file"', "",
    ].join("\n"));
    dirs = cluster.dirs("image-token");
    mkdirSync(dirs.state, { recursive: true });
  }, 60_000);

  afterAll(async () => {
    await cluster?.close();
    dirs?.cleanup();
    if (!scratch) return;
    podman(["rm", "-f", "-t", "0", name]);
    podman(["rmi", "-f", tag]);
    // Podman's overlay storage leaves mounts under its root: undo them, deepest first.
    const mounts = readFileSync("/proc/self/mounts", "utf8").split("\n").map((l) => l.split(" ")[1] ?? "")
      .filter((m) => m.startsWith(scratch)).sort((a, b) => b.length - a.length);
    for (const m of mounts) Bun.spawnSync(["umount", "-l", m]);
    rmSync(scratch, { recursive: true, force: true });
  });

  test("the Containerfile copies exactly the libraries the binaries load", () => {
    const copied = readFileSync(repoPath("Containerfile"), "utf8").split("\n")
      .map((l) => /^COPY --from=host \S+ (\S+)$/.exec(l)?.[1])
      .filter((x): x is string => x !== undefined)
      .sort();
    expect(copied).toEqual(neededLibraries());
  });

  test("builds offline FROM scratch and installs, re-chains and undoes from inside the container", async () => {
    const build = podman(["build", "--build-context", "host=/", "-f", repoPath("Containerfile"), "-t", tag, repoPath("dist")]);
    expect(build.stderr + build.stdout).toContain("COMMIT");
    expect(build.code).toBe(0);
    // Nothing in the image but the binaries and the libraries.
    const history = podman(["image", "inspect", "--format", "{{.Config.Entrypoint}}", tag]);
    expect(history.stdout.trim()).toBe("[/opt/meshcni/meshcni-installer]");

    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const port = freePort();
    const apiPort = cluster.env.KUBERNETES_SERVICE_PORT!;
    // The DaemonSet's mounts: the host's CNI folders and the agent's folder at its own path.
    const run = podman(["run", "-d", "--name", name, ...ULIMITS, "--network", "host",
      "-v", `${dirs.net}:/host/etc/cni/net.d`, "-v", `${dirs.bin}:/host/opt/cni/bin`, "-v", `${dirs.state}:/var/run/meshcni`,
      "-v", `${dirs.sa}:/var/run/secrets/kubernetes.io/serviceaccount:ro`,
      "-e", "KUBERNETES_SERVICE_HOST=::1", "-e", `KUBERNETES_SERVICE_PORT=${apiPort}`, "-e", "POD_NAMESPACE=meshcni", "-e", "NODE_NAME=node-a",
      tag, "--health-port", String(port)]);
    expect(run.stderr).toBe("");
    expect(run.code).toBe(0);

    // Installed, seen from outside.
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 15_000, "the chain from the container");
    await until(async () => (await readyz(port).catch(() => ({ status: 0 }))).status === 200, 10_000, "/readyz 200");
    expect(Buffer.compare(readFileSync(join(dirs.bin, "meshcni")), readFileSync(PLUGIN))).toBe(0);
    const kubeconfig = readFileSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"), "utf8");
    expect(kubeconfig).toContain(`server: https://[::1]:${apiPort}`);
    expect(kubeconfig).toContain('token: "image-token"');
    const entry = JSON.parse(readFileSync(join(dirs.net, "10-calico.conflist"), "utf8")).plugins.at(-1);
    expect(entry.kubernetes.kubeconfig).toBe("/etc/cni/net.d/ZZZ-meshcni-kubeconfig");
    expect(entry.kubernetes.pod_namespace).toBe("meshcni");
    expect([entry.agent_socket, entry.state_dir]).toEqual(["/var/run/meshcni/agent.sock", "/var/run/meshcni"]);
    // The socket the container serves is there on the host, root only, and answers.
    const socket = join(dirs.state, "agent.sock");
    await until(() => statSync(socket, { throwIfNoEntry: false })?.isSocket() === true, 5000, "the agent's socket on the host");
    expect(statSync(socket).mode & 0o777).toBe(0o600);
    const answer = await fetch("http://localhost/v1/pods/Not_A_Name/x", { unix: socket } as RequestInit);
    expect(answer.status).toBe(400);

    // The primary CNI rewrites its config: chained again.
    const rewritten = CALICO.replace('"mtu": 0', '"mtu": 1450');
    dirs.writeHost("10-calico.conflist", rewritten);
    await until(() => isChainedIn(dirs, "10-calico.conflist") && readFileSync(join(dirs.net, "10-calico.conflist"), "utf8").includes('"mtu": 1450'), 5000, "the re-chain");
    dirs.projectToken("image-token-2");
    await until(() => readFileSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"), "utf8").includes("image-token-2"), 5000, "the rotated token");

    // podman stop sends SIGTERM: with its DaemonSet gone (the stand-in holds none) the
    // container undoes everything and exits 0.
    // Not spawnSync: the stand-in API server in this process must answer the agent meanwhile.
    const stop = Bun.spawn(["podman", "--root", join(scratch, "root"), "--runroot", join(scratch, "run"), "stop", "-t", "20", name], {
      env: { ...Bun.env, CONTAINERS_CONF: join(scratch, "containers.conf") }, stdout: "ignore", stderr: "inherit",
    });
    expect(await stop.exited).toBe(0);
    expect(podman(["inspect", "--format", "{{.State.ExitCode}}", name]).stdout.trim()).toBe("0");
    expect(dirs.names()).toEqual(["10-calico.conflist"]);
    expect(readFileSync(join(dirs.net, "10-calico.conflist"), "utf8")).toBe(rewritten);
    expect(Bun.spawnSync(["ls", dirs.bin]).stdout.toString()).toBe("");
    expect(readdirSync(dirs.state)).toEqual([]);
    const logs = podman(["logs", name]);
    expect(logs.stdout + logs.stderr).toContain("its DaemonSet meshcni/meshcni-node is gone (404); undoing the installation");
    expect(logs.stdout + logs.stderr).toContain("meshcni is uninstalled from this node");
    expect(logs.stdout + logs.stderr).not.toContain("image-token");
  }, 120_000);
});
