// The plugin's commands: from a validated environment and config to stdout and an exit code.
// Everything the host provides comes in through PluginDeps.
import { type CmdArgs, type Getenv, parseCmdArgs } from "../cni/env.ts";
import { CniError, renderError, toCniError } from "../cni/errors.ts";
import { parseK8sArgs } from "../cni/k8s-args.ts";
import { convertResult, renderAddResult, resultAddresses } from "../cni/result.ts";
import { Code, compareVersions, renderVersionInfo } from "../cni/spec.ts";
import { type PluginConf, parsePluginConf } from "../config/plugin-config.ts";
import type { Namespace, Pod, Service } from "../kube/objects.ts";
import { loadProfile } from "../mesh/load.ts";
import { backendOfMode, type FirewallSettings } from "../firewall/registry.ts";
import { type MeshProfile, needsNamespace, type PlanInput, type Redirect } from "../mesh/profile.ts";
import { type KubeClient, NotPlannable, type PluginDeps } from "./deps.ts";
import { createLogger, type PluginLogger, logContext, parseLevel } from "./log.ts";
import { countRules } from "../plan/model.ts";
import { checkUid } from "./pod-uid.ts";
import { skipBeforeLookup } from "./pre-api.ts";
import { addRecord, delByRecord, gcRecords } from "./records.ts";
import type { Summary } from "../wire/summary.ts";

export interface Invocation {
  getenv: Getenv;
  readStdin(): Promise<string>;
  deps: PluginDeps;
  /**
   * The node agent plans an ADD for the plugin (internal/agent/socket/plan-add.ts): everything up to
   * the rules, which it hands back in Outcome.planned instead of applying them. Its deps throw
   * NotPlannable where only the plugin can go on, and then so does runPlugin.
   */
  planOnly?: boolean;
  /** The command's bound when it started before runPlugin (the plugin asked the agent first). */
  deadline?: AbortSignal;
}

/** An ADD planned by the agent: the rules the plugin applies (internal/plugin/agent/add.ts). */
export interface PlannedApply {
  plan: Redirect;
  settings: FirewallSettings;
  /** The decision's reason, for the plugin's "applied" line. */
  reason: string;
}

export interface Outcome {
  stdout: string;
  exitCode: 0 | 1;
  /** What happened, for the report to the node agent. */
  summary: Summary;
  /** planOnly: the rules still to apply (absent when the pod gets none or the command failed). */
  planned?: PlannedApply;
  /** The request's cniVersion, for an error the plugin renders after a planned ADD. */
  cniVersion?: unknown;
}

interface Ctx {
  args: CmdArgs;
  conf: PluginConf;
  profile: MeshProfile;
  deps: PluginDeps;
  log: PluginLogger;
  signal: AbortSignal;
  summary: Summary;
  planOnly?: boolean;
  planned?: PlannedApply;
}

type Target =
  | { redirect: false; reason: string; k8s?: boolean }
  | {
      redirect: true;
      reason: string;
      pod: Pod;
      namespace?: Namespace;
      kubernetesService?: Service | null;
      name: string;
    };

/**
 * Which pod this is and whether it gets rules. Pods outside Kubernetes and excluded namespaces
 * are decided before any API call, so an API outage or a stale token never blocks them
 * (meshcni's own DaemonSet pods among them).
 */
async function resolveTarget(ctx: Ctx): Promise<Target> {
  const { conf, profile, deps, signal } = ctx;
  const k8s = parseK8sArgs(ctx.args.args);
  if (!k8s.podName || !k8s.podNamespace) {
    return { redirect: false, reason: "CNI_ARGS names no Kubernetes pod (K8S_POD_NAMESPACE and K8S_POD_NAME)" };
  }
  const name = `${k8s.podNamespace}/${k8s.podName}`;
  ctx.summary.pod = { namespace: k8s.podNamespace, name: k8s.podName, ...(k8s.podUid ? { uid: k8s.podUid } : {}) };
  ctx.summary.lookup = "none";
  const skip = skipBeforeLookup(conf.kubernetes, k8s.podNamespace, k8s.podName);
  if (skip) return { redirect: false, reason: `pod ${name}: ${skip}`, k8s: true };
  const kube = await deps.openKube(conf);
  const pod = await kube.getPod(k8s.podNamespace, k8s.podName, signal);
  // Whichever client read it (its own checks aside): never a pod deleted and created again.
  checkUid(pod, k8s.podUid, k8s.podNamespace, k8s.podName, "as read");
  noteLookup(ctx, kube, pod);
  const decision = profile.decide(pod, conf);
  if (!decision.redirect) return { redirect: false, reason: `pod ${name}: ${decision.reason}`, k8s: true };
  const target: Target = { redirect: true, reason: `pod ${name}: ${decision.reason}`, pod, name };
  if (needsNamespace(profile, pod)) target.namespace = await kube.getNamespace(k8s.podNamespace, signal);
  // Only for the pods that need it (Linkerd's control plane): one more GET, never fatal.
  if (profile.needsKubernetesService?.(pod)) {
    try {
      target.kubernetesService = await kube.getService("default", "kubernetes", signal);
    } catch (e) {
      if (e instanceof NotPlannable) throw e;
      ctx.log.warn(
        `could not read service default/kubernetes, skipping the API server's usual ports: ${(e as Error).message}`,
      );
      target.kubernetesService = null;
    }
  }
  return target;
}

