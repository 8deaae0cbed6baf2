// meshcni-installer: the process of the meshcni DaemonSet. It wires the real files, watches,
// clock, log and signals to the installer (internal/installer) and maps the outcome to an exit
// code: 0 done, 1 failed, 2 bad usage.
import { readFileSync } from "node:fs";
import { dirname } from "node:path";
import { buildPluginEntry, EntryError } from "../internal/installer/entry.ts";
import { Installer } from "../internal/installer/installer.ts";
import { OptionsError, parseInstallerOptions, renderUsage } from "../internal/installer/options.ts";
import { runInstaller } from "../internal/installer/run.ts";
import { checkBinaryOnHost } from "../internal/io/host-root.ts";
import { createHostFs } from "../internal/io/installer-fs.ts";
import { serveHealth } from "../internal/io/installer-health.ts";
import { stopRunningInstaller } from "../internal/io/installer-stop.ts";
import { createInstallerLog } from "../internal/io/installer-log.ts";
import { watchDir } from "../internal/io/installer-watch.ts";
import { VERSION } from "../internal/version.ts";

export async function main(argv: readonly string[] = Bun.argv.slice(2)): Promise<number> {
  // First of all, so that a stop request during start-up still ends in an undo.
  const stop = new AbortController();
  for (const sig of ["SIGTERM", "SIGINT"] as const) process.on(sig, () => stop.abort());
  let opts;
  try {
    opts = parseInstallerOptions(argv, Bun.env, { pluginBinary: ["meshcni", "meshcni-musl"].map((b) => `${dirname(process.execPath)}/${b}`).join(",") });
  } catch (e) {
    if (!(e instanceof OptionsError)) throw e;
    process.stderr.write(`meshcni-installer: ${e.message}\n`);
    return 2;
  }
  if (opts.help) {
    process.stdout.write(renderUsage());
    return 0;
  }
  const log = createInstallerLog(opts.logLevel);
  let entry;
  try {
    entry = buildPluginEntry(opts.pluginConfig === undefined ? undefined : readFileSync(opts.pluginConfig, "utf8"), opts.destNetDir, opts.podNamespace);
  } catch (e) {
    log.error(`--plugin-config ${opts.pluginConfig}: ${(e as Error).message}`);
    return 2;
  }
  const service = opts.serviceHost && opts.servicePort ? { host: opts.serviceHost, port: opts.servicePort } : undefined;
  const inst = new Installer({ ...opts, entry, ...(service ? { service } : {}) }, { fs: createHostFs(), log, now: () => performance.now(), canRun: checkBinaryOnHost });
  try {
    if (opts.mode === "stop") {
      // Within the pod's 30 s grace period, leaving time for the direct undo below.
      if (await stopRunningInstaller(opts.stopPid, 20_000)) return 0;
      log.warn(`no running installer ended on SIGTERM (pid ${opts.stopPid}); undoing directly`);
    }
    if (opts.mode === "uninstall" || opts.mode === "stop") {
      inst.uninstall();
      return 0;
    }
    if (!service) throw new Error("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set (every pod has them); the plugin's kubeconfig points at them");
    log.info(`meshcni-installer ${VERSION}: ${opts.mode === "once" ? "installing once" : "installing and keeping meshcni chained"} (net dir ${opts.hostNetDir}, bin dir ${opts.hostBinDir})`);
    const health = opts.healthPort === undefined ? undefined : serveHealth(opts.healthPort, () => inst.check());
    try {
      return (await runInstaller(inst, opts.mode, { watch: watchDir, log }, stop.signal)) ? 0 : 1;
    } finally {
      health?.stop();
    }
  } catch (e) {
    log.error((e as Error).message);
    return 1;
  }
}

// Built alone (bun build cmd/installer.ts); in dist/meshcni, cmd/node.ts loads this module and calls main.
if (import.meta.main) process.exit(await main());
