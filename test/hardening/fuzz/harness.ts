// Running fuzz cases for real: in-process through the plugin's own runPlugin with the real
// PluginDeps (files, processes, fetch) in dry-run mode, and through the compiled dist/meshcni,
// both against a real stand-in API server (TLS, token) that serves each case's pod and namespace.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { lookupTarget, startEarlyLookup } from "../../../internal/plugin/io/early-lookup.ts";
import { createPluginDeps } from "../../../internal/plugin/io/deps.ts";
import { runPlugin } from "../../../internal/plugin/run.ts";
import { type ApiServer, startApiServer } from "../../support/apiserver.ts";
import { withDryRun } from "../../support/dry-run.ts";
import { PLUGIN } from "../../support/plugin-run.ts";
import { type FuzzCase, KUBECONFIG } from "./generate.ts";
import { CASE_BOUND_MS, type Outcome } from "./oracle.ts";

export interface RunResult extends Outcome {
  /** Log lines (in-process) or stderr (binary), for failure reports. */
  log: string;
}

export interface FuzzHarness {
  readonly api: ApiServer;
  readonly kubeconfig: string;
  /** Serves the case's objects (until `release`). */
  serve(c: FuzzCase): void;
  release(c: FuzzCase): void;
  /** The case's stdin with the kubeconfig path filled in. */
  stdinOf(c: FuzzCase): string;
  runInProcess(c: FuzzCase): Promise<RunResult>;
  /** Runs dist/meshcni; `slot` picks a dry-run file so that parallel runs do not share one. */
  runBinary(c: FuzzCase, slot: number): Promise<RunResult>;
  close(): Promise<void>;
}

const PATH = Bun.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin";

function readIfThere(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

export async function startFuzzHarness(): Promise<FuzzHarness> {
  const dir = mkdtempSync(join(tmpdir(), "meshcni-fuzz-"));
  const api = await startApiServer({ token: "fuzz-token" });
  const kubeconfig = join(dir, "ZZZ-meshcni-kubeconfig");
  writeFileSync(kubeconfig, api.kubeconfig(), { mode: 0o600 });
  const inprocDry = join(dir, "dry-inprocess");

  // Dry run needs the entry's "dry_run": true besides MESHCNI_DRY_RUN_FILE.
  const stdinOf = (c: FuzzCase) => withDryRun(c.stdin.replaceAll(KUBECONFIG, kubeconfig));
  return {
    api,
    kubeconfig,
    serve(c) {
      for (const [path, body] of Object.entries(c.objects)) api.objects.set(path, body);
    },
    release(c) {
      for (const path of Object.keys(c.objects)) api.objects.delete(path);
    },
    stdinOf,
    async runInProcess(c) {
      rmSync(inprocDry, { force: true });
      const lines: string[] = [];
      // Decoded from UTF-8 bytes as the binary reads its stdin (a leading BOM goes).
      const stdin = new TextDecoder().decode(new TextEncoder().encode(stdinOf(c)));
      // Every other case with the binary's head start on the pod lookup (cmd/plugin.ts), the
      // others without it, so that both ways to the API are fuzzed (and compared with the binary).
      const env = { PATH, MESHCNI_DRY_RUN_FILE: inprocDry, ...c.env };
      const early = c.index % 2 === 0 ? startEarlyLookup(lookupTarget(stdin, env)) : undefined;
      const deps = createPluginDeps({ PATH, MESHCNI_DRY_RUN_FILE: inprocDry }, (line) => void lines.push(line), early);
      const t0 = performance.now();
      let timer: ReturnType<typeof setTimeout> | undefined;
      const hang = new Promise<"hang">((resolve) => (timer = setTimeout(() => resolve("hang"), CASE_BOUND_MS)));
      try {
        const r = await Promise.race([
          runPlugin({ getenv: (k) => c.env[k], readStdin: async () => stdin, deps }),
          hang,
        ]);
        const ms = performance.now() - t0;
        const log = lines.join("");
        if (r === "hang") return { exitCode: null, stdout: "", ms, timedOut: true, log };
        const payload = readIfThere(inprocDry);
        return { exitCode: r.exitCode, stdout: r.stdout, ms, log, ...(payload !== undefined ? { payload } : {}) };
      } catch (e) {
        return {
          exitCode: null,
          stdout: "",
          ms: performance.now() - t0,
          crash: (e as Error).stack ?? String(e),
          log: lines.join(""),
        };
      } finally {
        clearTimeout(timer);
      }
    },
    async runBinary(c, slot) {
      const dry = join(dir, `dry-binary-${slot}`);
      rmSync(dry, { force: true });
      const t0 = performance.now();
      const proc = Bun.spawn([PLUGIN], {
        env: { PATH, MESHCNI_DRY_RUN_FILE: dry, ...c.env },
        stdin: new Blob([stdinOf(c)]),
        stdout: "pipe",
        stderr: "pipe",
        cwd: dir,
      });
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        proc.kill("SIGKILL");
      }, CASE_BOUND_MS + 3000);
      const [stdout, stderr] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text()]);
      await proc.exited;
      clearTimeout(timer);
      const ms = performance.now() - t0;
      const payload = readIfThere(dry);
      const out: RunResult = {
        exitCode: proc.exitCode,
        stdout,
        ms,
        log: stderr,
        ...(payload !== undefined ? { payload } : {}),
      };
      if (timedOut) out.timedOut = true;
      else if (proc.signalCode) out.crash = `killed by ${proc.signalCode}; stderr: ${stderr}`;
      return out;
    },
    async close() {
      await api.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