/** Where the pod came from, for the report; the pod's UID when the runtime sent none. */
function noteLookup(ctx: Ctx, kube: KubeClient, pod: Pod): void {
  const found = kube.lookup?.();
  ctx.summary.lookup = found?.source ?? "kubeconfig";
  if (found?.fallback) ctx.log.info(`read the pod through the kubeconfig: ${found.fallback}`);
  const uid = (pod.metadata as { uid?: unknown }).uid;
  if (ctx.summary.pod && ctx.summary.pod.uid === undefined && typeof uid === "string") ctx.summary.pod.uid = uid;
}

/**
 * The pod's addresses: the previous result's, else (for a profile that reads them) the ones in
 * its network namespace. A namespace that is not there gives none: a dry run goes on with
 * them, a real ADD fails on the namespace next.
 */
async function podAddresses(ctx: Ctx): Promise<string[]> {
  const fromResult = resultAddresses(ctx.conf.prevResult);
  const netns = ctx.args.netns;
  if (fromResult.length > 0 || !ctx.profile.readsPodAddresses || !netns) return fromResult;
  if (!(await ctx.deps.netnsExists(netns))) return fromResult;
  const found = await ctx.deps.podAddresses(netns, ctx.signal);
  ctx.log.debug(`the previous result names no address; in the pod's namespace: ${JSON.stringify(found)}`);
  return found;
}

async function plan(ctx: Ctx, target: Target & { redirect: true }): Promise<Redirect> {
  const input: PlanInput = { conf: ctx.conf, pod: target.pod, podAddresses: await podAddresses(ctx) };
  if (target.namespace) input.namespace = target.namespace;
  if (target.kubernetesService !== undefined) input.kubernetesService = target.kubernetesService;
  return ctx.profile.plan(input);
}

async function netnsOf(ctx: Ctx): Promise<string> {
  const netns = ctx.args.netns!;
  if (!(await ctx.deps.netnsExists(netns))) {
    throw new CniError(
      Code.InvalidEnvironment,
      "CNI_NETNS does not exist",
      `${netns} is not there; the container may have gone`,
    );
  }
  return netns;
}

/**
 * Everything the plan would apply, as the mode's backend writes it: what MESHCNI_DRY_RUN_FILE
 * receives and `simulate` logs. The backend's code loads only here, once a pod gets rules: an ADD
 * of a pod that is not meshed, and every DEL decided by its record, never load it.
 */
async function payloadsOf(redirect: Redirect, mode: string): Promise<string> {
  return (await backendOfMode(mode)).render(redirect);
}

