// The DaemonSet as rendered (buildManifests with the chart's default values), run by podman with
// runc: the rendered command, environment, security context (uid 0, every capability dropped,
// no privilege escalation, read-only root, the runtime's default seccomp profile) and each
// rendered volume and mount, translated field by field (test/support/daemonset-podman.ts), in
// an image laid out as `bun run image` lays it (the node binary, its link, the loader and
// libraries the host check lists) plus a probe run by Bun (daemonset-probe/probe.ts).
//
// Inside, the agent checks the host (this machine) through its mounts, and the probe shows that
// nothing outside the CNI folders, the agent's folder and the container's own files can be
// written: not the host's /dev/shm (a marker planted there is neither seen nor joined), not
// /proc/sys (kernel/core_pattern: access(W_OK) and an open for writing fail), not the mounted
// host paths, not the root file system. Every writable mount in /proc/self/mountinfo is traced
// to where it comes from on this machine and must be one of those.
//
// The read-write hostPaths (the CNI folders, the agent's folder) are fresh folders here, so the
// agent never writes this machine's own; the read-only ones are this machine's paths.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { checkBinaryOnHost } from "../../internal/agent/install/io/host-root.ts";
import { NSFS_MAGIC } from "../../internal/agent/socket/netns.ts";
import { buildManifests } from "../../internal/cli/manifests/objects.ts";
import { parseValues } from "../../internal/cli/manifests/values.ts";
import { ensureBuilt, PLUGIN } from "../agent/harness.ts";
import {
  hostPathOf,
  isWritable,
  type MountInfo,
  parseMountInfo,
  type TranslatedPod,
  translatePod,
} from "../support/daemonset-podman.ts";
import { repoPath } from "../support/golden.ts";
import { isRoot, Netns, uniq } from "../support/netns.ts";

type Obj = Record<string, any>;
const ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"];
const BUN = realpathSync(repoPath("node_modules/.bin/bun"));
/** The container's own folders and files, as a CRI runtime (here podman) gives every container. */
const OWN = [
  "/dev",
  "/dev/shm",
  "/dev/mqueue",
  "/dev/pts",
  "/etc/hosts",
  "/etc/hostname",
  "/etc/resolv.conf",
  "/run/.containerenv",
];
const canRun = isRoot() && Bun.which("podman") !== null && Bun.which("runc") !== null;

interface Probe {
  uid: number;
  seccomp: string;
  noNewPrivs: string;
  capEff: string;
  capBnd: string;
  mountinfo: string;
  writes: { path: string; how: string; ok: boolean; error?: string }[];
  corePattern: { path: string; ok: boolean; error?: string }[];
  marker: { ownShm: boolean; hostRootShm: boolean };
  hostRoot: string[] | string;
  hostRootEtc: string[] | string;
  status: Obj;
}

