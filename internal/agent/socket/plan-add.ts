// The node agent plans the plugin's ADD (POST /v1/add, wire/protocol.ts): the plugin's own run.ts,
// run in the agent with planOnly, on PluginDeps that answer from the watch cache and write the
// container's record. The agent is a warm process; an agent that can enter pods' namespaces
// (internal/agent/apply/) then applies a meshed pod's plan itself and writes the record after the
// rules, and the plugin only prints its result; otherwise the plugin applies the plan
// (internal/plugin/agent/add.ts). Either way a warm ADD loads no config schema, no mesh profile
// and no API client in the plugin. Everything the agent cannot do for the plugin (the pod's namespace addresses, a
// Service, a pod it cannot look up, a dry run) is NotPlannable: 409, and the plugin runs the
// whole ADD itself exactly as without an agent; so is a plugin of another version than the agent
// (a rollout), which then decides with its own rules. The plugin checks every plan against the
// model before applying it.
import { CniError, renderError } from "../../cni/errors.ts";
import { parseK8sArgs } from "../../cni/k8s-args.ts";
import { Code } from "../../cni/spec.ts";
import { type KubeClient, NotPlannable, type PluginDeps } from "../../plugin/deps.ts";
import { logContext, parseLevel, renderLine } from "../../plugin/log.ts";
import { escapeText } from "../../text/escape.ts";
import { peekConf } from "../../plugin/peek.ts";
import { safeContainerId } from "../../wire/state.ts";
import { checkUid } from "../../plugin/pod-uid.ts";
import { runPlugin } from "../../plugin/run.ts";
import { buildReport, completeSummary, type Summary } from "../../wire/summary.ts";
import { cachedNamespace, cachedPod } from "../cache/parsed.ts";
import { ADD_ENV_KEYS, type AddAnswer, type AddRequest, DEFAULT_STATE_DIR, type Report } from "../../wire/protocol.ts";
import type { PodRecord } from "../../wire/state.ts";
import type { LookupResult, PodLookup } from "../types.ts";
import type { Applier } from "../apply/apply.ts";

export interface PlannerDeps {
  lookup: PodLookup;
  /** The agent's state folder (the same host path the plugin's `state_dir` names). */
  stateDir: string;
  /** Writes a record atomically in the agent's state folder. */
  writeRecord(stateDir: string, record: PodRecord): Promise<void>;
  /** A skipped pod's record, written after the answer, could not be written (the agent says so). */
  onRecordError?(record: PodRecord, e: Error): void;
  onLookup(result: LookupResult): void;
  /**
   * The agent's version: a plugin of another (a rollout, before the new agent copied its binary
   * in, or an agent that cannot) runs its ADD itself, with its own rules. Unset: any version.
   */
  version?: string;
  /**
   * Why CNI_NETNS is not a network namespace the agent sees on this node, or undefined when it
   * is. Every planned ADD writes a record: one for a namespace that is not there (a forged
   * request) is declined, and the plugin runs it itself.
   */
  netnsProblem(path: string | undefined): string | undefined;
  /** Why the agent writes no more records (it holds its bound of them), or undefined. */
  recordsFull?(): string | undefined;
  /**
   * Applies a meshed pod's plan in its namespace: an agent that can enter namespaces
   * (internal/agent/apply/apply.ts), with `netnsPath`, CNI_NETNS as the agent opens it (in its
   * netns folder). Without it the plugin applies every plan.
   */
  apply?: { applier: Applier; netnsPath(cniNetns: string): string };
}

export type PlanAnswer =
  | { ok: true; answer: AddAnswer }
  | { ok: false; why: string; lookupFailed?: boolean; recordsFull?: boolean };

const isObj = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);

/** The request in `body`, or why it is not one. */
export function parseAddRequest(body: unknown): AddRequest | string {
  if (!isObj(body) || body.v !== 1) return "not an AddRequest (v: 1)";
  if (typeof body.version !== "string" || typeof body.stdin !== "string" || !isObj(body.env))
    return "an AddRequest needs version, env and stdin";
  const env: AddRequest["env"] = {};
  for (const k of ADD_ENV_KEYS) {
    const v = body.env[k];
    if (v === undefined) continue;
    if (typeof v !== "string") return `env.${k} is not a string`;
    env[k] = v;
  }
  const out: AddRequest = { v: 1, version: body.version, env, stdin: body.stdin };
  if (body.startedMs !== undefined) {
    // The plugin's start on this node's clock: within a minute ahead (a clock stepped back
    // meanwhile) and an hour behind.
    const ms = body.startedMs;
    const now = epochNow();
    if (typeof ms !== "number" || !(ms <= now + 60_000 && ms > now - 3_600_000))
      return "startedMs is not the time the command started (ms since the epoch, this node's clock)";
    out.startedMs = ms;
  }
  return out;
}

/**
 * Now in ms since the epoch, to the plugin's precision: the process's start plus the monotonic
 * clock, unless the wall clock has been stepped since the agent started (NTP, by more than a
 * few ms; the agent runs for days), then the wall clock itself.
 */
