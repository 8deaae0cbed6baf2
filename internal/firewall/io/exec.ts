// Running a command: the one place the plugin starts processes.
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import type { ExecResult } from "../backend.ts";

export interface RunOptions {
  stdin?: string;
  env?: Record<string, string | undefined>;
  signal?: AbortSignal;
}

export async function run(argv: readonly string[], opts: RunOptions = {}): Promise<ExecResult> {
  if (opts.signal?.aborted) throw timedOut(argv);
  const proc = Bun.spawn([...argv], {
    stdin: opts.stdin !== undefined ? new Blob([opts.stdin]) : "ignore",
    stdout: "pipe",
    stderr: "pipe",
    env: opts.env,
  });
  let aborted = false;
  const onAbort = () => {
    aborted = true;
    proc.kill("SIGKILL");
  };
  opts.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const [stdout, stderr, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ]);
    if (aborted) throw timedOut(argv);
    return { code, stdout, stderr };
  } finally {
    opts.signal?.removeEventListener("abort", onAbort);
  }
}

export function timedOut(argv: readonly string[]): CniError {
  return new CniError(
    Code.TryAgainLater,
    "timed out",
    `${argv.slice(0, 4).join(" ")} did not finish within the ` +
      `plugin's time bound (timeout_seconds); the runtime will retry`,
  );
}
