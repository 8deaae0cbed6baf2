// Running the compiled plugin once, as a runtime would, and capturing what it did.
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { withDryRun, withFirstKeys } from "./dry-run.ts";
import { repoPath } from "./golden.ts";

export const PLUGIN = repoPath("dist/meshcni");

/**
 * The state folder and agent socket the plugin gets when the entry names none: one folder for
 * the whole test process (an ADD's record is still there for a later DEL), never the host's
 * /var/run/meshcni, where a node's real agent and records would be.
 */
const STATE = mkdtempSync(join(tmpdir(), "meshcni-test-state-"));
process.on("exit", () => rmSync(STATE, { recursive: true, force: true }));

/** `stdin` with `"state_dir"` and `"agent_socket"` first, pointing into STATE (an entry's own win). */
export const withTestState = (stdin: string): string =>
  withFirstKeys(
    stdin,
    `"state_dir":${JSON.stringify(STATE)},"agent_socket":${JSON.stringify(join(STATE, "no-agent.sock"))}`,
  );

export interface PluginResult {
  code: number;
  stdout: string;
  stderr: string;
  /** What MESHCNI_DRY_RUN_FILE received; undefined when the plugin did not write it. */
  payload?: string;
  ms: number;
}

/**
 * Runs dist/meshcni with `env` (added to a clean environment) and `stdin`; `dryRun` sets
 * MESHCNI_DRY_RUN_FILE and adds `"dry_run": true` to the entry (both are needed).
 */
export async function runPlugin(
  env: Record<string, string>,
  stdin: string,
  opts: { dryRun?: boolean } = {},
): Promise<PluginResult> {
  const dir = mkdtempSync(join(tmpdir(), "meshcni-run-"));
  const dry = join(dir, "payload");
  try {
    const fullEnv: Record<string, string> = { PATH: Bun.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin", ...env };
    if (opts.dryRun) fullEnv.MESHCNI_DRY_RUN_FILE = dry;
    const t0 = performance.now();
    const proc = Bun.spawn([PLUGIN], {
      stdin: new Blob([withTestState(opts.dryRun ? withDryRun(stdin) : stdin)]),
      stdout: "pipe",
      stderr: "pipe",
      env: fullEnv,
      cwd: dir,
    });
    const [stdout, stderr, code] = await Promise.all([
      new Response(proc.stdout).text(),
      new Response(proc.stderr).text(),
      proc.exited,
    ]);
    const ms = performance.now() - t0;
    let payload: string | undefined;
    try {
      payload = readFileSync(dry, "utf8");
    } catch {
      payload = undefined;
    }
    const out: PluginResult = { code, stdout, stderr, ms };
    if (payload !== undefined) out.payload = payload;
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

export function cniEnv(command: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    CNI_COMMAND: command,
    CNI_CONTAINERID: "3f2a9c1d7e5b",
    CNI_NETNS: "/var/run/netns/cni-7d1c3a2e-5b44-2f1d-8e0a-6c1f2b3a4d5e",
    CNI_IFNAME: "eth0",
    CNI_PATH: "/opt/cni/bin",
    ...extra,
  };
}