export function epochNow(): number {
  const precise = performance.timeOrigin + performance.now();
  const wall = Date.now();
  return Math.abs(precise - wall) < 5 ? precise : wall;
}

/**
 * Whether the agent may report this ADD itself: its answer has no plan for the plugin to apply
 * (no rules, or rules the agent applied: the plugin only prints it, so it has nothing to add) and
 * the plugin said when it started. A plan is the plugin's to report, once it knows how applying it
 * went. (The handler also makes sure the plugin will take the answer and is still waiting for it.)
 */
export function reportsItself(req: AddRequest, a: AddAnswer): boolean {
  return a.apply === undefined && req.startedMs !== undefined;
}

/**
 * The report of an ADD the agent answered itself (reportsItself), as the plugin would have sent
 * it, its duration from the plugin's start to `answeredMs` (ms since the epoch).
 */
export function buildAnsweredReport(req: AddRequest, a: AddAnswer, answeredMs: number, version: string): Report {
  const startedMs = req.startedMs ?? answeredMs;
  const summary = completeSummary({ ...a.summary } as Summary, "ADD", req.env.CNI_ARGS);
  if (a.applied) summary.backend = a.applied.backend;
  return buildReport({
    command: "ADD",
    containerId: req.env.CNI_CONTAINERID,
    summary,
    lines: a.lines,
    started: new Date(startedMs),
    durationMs: Math.max(0, answeredMs - startedMs),
    version,
  });
}

/**
 * Why the agent cannot answer for this plugin's records: the entry's state_dir (`conf`, peeked as
 * the plugin will read it; run.ts's schema checks it properly) is not the agent's.
 */
export function otherStateDir(conf: ReturnType<typeof peekConf>, agentStateDir: string): string | undefined {
  const stateDir = conf ? (conf.state_dir ?? DEFAULT_STATE_DIR) : undefined;
  if (stateDir === undefined || stateDir === agentStateDir) return undefined;
  return `the plugin's state_dir ${JSON.stringify(stateDir)} is not the agent's ${agentStateDir}`;
}

/** The pod UID CNI_ARGS names, if any (invalid CNI_ARGS: undefined, run.ts answers the error). */
export function requestUid(req: AddRequest): string | undefined {
  try {
    return parseK8sArgs(req.env.CNI_ARGS).podUid;
  } catch {
    return undefined;
  }
}

/** Pods and namespaces from the agent's lookup; anything else is the plugin's to fetch. */
export function cacheClient(
  d: { lookup: PodLookup },
  uid: string | undefined,
  seen: (r: LookupResult) => void,
  plugin: AbortSignal,
): KubeClient {
  let found: Extract<LookupResult, { ok: true }> | undefined;
  let podKey = "";
  return {
    async getPod(namespace, name, signal) {
      let r: LookupResult;
      try {
        r = await d.lookup.lookup(namespace, name, uid, AbortSignal.any([signal, plugin]));
      } catch (e) {
        throw new NotPlannable(`the agent could not look up pod ${namespace}/${name}: ${(e as Error).message}`, true);
      }
      seen(r);
      // 404 is final (the plugin would answer the same from the agent); anything else falls back.
      if (!r.ok) {
        if (r.status === 404) throw new CniError(Code.PodNotFound, r.error.msg, r.error.details ?? "");
        throw new NotPlannable(`${r.error.msg}${r.error.details ? `: ${r.error.details}` : ""}`, true);
      }
      checkUid(r.pod, uid, namespace, name, "in the agent's cache");
      const pod = cachedPod(r.pod);
      if (!pod) throw new NotPlannable(`the agent holds something that is not a Pod for ${namespace}/${name}`);
      found = r;
      podKey = namespace;
      return pod;
    },
    async getNamespace(name) {
      const ns = found && name === podKey ? cachedNamespace(found.namespace) : undefined;
      if (!ns) throw new NotPlannable(`the agent does not hold namespace ${name}`);
      return ns;
    },
    async getService(namespace, name) {
      throw new NotPlannable(`the pod needs service ${namespace}/${name}, which the agent does not watch`);
    },
    lookup: () => (found ? { source: found.source === "api" ? "agent-api" : "agent-cache" } : undefined),
  };
}

const safeId = (id: string | undefined) => (safeContainerId(id) ? id : undefined);

const notHere = (what: string) => async (): Promise<never> => {
  throw new NotPlannable(`${what} is the plugin's to do`);
};

/**
 * The planner. `signal`: the plugin's patience (its connection, the agent's bound on an answer);
 * once it aborts the lookup is given up and no record is written, since the plugin has gone on
 * to run the ADD itself (or the runtime to DEL).
 */