async function add(ctx: Ctx): Promise<string> {
  const { conf, deps, log } = ctx;
  // The same text the plugin prints for an ADD the agent decides (agent/add.ts).
  const stdout = renderAddResult(conf.prevResult, conf.cniVersion);
  const target = await resolveTarget(ctx);
  if (!target.redirect) {
    log.info(`no rules: ${target.reason}`);
    Object.assign(ctx.summary, { outcome: "skipped", reason: target.reason });
    if (deps.dryRunFile) await deps.writeFile(deps.dryRunFile, "");
    else if (target.k8s) await addRecord(ctx, { decision: "skipped", reason: target.reason });
    return stdout;
  }
  const redirect = await plan(ctx, target);
  const settings = ctx.profile.firewall(conf);
  if (deps.dryRunFile) {
    await deps.writeFile(deps.dryRunFile, await payloadsOf(redirect, settings.mode));
    // The variable alone (a stray line in the runtime's environment): no meshed pod starts unmeshed.
    if (!conf.dry_run) {
      throw new CniError(
        Code.InvalidEnvironment,
        "MESHCNI_DRY_RUN_FILE is set: no rules applied",
        `${target.reason}, but the plugin's environment has MESHCNI_DRY_RUN_FILE, so its ${countRules(redirect)} ` +
          `rules went to ${deps.dryRunFile} instead; remove the variable from the container runtime's environment, ` +
          `or say "dry_run": true in the conflist entry for a dry run`,
      );
    }
    log.info(`dry run: ${target.reason}; ${countRules(redirect)} rules written to ${deps.dryRunFile}`);
    Object.assign(ctx.summary, { outcome: "ok", reason: `dry run: ${target.reason}`, rules: countRules(redirect) });
    return stdout;
  }
  if (settings.simulate) {
    log.info(`simulate: ${target.reason}; would apply:\n${await payloadsOf(redirect, settings.mode)}`);
    Object.assign(ctx.summary, { outcome: "skipped", reason: `simulate: ${target.reason}` });
    await addRecord(ctx, { decision: "skipped", reason: `simulate: ${target.reason}` });
    return stdout;
  }
  if (ctx.planOnly) {
    // The agent's record says "meshed" before the plugin applies: a DEL then removes whatever
    // is there, and the plugin deletes the record again when its apply fails.
    ctx.planned = { plan: redirect, settings, reason: target.reason };
    Object.assign(ctx.summary, { outcome: "meshed", reason: target.reason, rules: countRules(redirect) });
    await addRecord(ctx, {
      decision: "meshed",
      reason: target.reason,
      families: redirect.families.map((r) => r.family),
    });
    return stdout;
  }
  const applying = import("../firewall/apply.ts");
  const fw = await deps.openFirewall(
    await netnsOf(ctx),
    settings,
    redirect.families.map((r) => r.family),
  );
  if (fw.warning) log.warn(fw.warning);
  await (await applying).applyPlan(fw, redirect, log, ctx.signal);
  log.info(
    `${target.reason}; applied ${countRules(redirect)} rules ` +
      `(${fw.backend}, IPv${redirect.families.map((r) => r.family).join("+IPv")})`,
  );
  // Rendered again only when debug lines are kept.
  if (log.enabled("debug")) log.debug(`applied:\n${fw.driver.render(redirect)}`);
  Object.assign(ctx.summary, {
    outcome: "meshed",
    reason: target.reason,
    rules: countRules(redirect),
    backend: fw.backend,
  });
  await addRecord(ctx, {
    decision: "meshed",
    reason: target.reason,
    backend: fw.backend,
    families: redirect.families.map((r) => r.family),
  });
  return stdout;
}

async function check(ctx: Ctx): Promise<string> {
  const { conf, deps, log } = ctx;
  if (conf.prevResult) convertResult(conf.prevResult, conf.cniVersion);
  const target = await resolveTarget(ctx);
  if (!target.redirect) {
    log.debug(`no rules expected: ${target.reason}`);
    Object.assign(ctx.summary, { outcome: "skipped", reason: target.reason });
    return "";
  }
  const redirect = await plan(ctx, target);
  const settings = ctx.profile.firewall(conf);
  if (deps.dryRunFile || settings.simulate) return "";
  const fw = await deps.openFirewall(
    await netnsOf(ctx),
    settings,
    redirect.families.map((r) => r.family),
  );
  if (fw.warning) log.warn(fw.warning);
  const problems = await fw.driver.verify(fw, redirect, ctx.signal);
  if (problems.length > 0) {
    throw new CniError(
      Code.RulesMissing,
      `meshcni's rules for ${target.name} are not in place`,
      `${problems.join("; ")}; delete the pod so it is recreated with its rules`,
    );
  }
  Object.assign(ctx.summary, {
    outcome: "meshed",
    reason: `${target.reason}; rules in place`,
    rules: countRules(redirect),
  });
  return "";
}

/**
 * DEL: the container's record goes (records.ts). No rule is removed: the runtime destroys the
 * namespace right after, and an ADD into a namespace that is kept replaces them.
 */
async function del(ctx: Ctx): Promise<string> {
  ctx.summary.reason = "no rules to remove";
  if (!ctx.deps.dryRunFile) await delByRecord(ctx);
  return "";
}

async function status(ctx: Ctx): Promise<string> {
  const settings = ctx.profile.firewall(ctx.conf);
  const problems = await ctx.deps.hostProblems(ctx.conf, settings, ctx.profile.families(ctx.conf));
  if (problems.length > 0) {
    throw new CniError(Code.PluginNotAvailable, "meshcni cannot set up pods on this node", problems.join("; "));
  }
  return "";
}

function requireVersion(conf: PluginConf, command: string, min: string): void {
  if (compareVersions(conf.cniVersion, min) < 0) {
    throw new CniError(
      Code.IncompatibleVersion,
      `config version does not allow ${command}`,
      `${command} needs cniVersion ${min} or later, the config says ${conf.cniVersion}`,
    );
  }
}

function peekVersion(stdin: string): unknown {
  try {
    return (JSON.parse(stdin) as { cniVersion?: unknown })?.cniVersion;
  } catch {
    return undefined;
  }
}

