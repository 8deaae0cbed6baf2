// meshcni: the CNI plugin the container runtime runs for every pod. Start-up is on every pod's
// critical path, so VERSION is answered with nothing else loaded, DEL right after stdin (by
// cmd/node.ts, before this chunk loads, in dist/meshcni), an
// ADD the node agent applies with its answer's check alone (an ADD it plans, with the plan's
// backend), and the rest of the plugin is imported only for the other commands and when the agent
// cannot plan. Every command's outcome goes to the node agent after the result is on stdout (the
// agent reports an ADD or CHECK it answered in full itself).
import { renderVersionInfo } from "../internal/cni/spec.ts";
import { addThroughAgent } from "../internal/plugin/agent/add.ts";
import { agentPaths } from "../internal/plugin/agent/paths.ts";
import type { PlannedAdd } from "../internal/plugin/agent/planned.ts";
import { lookupTarget } from "../internal/plugin/lookup-target.ts";
import { VERSION } from "../internal/version.ts";

/** Reports and DEL, loaded only when a command needs them. */
const reporting = () => import("../internal/plugin/io/report.ts");

/** A DEL's stdin and when it started, read by cmd/node.ts (its record could not decide it). */
export interface PluginInput {
  stdin: string;
  started: Date;
  /** performance.now() when the command started. */
  t0: number;
}

/** `input`: what cmd/node.ts read for a DEL its record could not decide (answered there otherwise). */
export async function main(input?: PluginInput): Promise<number> {
  if (Bun.env.CNI_COMMAND === "VERSION") {
    await Bun.write(Bun.stdout, `${renderVersionInfo()}\n`);
    return 0;
  }
  const started = input?.started ?? new Date();
  const t0 = input?.t0 ?? performance.now();
  const stdin = input ? input.stdin : Bun.env.CNI_COMMAND ? await Bun.file(0).text() : "";
  // DEL: the record goes, the rules stay with the namespace the runtime destroys. Answered with no
  // process and no rule code loaded (here when this chunk is built alone).
  if (Bun.env.CNI_COMMAND === "DEL" && !input) {
    const code = await (await reporting()).runDel({ stdin, started, t0 });
    if (code !== undefined) return code;
  }
  const lines: string[] = [];
  const pending: Promise<number>[] = [];
  const sink = (line: string) => {
    lines.push(line);
    pending.push(Bun.write(Bun.stderr, line));
  };
  const target = lookupTarget(stdin, Bun.env);
  // A warm ADD: the node agent plans it and applies it, or the plugin applies the plan (agent/add.ts);
  // a CHECK the agent answers when it applies rules (agent/check.ts). Loads no config schema, no
  // mesh profile, no API client.
  let planned: PlannedAdd | undefined;
  // One bound for the whole command (timeout_seconds), whichever way it goes.
  const deadline = target ? AbortSignal.timeout(target.seconds * 1000) : undefined;
  const command = Bun.env.CNI_COMMAND;
  if (target && deadline && (command === "ADD" || command === "CHECK") && !Bun.env.MESHCNI_DRY_RUN_FILE) {
    const ask =
      command === "ADD" ? addThroughAgent : (await import("../internal/plugin/agent/check.ts")).checkThroughAgent;
    planned = await ask({
      socket: target.socket,
      stateDir: agentPaths(stdin).stateDir,
      stdin,
      env: Bun.env,
      version: VERSION,
      timeoutMs: target.applyTimeoutMs,
      deadline,
      sink,
      t0,
    });
    if (planned.kind === "done") {
      await Bun.write(Bun.stdout, planned.stdout);
      await Promise.all(pending);
      // An answer without rules the agent reported itself as it answered.
      if (!planned.reported) {
        const { report } = await reporting();
        await report({ env: Bun.env, stdin, summary: planned.summary, lines, started, t0, via: planned.followUp });
      }
      return planned.exitCode;
    }
  }
  // Otherwise the plugin runs the command itself. Start the pod lookup first, so reading the
  // kubeconfig and the API round trip overlap with loading the rest of the plugin (its module is
  // small). An agent that did not answer just now is not asked again.
  const agentDown =
    planned?.kind === "unavailable" || (planned?.kind === "declined" && planned.lookupFailed) ? planned.why : undefined;
  const { startEarlyLookup } = await import("../internal/plugin/io/early-lookup.ts");
  const early = startEarlyLookup(target, agentDown, deadline);
  // A successful ADD of a pod writes its record through the C library: open it while the agent answers.
  if (early && Bun.env.CNI_COMMAND === "ADD" && !Bun.env.MESHCNI_DRY_RUN_FILE)
    void import("../internal/plugin/io/libc.ts").then(
      (m) => m.preload(),
      () => {},
    );
  const [{ runPlugin }, { createPluginDeps }] = await Promise.all([
    import("../internal/plugin/run.ts"),
    import("../internal/plugin/io/deps.ts"),
  ]);
  const deps = createPluginDeps(Bun.env, sink, early);
  if (!Bun.env.CNI_COMMAND) {
    pending.push(
      Bun.write(
        Bun.stderr,
        `meshcni ${VERSION}: a chained CNI plugin that redirects meshed pods' TCP through their sidecar proxy\n`,
      ),
    );
  }
  const outcome = await runPlugin({
    getenv: (k) => Bun.env[k],
    readStdin: async () => stdin,
    deps,
    ...(deadline ? { deadline } : {}),
  });
  await Bun.write(Bun.stdout, outcome.stdout);
  await Promise.all(pending);
  // The result is out; the report to the agent (bounded) or the fallback log comes after it.
  await (await reporting()).report({ env: Bun.env, stdin, summary: outcome.summary, lines, started, t0 });
  return outcome.exitCode;
}

// Built alone (bun build cmd/plugin.ts); in dist/meshcni, cmd/node.ts calls main.
if (import.meta.main) process.exit(await main());
