// Podman with its CNI backend as a real container runtime for the plugin: a private net dir and
// storage (nothing under /etc/cni or /var/lib/containers is touched), a static-busybox rootfs
// instead of an image, runc. Podman reads each conflist of the net dir as a network named by
// its "name", and passes CNI_ARGS from its own environment on to every plugin.
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync, copyFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { repoPath } from "./golden.ts";
import { sh } from "./netns.ts";

const BUSYBOX_APPLETS = ["sh", "ip", "nc", "sleep", "cat", "ls", "echo", "id", "wget", "kill"];
/** runc cannot raise rlimits on this kind of machine; podman must ask for these. */
const ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"];

export class PodmanLab {
  readonly dir: string;
  readonly netDir: string;
  readonly rootfs: string;
  private readonly conf: string;
  private readonly containers = new Set<string>();
  private readonly bridges = new Set<string>();

  constructor(opts: { pluginDirs?: string[]; netDir?: string } = {}) {
    this.dir = mkdtempSync(join(tmpdir(), "meshcni-podman-"));
    this.netDir = opts.netDir ?? join(this.dir, "net.d");
    this.rootfs = join(this.dir, "rootfs");
    mkdirSync(this.netDir, { recursive: true });
    for (const d of ["bin", "proc", "sys", "dev", "etc", "tmp"]) mkdirSync(join(this.rootfs, d), { recursive: true });
    copyFileSync("/bin/busybox", join(this.rootfs, "bin/busybox"));
    for (const a of BUSYBOX_APPLETS) symlinkSync("busybox", join(this.rootfs, "bin", a));
    writeFileSync(join(this.rootfs, "etc/passwd"), "root:x:0:0:root:/:/bin/sh\nproxy:x:2102:2102:proxy:/:/bin/sh\n");
    writeFileSync(join(this.rootfs, "etc/group"), "root:x:0:\nproxy:x:2102:\n");
    this.conf = join(this.dir, "containers.conf");
    const dirs = opts.pluginDirs ?? ["/usr/lib/cni", repoPath("dist")];
    writeFileSync(
      this.conf,
      [
        "[network]",
        'network_backend = "cni"',
        `cni_plugin_dirs = [${dirs.map((d) => JSON.stringify(d)).join(", ")}]`,
        `network_config_dir = ${JSON.stringify(this.netDir)}`,
        "[engine]",
        'runtime = "runc"',
        'cgroup_manager = "cgroupfs"',
        'events_logger = "file"',
        "",
      ].join("\n"),
    );
  }

  /**
   * podman with this lab's config and private storage. Asynchronous, so that a stand-in API
   * server in the test's own process can answer the plugin meanwhile.
   */
  async podman(args: string[], env: Record<string, string> = {}) {
    const proc = Bun.spawn(
      ["podman", "--root", join(this.dir, "storage"), "--runroot", join(this.dir, "run"), ...args],
      {
        env: { ...Bun.env, CONTAINERS_CONF: this.conf, ...env },
        stdout: "pipe",
        stderr: "pipe",
      },
    );
    const [stdout, stderr, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ]);
    return { code, stdout, stderr };
  }

  /** Writes a network (a conflist) into the lab's net dir. */
  writeNetwork(file: string, conflist: Record<string, unknown>, bridge?: string): string {
    writeFileSync(join(this.netDir, file), JSON.stringify(conflist, null, 2));
    if (bridge) this.bridges.add(bridge);
    return join(this.netDir, file);
  }

  /**
   * Starts a detached container on `network` running `script` (busybox sh). `cniArgs` reaches the
   * plugins as extra CNI_ARGS, e.g. "K8S_POD_NAMESPACE=emojivoto": podman adds K8S_POD_NAME itself.
   * Returns the container's IPv4 address.
   */
  async run(name: string, network: string, script: string, cniArgs?: string): Promise<string> {
    const r = await this.podman(
      ["run", "-d", "--name", name, "--network", network, ...ULIMITS, "--rootfs", this.rootfs, "/bin/sh", "-c", script],
      cniArgs ? { CNI_ARGS: cniArgs } : {},
    );
    if (r.code !== 0) throw new Error(`podman run ${name} failed: ${r.stderr.trim()}`);
    this.containers.add(name);
    const ip = (
      await this.podman([
        "inspect",
        "-f",
        `{{(index .NetworkSettings.Networks ${JSON.stringify(network)}).IPAddress}}`,
        name,
      ])
    ).stdout.trim();
    if (!ip) throw new Error(`no IP for ${name}: ${(await this.podman(["inspect", name])).stdout}`);
    return ip;
  }

  /** `podman run` that is expected to fail; returns podman's error text. */
  async runFailing(name: string, network: string, cniArgs?: string): Promise<string> {
    const r = await this.podman(
      ["run", "-d", "--name", name, "--network", network, ...ULIMITS, "--rootfs", this.rootfs, "/bin/sleep", "60"],
      cniArgs ? { CNI_ARGS: cniArgs } : {},
    );
    this.containers.add(name);
    if (r.code === 0) throw new Error(`podman run ${name} unexpectedly succeeded`);
    return r.stderr;
  }

  exec(name: string, argv: string[], user?: string) {
    return this.podman(["exec", ...(user ? ["--user", user] : []), name, ...argv]);
  }

  /** Waits until a TCP port answers inside the container (its listeners start asynchronously). */
  async waitListening(name: string, port: number): Promise<void> {
    for (let i = 0; i < 50; i++) {
      const r = await this.exec(name, ["nc", "-w", "1", "127.0.0.1", String(port)]);
      if (r.code === 0 && r.stdout.trim()) return;
      await Bun.sleep(100);
    }
    throw new Error(`${name}: nothing listens on ${port}`);
  }

  async rm(name: string): Promise<void> {
    await this.podman(["rm", "-f", "-t", "0", name]);
    this.containers.delete(name);
  }

  async close(): Promise<void> {
    for (const c of [...this.containers]) await this.rm(c);
    for (const b of this.bridges) sh(["ip", "link", "del", b]);
    sh(["umount", "-R", join(this.dir, "storage")]);
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** A busybox script that answers on each port with its tag, then keeps the container alive. */
export function tagScript(ports: Record<number, string>): string {
  const servers = Object.entries(ports).map(([port, tag]) => `nc -ll -p ${port} -e echo ${tag} port=${port} &`);
  return `${servers.join(" ")} exec sleep 3600`;
}
