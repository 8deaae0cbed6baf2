// meshcni: the CNI plugin the container runtime runs for every pod. Start-up is on every pod's
// critical path, so VERSION is answered here with nothing else loaded, a DEL of a container
// without a record right after stdin, and the rest of the plugin is imported only for the other
// commands. Every command's outcome goes to the node agent after the result is on stdout.
import { renderVersionInfo } from "../internal/cni/spec.ts";
import { startEarlyLookup } from "../internal/io/early-lookup.ts";
import { report, untouchedDel } from "../internal/plugin/report-io.ts";

export async function main(): Promise<number> {
  if (Bun.env.CNI_COMMAND === "VERSION") {
    await Bun.write(Bun.stdout, renderVersionInfo() + "\n");
    return 0;
  }
  const started = new Date();
  const t0 = performance.now();
  const stdin = Bun.env.CNI_COMMAND ? await Bun.stdin.text() : "";
  // DEL of a container meshcni never ruled: answered here, with no process and no rule code loaded.
  const untouched = await untouchedDel(stdin, Bun.env);
  if (untouched) {
    // Success with an empty stdout: nothing to write.
    await report({ env: Bun.env, stdin, summary: untouched, lines: [], started, t0 });
    return 0;
  }
  // Start the pod lookup first, so reading the kubeconfig and the API round trip overlap with
  // loading the rest of the plugin (its module is small and in this entry chunk for that).
  const early = startEarlyLookup(stdin, Bun.env);
  // A successful ADD of a pod writes its record through the C library: open it while the agent answers.
  if (early && Bun.env.CNI_COMMAND === "ADD" && !Bun.env.MESHCNI_DRY_RUN_FILE) void import("../internal/io/libc.ts").then((m) => m.preload(), () => {});
  const [{ runPlugin }, { createPluginDeps }, { VERSION }] = await Promise.all([
    import("../internal/plugin/run.ts"),
    import("../internal/io/plugin-deps.ts"),
    import("../internal/version.ts"),
  ]);
  const pending: Promise<number>[] = [];
  const lines: string[] = [];
  const deps = createPluginDeps(Bun.env, (line) => {
    lines.push(line);
    pending.push(Bun.write(Bun.stderr, line));
  }, early);
  if (!Bun.env.CNI_COMMAND) {
    pending.push(Bun.write(Bun.stderr, `meshcni ${VERSION}: a chained CNI plugin that redirects meshed pods' TCP through their sidecar proxy\n`));
  }
  const outcome = await runPlugin({ getenv: (k) => Bun.env[k], readStdin: async () => stdin, deps });
  await Bun.write(Bun.stdout, outcome.stdout);
  await Promise.all(pending);
  // The result is out; the report to the agent (bounded) or the fallback log comes after it.
  await report({ env: Bun.env, stdin, summary: outcome.summary, lines, started, t0 });
  return outcome.exitCode;
}

// Built alone (bun build cmd/plugin.ts); in dist/meshcni, cmd/node.ts calls main.
if (import.meta.main) process.exit(await main());
