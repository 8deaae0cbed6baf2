// Shared helpers for the benchmarks: run commands many times, interleaved so that machine noise
// hits every candidate alike, and report medians and ratios against a floor measured in the
// same run. (Peak memory is measured with GNU time by the benchmarks that report it.)

import { chmodSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { JIT_POLICY, NODE_EXEC_ARGV } from "../scripts/build.ts";

/**
 * A copy of the binary at `src`, written now into `dir`, so that it starts from the same page
 * cache state as the floors this run compiles there: the state of a 100 MB executable's pages
 * moves its start-up measurably (see docs/benchmarks.md). The agent writes the plugin into the
 * node's CNI bin folder, so a node starts with a freshly written copy too.
 */
export function freshCopy(src: string, dir: string): string {
  const out = join(dir, src.slice(src.lastIndexOf("/") + 1));
  writeFileSync(out, readFileSync(src));
  chmodSync(out, 0o755);
  return out;
}

/**
 * The floor for the plugin's start-up: an empty program (it answers VERSION with "{}") compiled
 * exactly as scripts/build.ts compiles the plugin. Returns the executable's path in `dir`.
 */
export async function buildEmptyProgram(dir: string, name = "empty"): Promise<string> {
  const src = join(dir, `${name}.ts`);
  writeFileSync(src, 'if (Bun.env.CNI_COMMAND === "VERSION") Bun.write(Bun.stdout, "{}");\n');
  return buildLikePlugin(src, join(dir, name));
}

/** `src` compiled exactly as scripts/build.ts compiles the plugin; returns `outfile`. */
export async function buildLikePlugin(src: string, outfile: string): Promise<string> {
  const r = await Bun.build({
    entrypoints: [src],
    target: "bun",
    format: "esm",
    minify: true,
    splitting: true,
    bytecode: true,
    compile: {
      jitPolicy: JIT_POLICY,
      execArgv: NODE_EXEC_ARGV,
      outfile,
      autoloadDotenv: false,
      autoloadBunfig: false,
      autoloadTsconfig: false,
      autoloadPackageJson: false,
    },
  });
  if (!r.success) throw new Error(`building ${src} failed`);
  return outfile;
}

/** A process's CPU time (ns), wake-ups (voluntary context switches) and resident memory. */
export interface ProcSample {
  cpuNs: number;
  wakeups: number;
  rssKb: number;
}

/**
 * Samples `pid` (its threads' schedstat and voluntary_ctxt_switches, its VmRSS), summing over every
 * thread seen since the sampler started, not over the threads alive at the moment: JavaScriptCore's
 * helper threads (GC, JIT) exit after a while idle and new ones start, so a sum over the threads
 * alive at each end of a window loses what the exited ones ran (it could even go negative). The
 * threads are polled every `pollMs` until stop(); a thread that starts and ends between two polls
 * is still missed. A thread is known by its id and start time (a reused id is another thread).
 */
export function procSampler(pid: number, pollMs = 100): { sample(): ProcSample; stop(): void } {
  const threads = new Map<string, { cpuNs: number; wakeups: number }>();
  const poll = () => {
    let tids: string[];
    try {
      tids = readdirSync(`/proc/${pid}/task`);
    } catch {
      return; // the process is gone: what was seen stays
    }
    for (const tid of tids) {
      try {
        const dir = `/proc/${pid}/task/${tid}`;
        const stat = readFileSync(`${dir}/stat`, "utf8");
        const started = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
        const cpuNs = Number(readFileSync(`${dir}/schedstat`, "utf8").split(" ")[0]);
        const wakeups = Number(
          /voluntary_ctxt_switches:\s+(\d+)/.exec(readFileSync(`${dir}/status`, "utf8"))?.[1] ?? 0,
        );
        threads.set(`${tid}@${started}`, { cpuNs, wakeups });
      } catch {
        // a thread that ended meanwhile: its last values stay
      }
    }
  };
  poll();
  const timer = setInterval(poll, pollMs);
  timer.unref(); // a sampler left running keeps no bench alive
  return {
    sample() {
      poll();
      let cpuNs = 0;
      let wakeups = 0;
      for (const t of threads.values()) {
        cpuNs += t.cpuNs;
        wakeups += t.wakeups;
      }
      let rssKb = 0;
      try {
        rssKb = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? 0);
      } catch {
        // gone
      }
      return { cpuNs, wakeups, rssKb };
    },
    stop: () => clearInterval(timer),
  };
}

