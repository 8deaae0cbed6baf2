// Real network namespaces for tests: create and delete them, run commands inside (optionally as
// another user), start tagged TCP listeners, and connect from inside or outside. Needs root.
import { repoPath } from "./golden.ts";

export const BUN = repoPath("node_modules/.bin/bun");

export function sh(argv: string[], opts: { stdin?: string; env?: Record<string, string | undefined> } = {}) {
  const r = Bun.spawnSync(argv, {
    stdin: opts.stdin !== undefined ? new TextEncoder().encode(opts.stdin) : "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: opts.env ?? Bun.env,
  });
  return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

export function must(argv: string[], opts: { stdin?: string } = {}): string {
  const r = sh(argv, opts);
  if (r.code !== 0) throw new Error(`${argv.join(" ")} failed (${r.code}): ${r.stderr || r.stdout}`);
  return r.stdout;
}

export function isRoot(): boolean {
  return process.getuid?.() === 0;
}

/** A unique short suffix for names (netns, bridges, pods) so parallel runs never collide. */
export function uniq(): string {
  return `${process.pid.toString(36)}${Math.floor(Math.random() * 1e6).toString(36)}`.slice(-8);
}

export class Netns {
  readonly path: string;
  constructor(readonly name: string) {
    this.path = `/var/run/netns/${name}`;
  }

  static create(name: string): Netns {
    must(["ip", "netns", "add", name]);
    must(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"]);
    return new Netns(name);
  }

  exec(argv: string[], opts: { uid?: number; stdin?: string } = {}) {
    const prefix = ["ip", "netns", "exec", this.name];
    const asUser =
      opts.uid !== undefined ? ["setpriv", `--reuid=${opts.uid}`, `--regid=${opts.uid}`, "--clear-groups", "--"] : [];
    return sh([...prefix, ...asUser, ...argv], opts.stdin !== undefined ? { stdin: opts.stdin } : {});
  }

  /** iptables-save (or ip6tables-save) text of this namespace for a backend. */
  save(backend: "legacy" | "nft", family: 4 | 6 = 4, table?: string): string {
    const bin = `${family === 6 ? "ip6tables" : "iptables"}-${backend}-save`;
    const r = this.exec(table ? [bin, "-t", table] : [bin]);
    if (r.code !== 0) throw new Error(`${bin}: ${r.stderr}`);
    return r.stdout;
  }

  delete(): void {
    sh(["ip", "netns", "del", this.name]);
  }
}

export interface Listener {
  stop(): void;
}

/** Starts a tag server inside `netns` (or in the host namespace when undefined). */
export async function listen(netns: Netns | undefined, ports: Record<number, string>): Promise<Listener> {
  const args = Object.entries(ports).map(([port, tag]) => `${tag}@${port}`);
  const argv = [
    ...(netns ? ["ip", "netns", "exec", netns.name] : []),
    BUN,
    repoPath("test/support/tag-server.ts"),
    ...args,
  ];
  const proc = Bun.spawn(argv, { stdout: "pipe", stderr: "pipe" });
  const reader = proc.stdout.getReader();
  const { value } = await Promise.race([reader.read(), Bun.sleep(10000).then(() => ({ value: undefined }))]);
  if (!value || !new TextDecoder().decode(value).includes("ready")) {
    proc.kill();
    throw new Error(`tag server did not start: ${await new Response(proc.stderr).text()}`);
  }
  reader.releaseLock();
  return { stop: () => proc.kill("SIGKILL") };
}

/**
 * Connects to host:port from inside `netns` (or from the host namespace) and returns what the
 * server said, trimmed; "" when the connection failed or nobody answered.
 */
export function probe(netns: Netns | undefined, host: string, port: number, opts: { uid?: number } = {}): string {
  const nc = ["busybox", "nc", "-w", "3", host, String(port)];
  const r = netns ? netns.exec(nc, opts) : sh(nc);
  return r.stdout.trim();
}
