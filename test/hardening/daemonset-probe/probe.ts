// Run inside the DaemonSet's container (test/hardening/daemonset-podman.test.ts), by the Bun
// runtime copied into the test's image, with the container's own user, capabilities, seccomp
// filter and mounts: what this process can see and write. Self-contained (the image holds no
// project files). It changes nothing it finds: a file of its own is created with O_EXCL and
// removed at once; an existing file is only opened for writing, never written; a file that
// access(W_OK) says is writable is not even opened. Prints one JSON document.
import {
  accessSync,
  closeSync,
  constants,
  existsSync,
  openSync,
  readdirSync,
  readFileSync,
  statSync,
  unlinkSync,
} from "node:fs";

const input = JSON.parse(process.argv[2] ?? "{}") as { marker: string; statusPort: number; extraFiles: string[] };
const id = `.meshcni-probe-${process.pid}-${Date.now()}`;

const errCode = (e: unknown) => (e as NodeJS.ErrnoException).code ?? String(e);

type Attempt = { path: string; how: "create" | "open-for-write" | "access-w"; ok: boolean; error?: string };

/** Creates a file of its own in `dir` (removed again), or opens an existing file for writing. */
function tryWrite(path: string): Attempt {
  let st;
  try {
    st = statSync(path);
  } catch (e) {
    return { path, how: "create", ok: false, error: errCode(e) };
  }
  if (st.isDirectory()) {
    const file = `${path.replace(/\/$/, "")}/${id}`;
    try {
      closeSync(openSync(file, "wx", 0o600));
    } catch (e) {
      return { path, how: "create", ok: false, error: errCode(e) };
    }
    unlinkSync(file);
    return { path, how: "create", ok: true };
  }
  // A file that access(2) calls writable is not opened: it may be one whose opening acts.
  const access = tryAccess(path);
  if (access.ok) return access;
  try {
    closeSync(openSync(path, constants.O_WRONLY));
  } catch (e) {
    return { path, how: "open-for-write", ok: false, error: errCode(e) };
  }
  return { path, how: "open-for-write", ok: true };
}

function tryAccess(path: string): Attempt {
  try {
    accessSync(path, constants.W_OK);
    return { path, how: "access-w", ok: true };
  } catch (e) {
    return { path, how: "access-w", ok: false, error: errCode(e) };
  }
}

const mountinfo = readFileSync("/proc/self/mountinfo", "utf8");
const mountPoints = mountinfo
  .split("\n")
  .filter((l) => l)
  .map((l) => l.split(" ")[4]!.replace(/\\([0-7]{3})/g, (_, o) => String.fromCharCode(parseInt(o, 8))));
// Every mount point, files of the host's /proc and the host's /dev/shm (which a mount of the
// host's / would show), and each entry under /host/root.
const hostRootEntries = existsSync("/host/root") ? readdirSync("/host/root").map((n) => `/host/root/${n}`) : [];
const targets = [
  ...new Set([
    ...mountPoints,
    "/",
    "/opt/meshcni",
    "/etc",
    "/var",
    "/host",
    "/host/root",
    ...hostRootEntries,
    "/host/root/dev/shm",
    "/host/root/proc/sys/kernel",
    "/host/root/etc",
    "/host/root/usr/lib",
    "/proc/sys/kernel/core_pattern",
    "/host/root/proc/sys/kernel/core_pattern",
    "/proc/sysrq-trigger",
    ...input.extraFiles,
  ]),
];
const writes = targets
  .filter((t) => !t.startsWith("/proc/") || t.startsWith("/proc/sys") || t === "/proc/sysrq-trigger")
  .map(tryWrite);
const corePattern = ["/proc/sys/kernel/core_pattern", "/host/root/proc/sys/kernel/core_pattern"].map(tryAccess);

const list = (dir: string) => {
  try {
    return readdirSync(dir).sort();
  } catch (e) {
    return errCode(e);
  }
};
// The agent's /status on its health port (this network namespace's loopback); it may still be
// starting.
let status: unknown = { error: "no answer" };
for (let i = 0; i < 100; i++) {
  try {
    status = await (
      await fetch(`http://127.0.0.1:${input.statusPort}/status`, { signal: AbortSignal.timeout(2000) })
    ).json();
    break;
  } catch (e) {
    status = { error: String(e) };
    await Bun.sleep(100);
  }
}
const procStatus = readFileSync("/proc/self/status", "utf8");
const field = (name: string) => new RegExp(`^${name}:\\s*(.*)$`, "m").exec(procStatus)?.[1]?.trim();

console.log(
  JSON.stringify({
    uid: process.getuid?.(),
    seccomp: field("Seccomp"),
    noNewPrivs: field("NoNewPrivs"),
    capEff: field("CapEff"),
    capBnd: field("CapBnd"),
    mountinfo,
    writes,
    corePattern,
    marker: {
      ownShm: existsSync(`/dev/shm/${input.marker}`),
      hostRootShm: existsSync(`/host/root/dev/shm/${input.marker}`),
    },
    hostRoot: list("/host/root"),
    hostRootEtc: list("/host/root/etc"),
    status,
  }),
);