/**
 * Dry run comes from MESHCNI_DRY_RUN_FILE in the environment (a promise to users), and is never
 * silent: libcni hands the plugin the runtime's whole environment, so a stray line in a runtime's
 * unit file would turn enforcement off. Without `"dry_run": true` in the conflist entry saying it
 * is meant, every call says so at error level (on stderr and in the report the agent prints), and
 * an ADD of a meshed pod fails (code 4, add()) once its payload is written, so no pod starts
 * unmeshed. `"dry_run": true` without the variable is a configuration error.
 */
function dryRunGate(conf: PluginConf, deps: PluginDeps, log: PluginLogger): PluginDeps {
  const { dryRunFile, ...rest } = deps;
  if (!dryRunFile) {
    if (conf.dry_run) {
      throw new CniError(
        Code.InvalidConfig,
        "dry_run needs MESHCNI_DRY_RUN_FILE",
        `the conflist entry says "dry_run": true but the plugin's environment has no MESHCNI_DRY_RUN_FILE; ` +
          `remove "dry_run" to apply rules`,
      );
    }
    return rest;
  }
  if (!conf.dry_run) {
    log.error(
      "dry run: MESHCNI_DRY_RUN_FILE is set in the plugin's environment, so no rules are applied to this pod " +
        "(payloads go to the file) and an ADD of a meshed pod fails; if this is not meant, remove it from the " +
        'container runtime\'s environment (or say "dry_run": true in the conflist entry for a dry run)',
    );
  } else {
    log.warn(
      `dry run ("dry_run": true and MESHCNI_DRY_RUN_FILE): no rules are applied to this pod; payloads go to the file`,
    );
  }
  return deps;
}

export async function runPlugin(inv: Invocation): Promise<Outcome> {
  let requestVersion: unknown;
  let log = createLogger("info", inv.deps.logSink);
  const summary: Summary = { outcome: "ok", reason: "" };
  try {
    if (!inv.getenv("CNI_COMMAND")) parseCmdArgs(inv.getenv); // throws the missing-variable error
    const stdin = await inv.readStdin();
    requestVersion = peekVersion(stdin);
    const args = parseCmdArgs(inv.getenv);
    // The same answer as cmd/plugin.ts's fast path.
    if (args.command === "VERSION") return { stdout: `${renderVersionInfo()}\n`, exitCode: 0, summary };
    const conf = parsePluginConf(stdin);
    log = createLogger(parseLevel(conf.log_level), inv.deps.logSink, logContext(args.command, args.containerId));
    const profile = await loadProfile(conf.mesh);
    if (!profile)
      throw new CniError(
        Code.InvalidConfig,
        "unsupported mesh",
        `mesh ${JSON.stringify(conf.mesh)} is not available in this build`,
      );
    const deps = dryRunGate(conf, inv.deps, log);
    const bound = AbortSignal.timeout(conf.timeout_seconds * 1000);
    const ctx: Ctx = {
      args,
      conf,
      profile,
      deps,
      log,
      signal: inv.deadline ? AbortSignal.any([bound, inv.deadline]) : bound,
      summary,
    };
    if (inv.planOnly) {
      if (args.command !== "ADD" || deps.dryRunFile)
        throw new NotPlannable(
          `only ADD is planned by the agent, not ${args.command}${deps.dryRunFile ? " (dry run)" : ""}`,
        );
      ctx.planOnly = true;
      const stdout = await add(ctx);
      return {
        stdout,
        exitCode: 0,
        summary,
        ...(ctx.planned ? { planned: ctx.planned } : {}),
        cniVersion: requestVersion,
      };
    }
    switch (args.command) {
      case "ADD":
        return { stdout: await add(ctx), exitCode: 0, summary };
      case "CHECK":
        requireVersion(conf, "CHECK", "0.4.0");
        return { stdout: await check(ctx), exitCode: 0, summary };
      case "DEL":
        return { stdout: await del(ctx), exitCode: 0, summary };
      case "STATUS":
        requireVersion(conf, "STATUS", "1.1.0");
        return { stdout: await status(ctx), exitCode: 0, summary };
      case "GC":
        requireVersion(conf, "GC", "1.1.0");
        await gcRecords(ctx);
        return { stdout: "", exitCode: 0, summary };
    }
  } catch (e) {
    if (inv.planOnly && e instanceof NotPlannable) throw e;
    const err = toCniError(e);
    log.error(`${err.msg}${err.details ? `: ${err.details}` : ""}`);
    Object.assign(summary, {
      outcome: "failed",
      reason: `${err.msg}${err.details ? `: ${err.details}` : ""}`,
      code: err.code,
    });
    return { stdout: renderError(err, requestVersion), exitCode: 1, summary, cniVersion: requestVersion };
  }
}
