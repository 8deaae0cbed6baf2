// The node agent's process (meshcni-installer, cmd/installer.ts): the real files, watches, clock,
// log, signals, sockets and API server wired to the agent's parts (install/, cache/, socket/,
// state/, repair/, observe/), and the outcome mapped to an exit code: 0 done, 1 failed, 2 bad
// usage.
import { existsSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import { createSocketHandler } from "./socket/handler.ts";
import { createAddPlanner } from "./socket/plan-add.ts";
import { createChecker } from "./socket/check.ts";
import { countLookup, countReport, newCounters, renderMetrics } from "./observe/metrics.ts";
import { renderFallbackLog, renderReport } from "./observe/report.ts";
import { buildStatus } from "./observe/status.ts";
import { decideOnStop } from "./stop.ts";
import type { CacheStatus, NodeView, PodLookup } from "./types.ts";
import type { RepairConfig } from "./repair/plan.ts";
import { parsePluginConf } from "../config/plugin-config.ts";
import type { JsonObject } from "./install/conflist/chain.ts";
import { profileFor } from "../mesh/index.ts";
import { type RepairLoop, startRepair } from "./repair/loop.ts";
import { clientWriter } from "./repair/api-write.ts";
import { entryFromConfigText } from "./install/entry.ts";
import { Installer } from "./install/installer.ts";
import { type AgentOptions, OptionsError, parseAgentOptions, renderUsage, resolveRepairMode } from "./options.ts";
import { startVerify, type VerifyLoop } from "./verify/loop.ts";
import { targetFromAdd } from "./verify/plan.ts";
import { readNamespaceAddresses } from "./verify/io/addresses.ts";
import { runInstall } from "./install/run.ts";
import type { Logger } from "../log/logger.ts";
import { daemonSetPath, lookBeforeStopping, noNodeLookup, serviceAccountApi } from "./api.ts";
import { PluginTokenSource } from "./install/io/token.ts";
import { renderTime } from "./install/kubeconfig.ts";
import type { InstallStatus } from "./observe/status.ts";
import type { KubeClient } from "../kube/client.ts";
import { WatchCache } from "./cache/watch-cache.ts";
import { type AgentSocket, serveAgentSocket } from "./socket/serve.ts";
import { removeAgentSocket, removeAgentState, takeFallbackLog, writeRecordFor } from "./state/files.ts";
import { netnsName, readNetnsProblem } from "./socket/netns.ts";
import type { Ability } from "./apply/ability.ts";
import { createApplier } from "./apply/apply.ts";
import { readAbility } from "./apply/io/probe.ts";
import { restrictSelf } from "./apply/io/seccomp.ts";
import { agentUserland, openAgentFirewall, warmUpUserland } from "../firewall/io/open-in-netns.ts";
import { RecordIndex } from "./state/record-index.ts";
import { checkBinaryOnHost, readHostLibc } from "./install/io/host-root.ts";
import { createHostFs } from "./install/io/fs.ts";
import { serveHealth } from "./observe/serve.ts";
import { createAgentLog, printPluginLines } from "./observe/log.ts";
import { watchDir } from "./install/io/watch.ts";
import { VERSION } from "../version.ts";

/** The agent's answers to the plugin: a pod lookup and, with a watch cache, its state and the node's view. */
interface PodSource {
  lookup: PodLookup;
  status?: () => CacheStatus;
  view?: NodeView;
}

/**
 * The pod lookup: the watch cache of this node's pods (all namespaces) and of namespaces, with the
 * agent's own service account; without a node name there is nothing to watch and no node to
 * answer for: every lookup is 503, and the plugin reads the pod through its kubeconfig.
 */
function podSource(api: KubeClient, nodeName: string | undefined, log: Logger, signal: AbortSignal): PodSource {
  if (!nodeName) {
    log.warn(
      "no --node-name (env NODE_NAME): no watch cache; the agent answers no pod lookup, " +
        "and the plugin reads each pod through its kubeconfig",
    );
    return { lookup: noNodeLookup() };
  }
  const cache = new WatchCache(api, { nodeName, log });
  cache
    .run(signal)
    .catch((e) =>
      log.error(
        `the watch cache stopped: ${(e as Error).message}; ` +
          "lookups now wait for the watch in vain and then ask the API server",
      ),
    );
  return { lookup: cache.lookup, status: () => cache.status(), view: cache };
}

/** Repair's settings from the flags and the plugin's own entry (its exclusions, its mesh). */
function repairConfig(opts: AgentOptions, entry: JsonObject, node: string, applies: boolean): RepairConfig | string {
  const conf = parsePluginConf(JSON.stringify({ cniVersion: "1.0.0", name: "meshcni", ...entry }));
  const profile = profileFor(conf);
  if (!profile) return `mesh ${conf.mesh} has no profile in this build`;
  return {
    mode: resolveRepairMode(opts.repair, applies),
    node,
    conf,
    profile,
    daemonSetName: opts.daemonSetName,
    graceMs: opts.repairGraceSeconds * 1000,
    ratePerMinute: opts.repairRate,
    retryMs: opts.repairRetrySeconds * 1000,
  };
}

/**
 * Whether this agent applies pods' rules itself (internal/agent/apply/): found out once, said in
 * its log and /status. Its userland's versions are asked here, outside any pod's namespace.
 */
async function startApplying(opts: AgentOptions, log: Logger): Promise<Ability> {
  const ability = await readAbility({
    enabled: opts.agentApplies,
    netnsDir: opts.netnsDir,
    nftInProcess: Bun.env.MESHCNI_NFT_INPROCESS !== "0",
  });
  if (ability.applies) {
    // CAP_SYS_ADMIN left for setns alone: no mounts, no new namespaces, in any thread or child.
    const refused = await restrictSelf();
    if (refused !== undefined) {
      const no: Ability = {
        ...ability,
        applies: false,
        reason: `the agent could not restrict its CAP_SYS_ADMIN to setns (${refused}): the plugin applies pods' rules`,
      };
      log.warn(`the agent does not apply pods' rules: ${no.reason}`);
      return no;
    }
    log.info(`${ability.reason}; seccomp: mounts, new namespaces and setns into other kinds refused`);
    await warmUpUserland(agentUserland(ability.nftInProcess));
  } else if (opts.agentApplies) log.warn(`the agent does not apply pods' rules: ${ability.reason}`);
  else log.info(`the agent does not apply pods' rules: ${ability.reason}`);
  return ability;
}

/** Prints the plugin's fallback log, if it wrote one while no agent answered. */
function drainFallbackLog(stateDir: string, log: Logger): number {
  let printed = 0;
  try {
    for (const { file, content, problem } of takeFallbackLog(stateDir)) {
      if (problem) log.warn(`the plugin's fallback log not printed: ${problem}`);
      const lines = renderFallbackLog(file, content);
      printPluginLines(lines);
      printed += Math.max(0, lines.length - 2);
    }
  } catch (e) {
    log.warn(`cannot print the plugin's fallback log in ${stateDir}: ${(e as Error).message}`);
  }
  return printed;
}

/** The agent's status, the kubeconfig's with what the token source knows of the plugin's token. */
function installStatus(inst: Installer, tokens: PluginTokenSource): InstallStatus {
  const s = inst.status();
  s.kubeconfig.token = { ...tokens.status(), ...s.kubeconfig.token };
  return s;
}

/**
 * The plugin's token: requested at once with the agent's credentials, renewed and retried until
 * `signal` aborts; each new one makes the agent write the kubeconfig (through `kick`). A
 * token of the same account in the kubeconfig a previous agent wrote stands until then.
 */
function startPluginTokens(inst: Installer, tokens: PluginTokenSource, log: Logger, signal: AbortSignal): void {
  const written = inst.readWrittenToken();
  if (written && tokens.adopt(written)) {
    const who = `${written.account.namespace}/${written.account.name}`;
    const until = renderTime(written.expiresAt);
    log.info(`the plugin's kubeconfig holds a token of ${who}, valid until ${until}; asking for a new one`);
  } else if (existsSync(inst.kubeconfigPath) && !written) {
    log.info(
      `${inst.kubeconfigPath} holds no token of the plugin's own account (an older meshcni wrote the agent's ` +
        `token there): it is rewritten with a token of ${tokens.account.namespace}/${tokens.account.name}`,
    );
  }
  void tokens.run(signal);
}

/** Where the plugin's service account is: the agent's namespace (POD_NAMESPACE, else the service account folder's). */
function pluginAccountNamespace(opts: AgentOptions): string | undefined {
  if (opts.podNamespace) return opts.podNamespace;
  try {
    return readFileSync(`${opts.serviceAccountDir}/namespace`, "utf8").trim() || undefined;
  } catch {
    return undefined;
  }
}

async function runAgent(
  opts: AgentOptions,
  inst: Installer,
  api: KubeClient,
  tokens: PluginTokenSource,
  entry: JsonObject,
  log: Logger,
  signal: AbortSignal,
): Promise<number> {
  const counters = newCounters();
  const startedAt = new Date();
  const cacheStop = new AbortController();
  const source = podSource(api, opts.nodeName, log, AbortSignal.any([signal, cacheStop.signal]));
  const who = {
    daemonSetName: opts.daemonSetName,
    ...(opts.podNamespace ? { namespace: opts.podNamespace } : {}),
    ...(opts.nodeName ? { nodeName: opts.nodeName } : {}),
  };
  if (!opts.nodeName)
    log.warn(
      "no --node-name (env NODE_NAME): the agent cannot tell on SIGTERM whether its DaemonSet still runs on this node",
    );

  let lastBadRequest = -Infinity;
  let lastDeclined = -Infinity;
  let lastFull = -Infinity;
  // The records in memory: read once here, then kept current (record-index.ts).
  const records = new RecordIndex(opts.stateDir, {
    onWatchError: (e) => log.warn(`watching the records in ${opts.stateDir}: ${e.message}; read again at each resync`),
  }).start();
  const onLookup = (r: Parameters<typeof countLookup>[1]) => countLookup(counters, r);
  const ability = await startApplying(opts, log);
  const userland = ability.applies ? agentUserland(ability.nftInProcess) : undefined;
  const netnsPath = (p: string) => `${opts.netnsDir}/${netnsName(p)}`;
  const netnsProblem = (path: string | undefined) => readNetnsProblem(opts.netnsDir, path);
  const checker =
    userland &&
    createChecker({
      lookup: source.lookup,
      stateDir: opts.stateDir,
      onLookup,
      version: VERSION,
      netnsProblem,
      netnsPath,
      userland,
      recordedBackend: (id) => (id === undefined ? undefined : records.get(id)?.backend),
    });
  let verify: VerifyLoop | undefined;
  const planner = createAddPlanner({
    ...(userland ? { apply: { applier: createApplier({ userland, open: openAgentFirewall }), netnsPath } } : {}),
    lookup: source.lookup,
    stateDir: opts.stateDir,
    onLookup,
    version: VERSION,
    writeRecord: async (dir, record) => {
      writeRecordFor(dir, record);
      if (dir === opts.stateDir) records.wrote(record);
    },
    onRecordError: (record, e) =>
      log.warn(
        `cannot write the record of container ${record.containerId} ` +
          `(${record.namespace}/${record.name}) in ${opts.stateDir}: ${e.message}`,
      ),
    netnsProblem,
    recordsFull: () =>
      records.size() < opts.maxRecords
        ? undefined
        : `the state folder holds ${records.size()} records, the agent's bound (--max-records ${opts.maxRecords}): ` +
          "it writes no more",
  });
  const handler = createSocketHandler({
    lookup: source.lookup,
    ...(checker ? { check: checker } : {}),
    applies: () => ({ applies: ability.applies, reason: ability.reason }),
    planAdd: async (req, signal) => {
      const r = await planner(req, signal);
      if (r.ok) {
        counters.addsPlanned++;
        if (r.answer.applied) {
          counters.addsApplied++;
          const t = verify && targetFromAdd(req);
          if (t) verify?.afterAdd(t);
        }
      } else if (r.recordsFull) {
        counters.recordsFull++;
        if (performance.now() - lastFull > 60_000) {
          log.warn(
            `the plugin runs ADDs itself: ${r.why}; DEL and GC remove records, ` +
              "stale ones are the plugin's GC to remove",
          );
        }
        lastFull = performance.now();
      }
      return r;
    },
    onDeclined(why) {
      counters.addsDeclined++;
      if (performance.now() - lastDeclined > 10_000) log.info(`the plugin runs an ADD itself: ${why}`);
      lastDeclined = performance.now();
    },
    onReport(r) {
      // A DEL's report follows the removal of the container's record: printed only for a container
      // the agent held a record of (anyone who reaches the socket can send reports).
      const known = r.containerId !== undefined && records.knows(r.containerId);
      if ((r.command === "ADD" || r.command === "DEL") && r.containerId !== undefined) records.refresh(r.containerId);
      if (r.command === "DEL" && !known) {
        counters.unrecordedDelReports++;
        return;
      }
      countReport(counters, r);
      printPluginLines(renderReport(r, VERSION));
    },
    onLookup,
    onBadRequest(why) {
      counters.badRequests++;
      if (performance.now() - lastBadRequest > 10_000) log.warn(`a bad request on ${opts.agentSocket}: ${why}`);
      lastBadRequest = performance.now();
    },
  });
  let socket: AgentSocket | undefined;
  let socketProblem: string | undefined;
  try {
    socket = serveAgentSocket(opts.agentSocket, handler, (e) => log.error(`the agent's socket: ${e.message}`));
    log.info(`answering the plugin on ${opts.agentSocket}`);
  } catch (e) {
    // Keeping the chain matters more than the socket: the plugin falls back to its kubeconfig.
    socketProblem = `the agent's socket is not served: ${(e as Error).message}`;
    log.error(socketProblem);
  }
  counters.fallbackLogLines += drainFallbackLog(opts.stateDir, log);

  if (opts.podNamespace) {
    // Said at start, not discovered at SIGTERM: a DaemonSet the agent cannot see means undo then.
    void api.get(daemonSetPath(opts.podNamespace, opts.daemonSetName), 5000).then((a) => {
      const ds = `DaemonSet ${opts.podNamespace}/${opts.daemonSetName}`;
      if (a.kind === "status" && a.status === 404)
        log.warn(`${ds} is not in the API server: on SIGTERM this agent will undo everything; check --daemonset-name`);
      else if (a.kind === "status" && (a.status === 401 || a.status === 403))
        log.warn(
          `the agent may not read its ${ds} (${a.status}): on SIGTERM it will ` +
            `undo everything; check its Role (meshcnictl install-cni renders it)`,
        );
    });
  } else {
    log.warn(
      "POD_NAMESPACE is not set: on SIGTERM the agent cannot look at " +
        "its DaemonSet and leaves everything in place (--uninstall undoes)",
    );
  }

  const check = () => {
    const r = inst.check();
    return socketProblem ? { ready: false, problems: [...r.problems, socketProblem] } : r;
  };

  let repair: RepairLoop | undefined;
  const view = source.view;
  const cfg =
    opts.nodeName && view
      ? repairConfig(opts, entry, opts.nodeName, ability.applies)
      : "no --node-name (env NODE_NAME)";
  if (typeof cfg === "string" || !view) {
    log.warn(`no repair${opts.startupTaint ? ` and the startup taint ${opts.startupTaint} stays` : ""}: ${cfg}`);
    if (ability.applies) log.warn(`no verification of pods' rules: ${cfg}`);
  } else {
    if (opts.repair === "in-place" && !ability.applies)
      log.warn(
        "--repair in-place: the agent does not apply rules, so it cannot reach pods' namespaces: " +
          "pods whose mesh validator found no redirect are evicted",
      );
    if (userland) {
      // Verification's own CHECK and ADD code, the socket's, counting no lookup of the plugin's.
      const quiet = () => {};
      const checkPod = createChecker({
        lookup: source.lookup,
        stateDir: opts.stateDir,
        onLookup: quiet,
        version: VERSION,
        netnsProblem,
        netnsPath,
        userland,
        recordedBackend: (id) => (id === undefined ? undefined : records.get(id)?.backend),
      });
      const writeBack = createAddPlanner({
        apply: { applier: createApplier({ userland, open: openAgentFirewall }), netnsPath },
        lookup: source.lookup,
        stateDir: opts.stateDir,
        onLookup: quiet,
        version: VERSION,
        // The pod's record (if any) stays as it is: the write is not an ADD of a sandbox.
        writeRecord: async () => {},
        netnsProblem,
      });
      verify = startVerify({
        cfg,
        mode: cfg.mode === "in-place" ? "in-place" : "report",
        view,
        records: () => records.records().records,
        entry,
        version: VERSION,
        check: (req, s) => checkPod(req, s),
        write: (req, s) => writeBack(req, s),
        netnsThere: (name) => existsSync(`${opts.netnsDir}/${name}`),
        addresses: () => readNamespaceAddresses(opts.netnsDir),
        writer: clientWriter(api),
        log,
        periodMs: opts.verifySeconds * 1000,
        onEvidence: () => repair?.poke(),
      });
    }
    const v = verify;
    repair = startRepair({
      cfg,
      view,
      api,
      log,
      records: () => records.records().records,
      writer: clientWriter(api),
      // The chain alone: repair looks at it every 2 s during its grace period, and the binary's
      // and kubeconfig's checks read the token, the CA and the kubeconfig.
      chained: () => inst.chainStatus().current,
      ready: () => check().ready,
      ...(opts.startupTaint ? { startupTaint: opts.startupTaint } : {}),
      intervalMs: 2000,
      ...(v && cfg.mode === "in-place" ? { inPlace: (ref) => v.writeInPlace(ref) } : {}),
      // Other modes act on verification's evidence as on the validator's (evict, delete, report).
      ...(v && cfg.mode !== "in-place" ? { missingRules: () => v.missingRules() } : {}),
    });
  }
  const health =
    opts.healthPort === undefined
      ? undefined
      : serveHealth(opts.healthPort, {
          check,
          metrics: () =>
            renderMetrics({
              counters,
              version: VERSION,
              node: opts.nodeName ?? "",
              ready: check().ready,
              repairs: repair?.repaired() ?? 0,
              bypassing: repair?.bypassing() ?? 0,
              unverified: repair?.unverified() ?? 0,
              refusals: repair?.refusals() ?? 0,
              ...(source.status ? { cache: source.status() } : {}),
              records: records.size(),
              ...(verify
                ? {
                    verify: {
                      runs: verify.runs(),
                      missing: verify.missing(),
                      rewritten: verify.rewritten(),
                      failures: verify.failures(),
                    },
                  }
                : {}),
            }),
          status: () =>
            buildStatus({
              version: VERSION,
              daemonSet: opts.daemonSetName,
              install: installStatus(inst, tokens),
              counters,
              records: records.records(),
              ...(opts.nodeName ? { node: opts.nodeName } : {}),
              ...(opts.podNamespace ? { namespace: opts.podNamespace } : {}),
              ...(source.status ? { cache: source.status() } : {}),
              ...(repair ? { repair: repair.status() } : {}),
              ...(verify ? { verify: verify.status() } : {}),
              agent: {
                socket: opts.agentSocket,
                stateDir: opts.stateDir,
                startedAt: startedAt.toISOString(),
                uptimeSeconds: Math.round((Date.now() - startedAt.getTime()) / 1000),
                applies: {
                  applies: ability.applies,
                  reason: ability.reason,
                  missingCapabilities: ability.missingCapabilities,
                  nftInProcess: ability.nftInProcess,
                },
              },
            }),
        });

  let undone = false;
  const tokenStop = new AbortController();
  let kick = () => {};
  tokens.onToken = () => kick();
  startPluginTokens(inst, tokens, log, AbortSignal.any([signal, tokenStop.signal]));
  try {
    const ok = await runInstall(
      inst,
      "run",
      {
        watch: watchDir,
        log,
        reconcileOn: (k) => (kick = k),
        resyncMs: opts.resyncSeconds * 1000,
        onResync(before, fixed) {
          counters.resyncs++;
          if (before.length > 0 && fixed) {
            counters.resyncRepairs++;
            log.warn(`periodic resync put right what no watch event announced: ${before.join("; ")}`);
          }
          counters.fallbackLogLines += drainFallbackLog(opts.stateDir, log);
          records.rescan();
        },
        async decideOnStop() {
          const decision = decideOnStop(await lookBeforeStopping(api, who));
          undone = decision.undo;
          return decision;
        },
      },
      signal,
    );
    return ok ? 0 : 1;
  } finally {
    tokenStop.abort();
    repair?.stop();
    verify?.stop();
    records.stop();
    cacheStop.abort();
    socket?.stop();
    health?.stop();
    // The records stay (on tmpfs under /var/run, gone at the next boot): a meshcni installed
    // again reads them and knows which pods went through the plugin. --uninstall removes them.
    if (undone) {
      removeAgentSocket(opts.agentSocket);
      log.info(
        `the plugin's records stay in ${opts.stateDir} for a later ` +
          `install (--uninstall removes them; a reboot empties the folder)`,
      );
    }
  }
}

export async function main(argv: readonly string[] = Bun.argv.slice(2)): Promise<number> {
  // First of all, so that a stop request during start-up is seen.
  const stop = new AbortController();
  for (const sig of ["SIGTERM", "SIGINT"] as const) process.on(sig, () => stop.abort());
  let opts;
  try {
    opts = parseAgentOptions(argv, Bun.env, {
      pluginBinary: `${dirname(process.execPath)}/meshcni`,
    });
  } catch (e) {
    if (!(e instanceof OptionsError)) throw e;
    process.stderr.write(`meshcni-installer: ${e.message}\n`);
    return 2;
  }
  if (opts.help) {
    process.stdout.write(renderUsage());
    return 0;
  }
  const log = createAgentLog(opts.logLevel);
  let entry;
  try {
    const text = opts.pluginConfig === undefined ? undefined : readFileSync(opts.pluginConfig, "utf8");
    entry = entryFromConfigText(text, opts.destNetDir, opts.podNamespace, {
      socket: opts.agentSocket,
      stateDir: opts.stateDir,
    });
  } catch (e) {
    log.error(`--plugin-config ${opts.pluginConfig}: ${(e as Error).message}`);
    return 2;
  }
  const service = opts.serviceHost && opts.servicePort ? { host: opts.serviceHost, port: opts.servicePort } : undefined;
  const fs = createHostFs([{ host: opts.destNetDir, container: opts.hostNetDir }]);
  const baseDeps = { fs, log, now: () => performance.now(), canRun: checkBinaryOnHost, hostLibc: readHostLibc };
  const config = { ...opts, entry, ...(service ? { service } : {}) };
  try {
    if (opts.mode === "uninstall") {
      new Installer(config, baseDeps).uninstall();
      const removed = removeAgentState(opts.stateDir, opts.agentSocket);
      if (removed.length > 0)
        log.info(`removed the plugin's records and logs: ${removed.length} file(s) in ${opts.stateDir}`);
      return 0;
    }
    if (!service)
      throw new Error(
        "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set " +
          "(every pod has them); the plugin's kubeconfig points at them",
      );
    const namespace = pluginAccountNamespace(opts);
    if (!namespace) {
      throw new Error(
        `the plugin's service account ${opts.pluginServiceAccount} is in meshcni's namespace, which is ` +
          "unknown: set POD_NAMESPACE (the DaemonSet sets it) or mount the service account's namespace file in " +
          opts.serviceAccountDir,
      );
    }
    const { host, port } = service;
    const api = serviceAccountApi({ host, port, serviceAccountDir: opts.serviceAccountDir });
    const account = { namespace, name: opts.pluginServiceAccount };
    const tokens = new PluginTokenSource({ api, account, seconds: opts.pluginTokenSeconds, log });
    const inst = new Installer(config, { ...baseDeps, tokens });
    if (opts.mode === "once") {
      log.info(
        `meshcni-installer ${VERSION}: installing once (net dir ${opts.hostNetDir}, bin dir ${opts.hostBinDir})`,
      );
      const health =
        opts.healthPort === undefined ? undefined : serveHealth(opts.healthPort, { check: () => inst.check() });
      const tokenStop = new AbortController();
      let kick = () => {};
      tokens.onToken = () => kick();
      startPluginTokens(inst, tokens, log, AbortSignal.any([stop.signal, tokenStop.signal]));
      try {
        const deps = { watch: watchDir, log, reconcileOn: (k: () => void) => (kick = k) };
        const installed = await runInstall(inst, "once", deps, stop.signal);
        return installed ? 0 : 1;
      } finally {
        tokenStop.abort();
        health?.stop();
      }
    }
    log.info(
      `meshcni-installer ${VERSION}: installing, keeping meshcni chained and answering the plugin ` +
        `(net dir ${opts.hostNetDir}, bin dir ${opts.hostBinDir}, node ${opts.nodeName ?? "unknown"})`,
    );
    return await runAgent(opts, inst, api, tokens, entry, log, stop.signal);
  } catch (e) {
    log.error((e as Error).message);
    return 1;
  }
}

// Built alone (bun build internal/agent/run.ts); in dist/meshcni, cmd/node.ts loads this module and calls main.
if (import.meta.main) process.exit(await main());