export function createAddPlanner(d: PlannerDeps): (req: AddRequest, signal?: AbortSignal) => Promise<PlanAnswer> {
  return async (req, given) => {
    const signal = given ?? new AbortController().signal;
    if (d.version !== undefined && req.version !== d.version)
      return {
        ok: false,
        why: `the plugin is ${req.version}, the agent ${d.version}: the plugin decides with its own rules`,
      };
    if (req.env.CNI_COMMAND !== "ADD") return { ok: false, why: `only ADD is planned, not ${req.env.CNI_COMMAND}` };
    const netns = d.netnsProblem(req.env.CNI_NETNS);
    if (netns !== undefined) return { ok: false, why: netns };
    const full = d.recordsFull?.();
    if (full !== undefined) return { ok: false, why: full, recordsFull: true };
    const conf = peekConf(req.stdin);
    const otherState = otherStateDir(conf, d.stateDir);
    if (otherState !== undefined) return { ok: false, why: otherState };
    const uid = requestUid(req);
    const lines: string[] = [];
    let recorded = false;
    // A meshed pod's record, held while the agent applies its rules: written after them.
    let held: { dir: string; record: PodRecord } | undefined;
    const deps: PluginDeps = {
      openKube: async () => cacheClient(d, uid, d.onLookup, signal),
      openFirewall: notHere("the firewall"),
      hostProblems: notHere("STATUS"),
      netnsExists: notHere("reading the pod's network namespace"),
      podAddresses: notHere("reading the pod's addresses"),
      writeFile: notHere("a dry run"),
      records: {
        read: notHere("reading a record"),
        async write(dir, record) {
          if (signal.aborted) throw new NotPlannable("the plugin stopped waiting for this plan");
          if (record.decision !== "skipped") {
            if (d.apply) {
              held = { dir, record };
              recorded = true;
              return;
            }
            await d.writeRecord(dir, record);
            recorded = true;
            return;
          }
          recorded = true;
          // A pod that gets no rules: its record is written just after the answer, off the
          // plugin's wait. It only names the pod for DEL's report and tells repair the pod went
          // through the plugin; a DEL that finds none does the same (nothing), and repair waits
          // longer than this before it judges a pod.
          setImmediate(() => d.writeRecord(dir, record).catch((e: Error) => d.onRecordError?.(record, e)));
        },
        remove: notHere("removing a record"),
        prune: notHere("pruning records"),
      },
      logSink: (line) => lines.push(line),
    };
    let out;
    try {
      signal.throwIfAborted();
      out = await runPlugin({
        getenv: (k) => req.env[k as keyof AddRequest["env"]],
        readStdin: async () => req.stdin,
        deps,
        planOnly: true,
      });
    } catch (e) {
      if (e instanceof NotPlannable)
        return e.lookupFailed ? { ok: false, why: e.message, lookupFailed: true } : { ok: false, why: e.message };
      if (signal.aborted) return { ok: false, why: "the plugin stopped waiting for this plan" };
      throw e;
    }
    const level = parseLevel(typeof conf?.log_level === "string" ? conf.log_level : undefined);
    const answer: AddAnswer = {
      // An invalid container ID (answered with code 4) is no context: run.ts's lines had none.
      v: 1,
      stdout: out.stdout,
      exitCode: out.exitCode,
      lines,
      level,
      context: logContext("ADD", safeId(req.env.CNI_CONTAINERID)),
      summary: out.summary,
      record: recorded,
    };
    if (out.cniVersion !== undefined) answer.cniVersion = out.cniVersion;
    if (!out.planned) return { ok: true, answer };
    const planned = out.planned;
    if (d.apply && held && req.env.CNI_NETNS) {
      const r = await d.apply.applier({
        path: d.apply.netnsPath(req.env.CNI_NETNS),
        plan: planned.plan,
        settings: planned.settings,
        reason: planned.reason,
        level,
        context: answer.context,
        signal,
      });
      if (r.kind === "applied") {
        lines.push(...r.lines);
        await d.writeRecord(held.dir, { ...held.record, backend: r.backend });
        answer.applied = { backend: r.backend, rules: r.rules };
        return { ok: true, answer };
      }
      if (r.kind === "failed") {
        // Nothing applied (the backends roll back) and no record: the ADD fails, closed.
        lines.push(...r.lines);
        const e = r.error;
        const reason = `${e.msg}${e.details ? `: ${e.details}` : ""}`;
        const summary = { ...answer.summary, outcome: "failed" as const, reason, code: e.code };
        delete summary.rules;
        const failed: AddAnswer = {
          ...answer,
          stdout: renderError(e, out.cniVersion),
          exitCode: 1,
          summary,
          record: false,
        };
        return { ok: true, answer: failed };
      }
      // The agent's image lacks what this pod needs: the plugin applies the plan, as before.
      const line = renderLine(
        level,
        "debug",
        answer.context,
        escapeText(`the agent does not apply this plan: ${r.why}`),
      );
      if (line) lines.push(line);
      await d.writeRecord(held.dir, held.record);
    } else if (held) await d.writeRecord(held.dir, held.record);
    answer.apply = { plan: planned.plan, settings: planned.settings };
    return { ok: true, answer };
  };
}