/** What bench/support/api-process.ts prints once its stand-in API server (and agent) listen. */
export interface ApiProcessInfo {
  url: string;
  kubeconfig: string;
  caFile: string;
  token: string;
  agentSocket: string;
  stateDir: string;
}

/** Starts bench/support/api-process.ts and waits for its first line; kill the process when done. */
export async function startApiProcess(): Promise<{
  proc: Bun.Subprocess<"pipe", "pipe", "inherit">;
  info: ApiProcessInfo;
}> {
  const proc = Bun.spawn(
    [join(import.meta.dir, "../node_modules/.bin/bun"), join(import.meta.dir, "support/api-process.ts")],
    { stdin: "pipe", stdout: "pipe", stderr: "inherit" },
  );
  const first = await proc.stdout.getReader().read();
  return { proc, info: JSON.parse(new TextDecoder().decode(first.value)) as ApiProcessInfo };
}

export interface Cmd {
  name: string;
  argv: string[];
  env?: Record<string, string | undefined>;
  stdin?: string;
  /** Runs before each timed run (not timed), e.g. to reset a network namespace. */
  before?: () => void;
  /** Expected exit code (default 0); a different one aborts the benchmark. */
  exitCode?: number;
}

export interface Stats {
  name: string;
  runs: number;
  median: number;
  p10: number;
  p90: number;
  p99: number;
  mean: number;
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
}

export function summarize(name: string, times: number[]): Stats {
  const s = [...times].sort((a, b) => a - b);
  return {
    name,
    runs: s.length,
    median: percentile(s, 0.5),
    p10: percentile(s, 0.1),
    p90: percentile(s, 0.9),
    p99: percentile(s, 0.99),
    mean: s.reduce((a, b) => a + b, 0) / s.length,
  };
}

/** Times each command `runs` times (after `warmup` untimed rounds), round-robin. */
export function measure(cmds: Cmd[], runs = 200, warmup = 10): Stats[] {
  const times = cmds.map(() => [] as number[]);
  const encoder = new TextEncoder();
  for (let i = 0; i < runs + warmup; i++) {
    cmds.forEach((c, k) => {
      c.before?.();
      const t0 = performance.now();
      const r = Bun.spawnSync(c.argv, {
        env: c.env ?? Bun.env,
        stdin: c.stdin !== undefined ? encoder.encode(c.stdin) : "ignore",
        stdout: "pipe",
        stderr: "pipe",
      });
      const dt = performance.now() - t0;
      if (r.exitCode !== (c.exitCode ?? 0)) {
        throw new Error(`${c.name}: exit ${r.exitCode}\n${r.stdout.toString()}\n${r.stderr.toString()}`);
      }
      if (i >= warmup) times[k]!.push(dt);
    });
  }
  return cmds.map((c, k) => summarize(c.name, times[k]!));
}

export const ms = (x: number) => `${x.toFixed(2)} ms`;
export const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;

/** A markdown table of stats with a ratio column against `floor`. */
export function table(stats: Stats[], floor?: Stats): string {
  const head = `| command | median | p10 | p90 |${floor ? ` vs ${floor.name} |` : ""}`;
  const sep = `|---|---|---|---|${floor ? "---|" : ""}`;
  const rows = stats.map(
    (s) =>
      `| ${s.name} | ${ms(s.median)} | ${ms(s.p10)} | ${ms(s.p90)} |` +
      (floor ? ` ${ratio(s.median, floor.median)} |` : ""),
  );
  return [head, sep, ...rows].join("\n");
}
