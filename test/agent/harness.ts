// Running the compiled dist/meshcni-installer against temporary host folders: a net dir, a bin
// dir, the agent's state folder and a service account folder laid out the way kubelet projects
// it (timestamped folder, `..data` symlink, `token` and `ca.crt` links), with token rotation
// done kubelet's way; and a stand-in cluster (test/support/apiserver.ts) that says whether the
// agent's DaemonSet, its namespace and its node are there, which decides what SIGTERM does.
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { repoPath } from "../support/golden.ts";

export const INSTALLER = repoPath("dist/meshcni-installer");
export const PLUGIN = repoPath("dist/meshcni");
const BUN = repoPath("node_modules/.bin/bun");

/** Builds dist/meshcni and dist/meshcni-installer when missing or older than the agent's sources. */
export function ensureBuilt(): void {
  const newest = (dir: string): number =>
    readdirSync(repoPath(dir), { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile() && e.name.endsWith(".ts"))
      .reduce((m, e) => Math.max(m, statSync(join(e.parentPath, e.name)).mtimeMs), 0);
  const sources = Math.max(
    newest("internal"),
    statSync(repoPath("internal/agent/run.ts")).mtimeMs,
    statSync(repoPath("cmd/plugin.ts")).mtimeMs,
  );
  const stale = [INSTALLER, PLUGIN].some((f) => !existsSync(f) || statSync(f).mtimeMs < sources);
  if (!stale) return;
  const r = Bun.spawnSync([BUN, "scripts/build.ts", "meshcni", "meshcni-installer"], {
    cwd: repoPath(),
    stdout: "pipe",
    stderr: "pipe",
  });
  if (r.exitCode !== 0) throw new Error(`build failed: ${r.stderr.toString()}`);
}

export class HostDirs {
  readonly root: string;
  readonly net: string;
  readonly bin: string;
  readonly sa: string;
  /** The agent's --state-dir (created by the agent, 0700); its socket is `socket`. */
  readonly state: string;
  readonly socket: string;
  private generation = 0;

  /** `caPem` defaults to a fixed test CA (the agent only embeds it). */
  constructor(
    token = "token-one",
    private readonly caPem = readFileSync(repoPath("testdata/installer/ca.crt"), "utf8"),
  ) {
    this.root = mkdtempSync(join(tmpdir(), "meshcni-inst-"));
    this.net = join(this.root, "net.d");
    this.bin = join(this.root, "bin");
    this.sa = join(this.root, "serviceaccount");
    this.state = join(this.root, "run", "meshcni");
    this.socket = join(this.state, "agent.sock");
    for (const d of [this.net, this.bin, this.sa]) mkdirSync(d);
    this.projectToken(token);
    symlinkSync("..data/token", join(this.sa, "token"));
    symlinkSync("..data/ca.crt", join(this.sa, "ca.crt"));
  }

  /**
   * Writes a new timestamped folder and swaps `..data` to it with a rename, as kubelet does (a new
   * CA bundle too, if given).
   */
  projectToken(token: string, caPem = this.caPem): void {
    const old = existsSync(join(this.sa, "..data")) ? readdirSync(this.sa).filter((n) => n.startsWith("..20")) : [];
    const dir = `..2026_01_01_00_00_${String(this.generation++).padStart(2, "0")}.000000001`;
    mkdirSync(join(this.sa, dir));
    writeFileSync(join(this.sa, dir, "token"), token);
    writeFileSync(join(this.sa, dir, "ca.crt"), caPem);
    writeFileSync(join(this.sa, dir, "namespace"), "meshcni");
    symlinkSync(dir, join(this.sa, "..data_tmp"));
    renameSync(join(this.sa, "..data_tmp"), join(this.sa, "..data"));
    for (const d of old) rmSync(join(this.sa, d), { recursive: true });
  }

  file(name: string): string | undefined {
    try {
      return readFileSync(join(this.net, name), "utf8");
    } catch {
      return undefined;
    }
  }

  /** Writes a host file the way a careful CNI agent does: temp file, then rename. */
  writeHost(name: string, content: string): void {
    const tmp = join(this.net, `.${name}.host-tmp`); // an extension no runtime reads
    writeFileSync(tmp, content);
    renameSync(tmp, join(this.net, name));
  }

  names(): string[] {
    return readdirSync(this.net).sort();
  }

  cleanup(): void {
    rmSync(this.root, { recursive: true, force: true });
  }
}

export interface InstallerProcess {
  proc: Bun.Subprocess<"ignore", "pipe", "pipe">;
  /** Everything logged so far, stdout and stderr interleaved by arrival. */
  log(): string;
  waitForLog(pattern: RegExp, timeoutMs?: number): Promise<string>;
  stop(signal?: NodeJS.Signals): Promise<number>;
}

export function installerArgs(dirs: HostDirs, extra: string[] = []): string[] {
  return [
    "--host-net-dir",
    dirs.net,
    "--host-bin-dir",
    dirs.bin,
    // No container here: the host sees the bin folder where the agent does, and the installed
    // plugin names its loader there.
    "--dest-bin-dir",
    dirs.bin,
    "--service-account-dir",
    dirs.sa,
    "--state-dir",
    dirs.state,
    "--agent-socket",
    dirs.socket,
    ...extra,
  ];
}

/**
 * Without a stand-in cluster the API server is a closed local port: nothing answers, so SIGTERM
 * leaves everything in place (after trying for a while). Tests that stop the agent use a cluster.
 */
export const INSTALLER_ENV: Record<string, string> = {
  KUBERNETES_SERVICE_HOST: "127.0.0.1",
  KUBERNETES_SERVICE_PORT: "9",
  POD_NAMESPACE: "meshcni",
  NODE_NAME: "node-a",
};

export const DAEMONSET_PATH = "/apis/apps/v1/namespaces/meshcni/daemonsets/meshcni-node";
export const NAMESPACE_PATH = "/api/v1/namespaces/meshcni";
export const NODE_PATH = "/api/v1/nodes/node-a";

/** The agent's DaemonSet as the API server holds it. */
export function daemonSet(
  extra: { deletionTimestamp?: string; nodeSelector?: Record<string, string>; tolerations?: unknown[] } = {},
): Record<string, unknown> {
  return {
    apiVersion: "apps/v1",
    kind: "DaemonSet",
    metadata: {
      name: "meshcni-node",
      namespace: "meshcni",
      uid: "5d1c2f6e-0000-4000-8000-00000000d5e7",
      ...(extra.deletionTimestamp ? { deletionTimestamp: extra.deletionTimestamp } : {}),
    },
    spec: {
      selector: { matchLabels: { "app.kubernetes.io/name": "meshcni" } },
      template: {
        metadata: { labels: { "app.kubernetes.io/name": "meshcni" } },
        spec: {
          nodeSelector: extra.nodeSelector ?? { "kubernetes.io/os": "linux" },
          tolerations: extra.tolerations ?? [{ operator: "Exists" }],
          containers: [{ name: "install-cni", image: "ghcr.io/meshcni/meshcni:test" }],
        },
      },
    },
  };
}

/**
 * A stand-in API server for the agent: it accepts any token (rotation does not lock the agent
 * out) and holds the namespace and the node; the DaemonSet is absent unless a test adds it, so
 * SIGTERM undoes everything, as when meshcni is removed from the cluster.
 */
export interface Cluster {
  api: ApiServer;
  /** KUBERNETES_SERVICE_HOST/PORT for the agent, with POD_NAMESPACE and NODE_NAME. */
  env: Record<string, string>;
  caPem: string;
  /** Host folders whose service account trusts this server. */
  dirs(token?: string): HostDirs;
  /** The DaemonSet's state: there, being deleted, or gone. */
  setDaemonSet(state: "present" | "deleting" | "absent"): void;
  close(): Promise<void>;
}

/** `host`: where the API server listens (127.0.0.1, or ::1 for an IPv6 service address). */
export async function startCluster(opts: { host?: string } = {}): Promise<Cluster> {
  const host = opts.host ?? "127.0.0.1";
  const api = await startApiServer({ host });
  api.addNamespace({ metadata: { name: "meshcni" } });
  api.objects.set(NODE_PATH, {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: "node-a", labels: { "kubernetes.io/os": "linux", "kubernetes.io/hostname": "node-a" } },
    spec: {},
  });
  return {
    api,
    env: { ...INSTALLER_ENV, KUBERNETES_SERVICE_HOST: host, KUBERNETES_SERVICE_PORT: new URL(api.url).port },
    caPem: api.caPem,
    dirs: (token = "token-one") => new HostDirs(token, api.caPem),
    setDaemonSet(state) {
      if (state === "absent") api.objects.delete(DAEMONSET_PATH);
      else
        api.objects.set(
          DAEMONSET_PATH,
          daemonSet(state === "deleting" ? { deletionTimestamp: "2026-01-01T00:00:00Z" } : {}),
        );
    },
    close: () => api.close(),
  };
}