describe.skipIf(!canRun)(
  "the rendered DaemonSet in podman: the host check through its mounts, and nothing else writable",
  () => {
    let scratch: string;
    let pod: TranslatedPod;
    let ds: Obj;
    let probe: Probe;
    let logs = "";
    const name = `meshcni-ds-${uniq()}`;
    const marker = `meshcni-marker-${uniq()}`;
    const statusPort = 9813;

    const podman = async (args: string[]) => {
      const p = Bun.spawn(["podman", "--root", join(scratch, "storage"), "--runroot", join(scratch, "run"), ...args], {
        env: { ...Bun.env, CONTAINERS_CONF: join(scratch, "containers.conf") },
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

    /** The image's files, as scripts/image.ts stages them, from this machine's loader and libraries; and the probe. */
    function stageRootfs(root: string): void {
      mkdirSync(join(root, "opt/meshcni"), { recursive: true });
      copyFileSync(PLUGIN, join(root, "opt/meshcni/meshcni"));
      symlinkSync("meshcni", join(root, "opt/meshcni/meshcni-installer"));
      const verdict = checkBinaryOnHost("/", PLUGIN);
      if (verdict.ok !== true) throw new Error(`this machine cannot run ${PLUGIN}: ${JSON.stringify(verdict)}`);
      for (const f of verdict.files) {
        mkdirSync(join(root, dirname(f.path)), { recursive: true });
        copyFileSync(f.real, join(root, f.path));
      }
      // Bun itself loads the same loader and libraries as the node binary.
      mkdirSync(join(root, "opt/probe"), { recursive: true });
      copyFileSync(BUN, join(root, "opt/probe/bun"));
      copyFileSync(join(import.meta.dir, "daemonset-probe/probe.ts"), join(root, "opt/probe/probe.ts"));
    }

    beforeAll(async () => {
      ensureBuilt();
      scratch = mkdtempSync(join(tmpdir(), "meshcni-ds-podman-"));
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
      mkdirSync(join(scratch, "net.d"));
      const rootfs = join(scratch, "rootfs");
      stageRootfs(rootfs);

      const objects = buildManifests(parseValues({}));
      ds = objects.find((o) => o.kind === "DaemonSet")!;
      const configMaps = Object.fromEntries(
        objects.filter((o) => o.kind === "ConfigMap").map((o) => [o.metadata.name, o]),
      );
      pod = translatePod(ds, {
        scratch,
        namespace: ds.metadata.namespace,
        nodeName: "node-a",
        configMaps,
        serviceAccount: {
          token: "probe-token",
          "ca.crt": readFileSync(repoPath("testdata/installer/ca.crt"), "utf8"),
          namespace: ds.metadata.namespace,
        },
        // Nothing answers there: the API server is not what this test is about.
        extraEnv: { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: "1" },
      });
      for (const n of pod.notes) console.log(`podman translation: ${n}`);

      writeFileSync(`/dev/shm/${marker}`, "planted by the host\n");
      const run = await podman([
        "run",
        "-d",
        "--name",
        name,
        ...ULIMITS,
        ...pod.options,
        "--rootfs",
        rootfs,
        ...pod.command,
      ]);
      if (run.code !== 0) throw new Error(`podman run: ${run.stderr}`);
      // The agent's host check comes first in its start-up; /status answers once it listens.
      for (let i = 0; i < 200; i++) {
        const l = await podman(["logs", name]);
        logs = l.stdout + l.stderr;
        if (/the host's C library|host check skipped|cannot run the plugin/.test(logs)) break;
        await Bun.sleep(100);
      }
      const extraFiles = pod.mounts.filter((m) => m.kind === "hostPath").map((m) => m.path);
      const exec = await podman([
        "exec",
        "--env",
        "HOME=/tmp",
        "--env",
        "BUN_RUNTIME_TRANSPILER_CACHE_PATH=0",
        name,
        "/opt/probe/bun",
        "/opt/probe/probe.ts",
        JSON.stringify({ marker, statusPort, extraFiles }),
      ]);
      if (exec.code !== 0) throw new Error(`the probe failed (${exec.code}): ${exec.stderr}`);
      probe = JSON.parse(exec.stdout);
      const l = await podman(["logs", name]);
      logs = l.stdout + l.stderr;
    }, 120_000);

    afterAll(async () => {
      rmSync(`/dev/shm/${marker}`, { force: true });
      if (!scratch) return;
      await podman(["rm", "-f", "-t", "0", name]);
      const mounts = readFileSync("/proc/self/mounts", "utf8")
        .split("\n")
        .map((l) => l.split(" ")[1] ?? "")
        .filter((m) => m.startsWith(scratch))
        .sort((a, b) => b.length - a.length);
      for (const m of mounts) Bun.spawnSync(["umount", "-l", m]);
      rmSync(scratch, { recursive: true, force: true });
    });

    test("the container runs with exactly the rendered security context", () => {
      expect(probe.uid).toBe(0);
      // CAP_NET_ADMIN (12) and CAP_SYS_ADMIN (21) alone: what the agent applies rules with.
      expect(probe.capEff).toBe("0000000000201000");
      expect(probe.capBnd).toBe("0000000000201000");
      expect(probe.noNewPrivs).toBe("1");
      // RuntimeDefault: podman's default profile, a seccomp filter (mode 2).
      expect(probe.seccomp).toBe("2");
      const root = parseMountInfo(probe.mountinfo).find((m) => m.mountPoint === "/")!;
      expect(root.options).toContain("ro");
    });

    test("the DaemonSet mounts no hostPath of / and nothing of the host's /etc, /var or /proc but the loader's cache", () => {
      const hostPaths = (ds.spec.template.spec.volumes as Obj[])
        .filter((v) => v.hostPath)
        .map((v) => v.hostPath.path as string);
      expect(hostPaths).not.toContain("/");
      for (const p of hostPaths) {
        const ok =
          p === "/etc/ld.so.cache" ||
          !/^\/(etc|var|proc)(\/|$)/.test(p) ||
          p.startsWith("/etc/cni/") ||
          p.startsWith("/var/run/meshcni") ||
          p === "/var/run/netns";
        expect({ p, ok }).toEqual({ p, ok: true });
      }
    });

    test("the host check ran through the mounts: it says what C library the host has, or why it was skipped", () => {
      expect(logs).toMatch(/the host's C library: glibc \(\/lib64\/ld-linux-x86-64\.so\.2\)\. |host check skipped: /);
      expect(logs).not.toContain("cannot run the plugin");
      const hostCheck = probe.status.binary?.hostCheck as string | undefined;
      console.log(`/status binary.hostCheck: ${hostCheck}`);
      expect(hostCheck).toMatch(/^(the host's C library: glibc .*The plugin loads none of it|host check skipped: )/);
    });

    test("the host's /dev/shm: a marker planted there is not seen, and nothing written reaches it", () => {
      expect(probe.marker).toEqual({ ownShm: false, hostRootShm: false });
      const shm = probe.writes.find((w) => w.path === "/host/root/dev/shm")!;
      expect(shm.ok).toBe(false);
      // The container's own /dev/shm is writable, and private.
      expect(probe.writes.find((w) => w.path === "/dev/shm")!.ok).toBe(true);
      expect(readFileSync(`/dev/shm/${marker}`, "utf8")).toBe("planted by the host\n");
    });

    test("/proc/sys: kernel/core_pattern is not writable (access(W_OK) and an open for writing fail)", () => {
      for (const c of probe.corePattern) expect({ path: c.path, ok: c.ok }).toEqual({ path: c.path, ok: false });
      const own = probe.writes.find((w) => w.path === "/proc/sys/kernel/core_pattern")!;
      expect(own).toMatchObject({ how: "open-for-write", ok: false });
      expect(probe.writes.find((w) => w.path === "/proc/sys")!.ok).toBe(false);
    });

    test("the mounted host paths, the root file system and every other path outside the CNI and agent folders refuse writes", () => {
      const allowed = pod.mounts.filter((m) => !m.readOnly).map((m) => m.path);
      const wrote = probe.writes.filter((w) => w.ok).map((w) => w.path);
      // Each write that succeeded is in a read-write volume or one of the container's own files.
      expect(wrote.filter((p) => !allowed.some((a) => p === a || p.startsWith(`${a}/`)) && !OWN.includes(p))).toEqual(
        [],
      );
      for (const m of pod.mounts.filter((m) => m.readOnly)) {
        expect({ path: m.path, ok: probe.writes.find((w) => w.path === m.path)?.ok }).toEqual({
          path: m.path,
          ok: false,
        });
      }
      for (const p of ["/", "/opt/meshcni", "/etc", "/host", "/host/root"]) {
        expect({ p, ok: probe.writes.find((w) => w.path === p)?.ok }).toEqual({ p, ok: false });
      }
    });

    test("every writable mount is a CNI folder, the agent's folder, or the container's own", () => {
      const host = parseMountInfo(readFileSync("/proc/self/mountinfo", "utf8"));
      const mine = parseMountInfo(probe.mountinfo);
      const rw = pod.mounts.filter((m) => !m.readOnly);
      // Podman's files for this container (its /dev/shm, /etc/hosts...) live in its storage.
      const podmanOwn = [join(scratch, "storage"), join(scratch, "run")];
      const judged = mine.filter(isWritable).map((m: MountInfo) => {
        const from = hostPathOf(m, host);
        const volume = rw.find((v) => from === v.source || from.startsWith(`${v.source}/`));
        const what = volume
          ? `volume ${volume.volume} (${volume.kind}${volume.hostPath ? ` ${volume.hostPath}` : ""})`
          : from === "private"
            ? `the container's own ${m.fsType}`
            : // A network namespace's file (under a read-only /var/run/netns): nsfs has no writes.
              m.fsType === "nsfs"
              ? "a namespace file (nsfs: nothing to write)"
              : OWN.includes(m.mountPoint) && podmanOwn.some((d) => from.startsWith(`${d}/`))
                ? "a file podman keeps for this container"
                : `THE HOST'S ${from}`;
        return { mountPoint: m.mountPoint, what };
      });
      console.log(judged.map((j) => `writable: ${j.mountPoint}: ${j.what}`).join("\n"));
      expect(judged.filter((j) => j.what.startsWith("THE HOST'S"))).toEqual([]);
      // The read-write volumes are the CNI folders, the agent's folder and the emptyDir /tmp.
      expect(rw.map((m) => `${m.kind} ${m.hostPath ?? ""} at ${m.path}`).sort()).toEqual([
        "emptyDir  at /tmp",
        "hostPath /etc/cni/net.d at /host/etc/cni/net.d",
        "hostPath /opt/cni/bin at /host/opt/cni/bin",
        "hostPath /var/run/meshcni at /var/run/meshcni",
      ]);
    });

    test("a network namespace made after the agent started shows in its read-only /var/run/netns (HostToContainer)", async () => {
      const ns = Netns.create(`mcds-${uniq()}`);
      try {
        const look = `const fs = require("node:fs"); const p = ${JSON.stringify(ns.path)};
        const st = fs.lstatSync(p); console.log(JSON.stringify({ file: st.isFile(), fsType: fs.statfsSync(p).type }));`;
        const seen = await podman(["exec", "--env", "HOME=/tmp", name, "/opt/probe/bun", "-e", look]);
        expect(seen.stderr).toBe("");
        // An nsfs file, as the agent's check (internal/agent/socket/netns.ts) requires.
        expect(JSON.parse(seen.stdout)).toEqual({ file: true, fsType: NSFS_MAGIC });
        expect(pod.mounts.find((m) => m.path === "/var/run/netns")).toMatchObject({
          readOnly: true,
          hostPath: "/var/run/netns",
        });
      } finally {
        ns.delete();
      }
    });

    test("what the container sees of the host's root is what the host check reads", () => {
      expect(probe.hostRoot).toEqual(["etc", "lib", "lib64", "usr"]);
      expect(probe.hostRootEtc).toEqual(["ld.so.cache"]);
      expect(existsSync(`/dev/shm/${marker}`)).toBe(true);
    });
  },
);
