// A container runtime's CNI side, as the spec describes it (and libcni does it): run a conflist's
// plugins in order for ADD with each result passed on as prevResult, cache the final result,
// and run CHECK in order and DEL in reverse with the cached result. Tests drive the real compiled
// plugins with it, and `npm run demo` wires its pod with it.
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";

export interface Conflist {
  cniVersion: string;
  name: string;
  plugins: Record<string, unknown>[];
  [k: string]: unknown;
}

export interface Attachment {
  containerId: string;
  netns: string;
  ifname?: string;
  cniArgs?: string;
}

export interface PluginRun {
  type: string;
  code: number;
  stdout: string;
  stderr: string;
  ms: number;
}

export class CniRuntime {
  readonly runs: PluginRun[] = [];
  constructor(
    readonly conflist: Conflist,
    readonly cniPath: string[],
    readonly cacheDir: string,
    readonly extraEnv: Record<string, string> = {},
  ) {
    mkdirSync(cacheDir, { recursive: true });
  }

  private cacheFile(a: Attachment): string {
    return `${this.cacheDir}/${this.conflist.name}-${a.containerId}-${a.ifname ?? "eth0"}`;
  }

  private find(type: string): string {
    for (const dir of this.cniPath) {
      const p = `${dir}/${type}`;
      if (Bun.file(p).size > 0) return p;
    }
    throw new Error(`failed to find plugin ${JSON.stringify(type)} in path ${this.cniPath.join(":")}`);
  }

  /** Runs one plugin as a runtime would; returns its parsed stdout. */
  async exec(command: string, plugin: Record<string, unknown>, a: Attachment, prevResult?: unknown) {
    const conf: Record<string, unknown> = { ...plugin, cniVersion: this.conflist.cniVersion, name: this.conflist.name };
    if (prevResult !== undefined) conf.prevResult = prevResult;
    const type = String(plugin.type);
    const env: Record<string, string | undefined> = {
      ...Bun.env,
      ...this.extraEnv,
      CNI_COMMAND: command,
      CNI_CONTAINERID: a.containerId,
      CNI_NETNS: a.netns,
      CNI_IFNAME: a.ifname ?? "eth0",
      CNI_ARGS: a.cniArgs ?? "",
      CNI_PATH: this.cniPath.join(":"),
    };
    const t0 = performance.now();
    const proc = Bun.spawn([this.find(type)], {
      stdin: new Blob([JSON.stringify(conf)]),
      stdout: "pipe",
      stderr: "pipe",
      env,
    });
    const [stdout, stderr, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ]);
    const run = { type, code, stdout, stderr, ms: performance.now() - t0 };
    this.runs.push(run);
    if (code !== 0) {
      let msg = stderr.trim();
      try {
        const e = JSON.parse(stdout) as { code: number; msg: string; details?: string };
        msg = `code ${e.code}: ${e.msg}${e.details ? `; ${e.details}` : ""}`;
      } catch {
        // not a CNI error object
      }
      throw Object.assign(new Error(`plugin type=${JSON.stringify(type)} failed (${command.toLowerCase()}): ${msg}`), {
        run,
      });
    }
    return stdout.trim() ? JSON.parse(stdout) : undefined;
  }

  async add(a: Attachment): Promise<unknown> {
    let result: unknown;
    for (const p of this.conflist.plugins) result = await this.exec("ADD", p, a, result);
    writeFileSync(
      this.cacheFile(a),
      JSON.stringify({ kind: "cniCacheV1", result, netns: a.netns, cniArgs: a.cniArgs ?? "" }),
    );
    return result;
  }

  private cached(a: Attachment): unknown {
    try {
      return JSON.parse(readFileSync(this.cacheFile(a), "utf8")).result;
    } catch {
      return undefined;
    }
  }

  async check(a: Attachment): Promise<void> {
    const result = this.cached(a);
    if (result === undefined) throw new Error("no cached result: CHECK before ADD");
    for (const p of this.conflist.plugins) await this.exec("CHECK", p, a, result);
  }

  /** DEL in reverse order; like libcni, goes on past failures and reports the first. */
  async del(a: Attachment): Promise<void> {
    const result = this.cached(a);
    let first: unknown;
    for (const p of [...this.conflist.plugins].reverse()) {
      try {
        await this.exec("DEL", p, a, result);
      } catch (e) {
        first ??= e;
      }
    }
    rmSync(this.cacheFile(a), { force: true });
    if (first) throw first;
  }
}

/** A bridge + host-local conflist with meshcni chained after them. */
export function bridgeConflist(opts: {
  name: string;
  bridge: string;
  subnet: string;
  ipamDir: string;
  meshcni: Record<string, unknown>;
  cniVersion?: string;
  /** An IPv6 subnet too: pods get one address of each family. */
  subnet6?: string;
}): Conflist {
  const ipam = opts.subnet6
    ? { type: "host-local", ranges: [[{ subnet: opts.subnet }], [{ subnet: opts.subnet6 }]], dataDir: opts.ipamDir }
    : { type: "host-local", subnet: opts.subnet, dataDir: opts.ipamDir };
  return {
    cniVersion: opts.cniVersion ?? "1.0.0",
    name: opts.name,
    plugins: [
      {
        type: "bridge",
        bridge: opts.bridge,
        isGateway: true,
        ipMasq: false,
        ipam,
      },
      { type: "meshcni", ...opts.meshcni },
    ],
  };
}