export function startInstaller(
  dirs: HostDirs,
  extra: string[] = [],
  env: Record<string, string> = {},
): InstallerProcess {
  const proc = Bun.spawn([INSTALLER, ...installerArgs(dirs, extra)], {
    env: { PATH: Bun.env.PATH ?? "/usr/bin:/bin", ...INSTALLER_ENV, ...env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  let text = "";
  const pump = async (stream: ReadableStream<Uint8Array>) => {
    const decoder = new TextDecoder();
    for await (const chunk of stream) text += decoder.decode(chunk, { stream: true });
  };
  const pumps = Promise.all([pump(proc.stdout), pump(proc.stderr)]);
  return {
    proc,
    log: () => text,
    async waitForLog(pattern, timeoutMs = 10_000) {
      const deadline = performance.now() + timeoutMs;
      while (performance.now() < deadline) {
        const m = pattern.exec(text);
        if (m) return m[0];
        if (proc.exitCode !== null) break;
        await Bun.sleep(5);
      }
      throw new Error(`installer log never matched ${pattern} (exit ${proc.exitCode}):\n${text}`);
    },
    async stop(signal = "SIGTERM") {
      if (proc.exitCode === null) proc.kill(signal);
      const code = await proc.exited;
      await pumps;
      return code;
    },
  };
}

/** Polls `fn` (which may return a promise) every few ms until it gives something other than undefined/false. */
export async function until<T>(
  fn: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 5000,
  what = "condition",
): Promise<T> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(2);
  }
}

/** The chained list's plugin types, or undefined while the file is absent or not JSON. */
export function pluginTypes(dirs: HostDirs, name: string): string[] | undefined {
  const t = dirs.file(name);
  if (t === undefined) return undefined;
  try {
    return (JSON.parse(t).plugins as { type: string }[]).map((p) => p.type);
  } catch {
    return undefined;
  }
}

export const isChainedIn = (dirs: HostDirs, name: string) =>
  pluginTypes(dirs, name)?.at(-1) === "meshcni" && pluginTypes(dirs, name)!.filter((t) => t === "meshcni").length === 1;

export async function readyz(port: number): Promise<{ status: number; body: string }> {
  const r = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: r.status, body: await r.text() };
}

let nextPort = 18_000 + (process.pid % 2000);
export const freePort = () => nextPort++;
