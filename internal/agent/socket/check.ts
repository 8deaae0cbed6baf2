// CHECK answered by an agent that applies rules (POST /v1/check, protocol.ts): the plugin's own
// run.ts, run in the agent, with the pod from the watch cache and the backend's CHECK run in the
// pod's namespace with the agent's own userland (internal/firewall/io/open-in-netns.ts), looking
// with the backend the container's record names. The plugin then prints the verdict and starts
// no process. Whatever the agent cannot do here (a pod it cannot look up, a Service or the pod's
// addresses, a backend its image lacks) is declined (409), and the plugin runs CHECK itself.
import { existsSync } from "node:fs";
import type { Userland } from "../../firewall/namespace-choice.ts";
import { openAgentFirewall } from "../../firewall/io/open-in-netns.ts";
import type { Firewall, KubeClient, PluginDeps } from "../../plugin/deps.ts";
import { NotPlannable } from "../../plugin/deps.ts";
import { logContext, parseLevel } from "../../plugin/log.ts";
import { peekConf } from "../../plugin/peek.ts";
import { runPlugin } from "../../plugin/run.ts";
import type { AddRequest, CheckAnswer, Report } from "../../wire/protocol.ts";
import { safeContainerId } from "../../wire/state.ts";
import { buildReport, completeSummary, type Summary } from "../../wire/summary.ts";
import type { LookupResult, PodLookup } from "../types.ts";
import { cacheClient, otherStateDir, requestUid } from "./plan-add.ts";

export interface CheckerDeps {
  lookup: PodLookup;
  stateDir: string;
  onLookup(result: LookupResult): void;
  /** The agent's version: a plugin of another runs CHECK itself. Unset: any version. */
  version?: string;
  /** Why CNI_NETNS is not a namespace in the agent's netns folder, or undefined. */
  netnsProblem(path: string | undefined): string | undefined;
  /** CNI_NETNS as the agent opens it. */
  netnsPath(cniNetns: string): string;
  userland: Userland;
  /** The backend label of the container's record, when the agent holds one. */
  recordedBackend(containerId: string | undefined): string | undefined;
  open?: typeof openAgentFirewall;
}

export type CheckResult = { ok: true; answer: CheckAnswer } | { ok: false; why: string; lookupFailed?: boolean };

export function createChecker(d: CheckerDeps): (req: AddRequest, signal?: AbortSignal) => Promise<CheckResult> {
  const open = d.open ?? openAgentFirewall;
  return async (req, given) => {
    const signal = given ?? new AbortController().signal;
    if (d.version !== undefined && req.version !== d.version)
      return { ok: false, why: `the plugin is ${req.version}, the agent ${d.version}: the plugin checks itself` };
    if (req.env.CNI_COMMAND !== "CHECK")
      return { ok: false, why: `only CHECK is answered here, not ${req.env.CNI_COMMAND}` };
    const netns = d.netnsProblem(req.env.CNI_NETNS);
    if (netns !== undefined) return { ok: false, why: netns };
    const conf = peekConf(req.stdin);
    const otherState = otherStateDir(conf, d.stateDir);
    if (otherState !== undefined) return { ok: false, why: otherState };
    const uid = requestUid(req);
    let declined: NotPlannable | undefined;
    const note = (e: unknown): never => {
      if (e instanceof NotPlannable) declined ??= e;
      throw e;
    };
    const notHere = (what: string) => async (): Promise<never> =>
      note(new NotPlannable(`${what} is the plugin's to do`));
    const recorded = d.recordedBackend(req.env.CNI_CONTAINERID);
    let backend: string | undefined;
    const lines: string[] = [];
    const kube = cacheClient(d, uid, d.onLookup, signal);
    const guarded: KubeClient = {
      getPod: (ns, name, s) => kube.getPod(ns, name, s).catch(note),
      getNamespace: (name, s) => kube.getNamespace(name, s).catch(note),
      getService: (ns, name, s) => kube.getService(ns, name, s).catch(note),
      lookup: () => kube.lookup?.(),
    };
    const deps: PluginDeps = {
      openKube: async () => guarded,
      async openFirewall(path, settings, families): Promise<Firewall> {
        const o = await open({
          path: d.netnsPath(path),
          settings,
          families,
          userland: d.userland,
          ...(recorded !== undefined ? { recorded } : {}),
        });
        if ("missing" in o) return note(new NotPlannable(`${o.why}: the agent's image has no ${o.missing}`));
        backend = o.fw.backend;
        return o.fw;
      },
      hostProblems: notHere("STATUS"),
      netnsExists: async (path) => existsSync(d.netnsPath(path)),
      podAddresses: notHere("reading the pod's addresses"),
      writeFile: notHere("a dry run"),
      logSink: (line) => lines.push(line),
    };
    const out = await runPlugin({
      getenv: (k) => req.env[k as keyof AddRequest["env"]],
      readStdin: async () => req.stdin,
      deps,
      deadline: signal,
    });
    if (declined)
      return declined.lookupFailed
        ? { ok: false, why: declined.message, lookupFailed: true }
        : { ok: false, why: declined.message };
    if (signal.aborted) return { ok: false, why: "the plugin stopped waiting for this CHECK" };
    const answer: CheckAnswer = {
      v: 1,
      stdout: out.stdout,
      exitCode: out.exitCode,
      lines,
      level: parseLevel(typeof conf?.log_level === "string" ? conf.log_level : undefined),
      context: logContext("CHECK", safeContainerId(req.env.CNI_CONTAINERID) ? req.env.CNI_CONTAINERID : undefined),
      summary: out.summary as CheckAnswer["summary"],
    };
    if (backend !== undefined && out.summary.outcome === "meshed") answer.backend = backend;
    return { ok: true, answer };
  };
}

/** The report of a CHECK the agent answered itself, as the plugin would have sent it. */
export function buildCheckReport(req: AddRequest, a: CheckAnswer, answeredMs: number, version: string): Report {
  const startedMs = req.startedMs ?? answeredMs;
  const summary = completeSummary({ ...a.summary } as Summary, "CHECK", req.env.CNI_ARGS);
  if (a.backend) summary.backend = a.backend;
  return buildReport({
    command: "CHECK",
    containerId: req.env.CNI_CONTAINERID,
    summary,
    lines: a.lines,
    started: new Date(startedMs),
    durationMs: Math.max(0, answeredMs - startedMs),
    version,
  });
}
