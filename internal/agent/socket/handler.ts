// The agent's answers on its Unix socket (wire/protocol.ts), as a fetch handler: Request in, Response
// out. It checks everything it reads and answers what it cannot use with 400, never with 404
// (a 404 means "no such pod" to the plugin). The socket itself is internal/agent/socket/serve.ts.
import { buildAnsweredReport, epochNow, type PlanAnswer, parseAddRequest, reportsItself } from "./plan-add.ts";
import { checkAddAnswer, checkCheckAnswer } from "../../wire/answer.ts";
import { buildCheckReport, type CheckResult } from "./check.ts";
import {
  ADD_PATH,
  AGENT_APPLY_TIMEOUT_MS,
  AGENT_TIMEOUT_MS,
  APPLIES_PATH,
  type AppliesAnswer,
  CHECK_PATH,
  type AddRequest,
  type AgentError,
  MAX_ANSWER_BYTES,
  type PodAnswer,
  REPORTS_PATH,
  type Report,
} from "../../wire/protocol.ts";
import { Code } from "../../cni/spec.ts";
import { MAX_REPORT_BYTES, parseReport } from "../observe/report.ts";
import type { LookupResult, PodLookup } from "../types.ts";

export interface SocketDeps {
  lookup: PodLookup;
  /** Called once the report was answered (204); prints and counts it. */
  onReport(report: Report): void;
  onLookup(result: LookupResult): void;
  onBadRequest(why: string): void;
  /** The bound on one lookup; AGENT_TIMEOUT_MS unless a test says otherwise. */
  timeoutMs?: number;
  /** Plans an ADD for the plugin (plan-add.ts); without it POST /v1/add answers 409. */
  planAdd?(req: AddRequest, signal: AbortSignal): Promise<PlanAnswer>;
  /** Called with every ADD the agent declined to plan, and why. */
  onDeclined?(why: string): void;
  /** Whether the agent applies rules (GET /v1/applies); absent: it does not. */
  applies?(): AppliesAnswer;
  /** Answers CHECK (check.ts): an agent that applies rules; without it POST /v1/check answers 409. */
  check?(req: AddRequest, signal: AbortSignal): Promise<CheckResult>;
}

/** A namespace is a DNS-1123 label; a pod name a DNS-1123 subdomain. */
const LABEL = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const SUBDOMAIN = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
/** Kubernetes UIDs are UUIDs; allow any short token of that alphabet. */
const UID = /^[A-Za-z0-9-]{1,64}$/;

const jsonText = (status: number, text: string) =>
  new Response(text, { status, headers: { "Content-Type": "application/json" } });
const json = (status: number, body: unknown) => jsonText(status, JSON.stringify(body));
const agentError = (status: number, code: number, msg: string, details: string) =>
  json(status, { code, msg, details } satisfies AgentError);

export function createSocketHandler(deps: SocketDeps): (req: Request) => Promise<Response> {
  const bad = (why: string, status = 400) => {
    deps.onBadRequest(why);
    // Code 4 (invalid environment) is what the plugin would log; it falls back either way.
    return agentError(status, 4, "bad request to the meshcni agent", why);
  };

  async function lookup(req: Request, namespace: string, name: string, uid: string | undefined): Promise<Response> {
    const signal = AbortSignal.any([req.signal, AbortSignal.timeout(deps.timeoutMs ?? AGENT_TIMEOUT_MS)]);
    let result: LookupResult;
    try {
      result = await deps.lookup.lookup(namespace, name, uid, signal);
    } catch (e) {
      result = {
        ok: false,
        status: 503,
        error: {
          code: 11,
          msg: "the agent cannot answer",
          details: `looking up pod ${namespace}/${name} failed: ${(e as Error).message}`,
        },
      };
    }
    deps.onLookup(result);
    if (result.ok)
      return json(200, { pod: result.pod, namespace: result.namespace, source: result.source } satisfies PodAnswer);
    return json(result.status, result.error);
  }

  /** The request's body, or the answer when it is too large or cannot be read. */
  async function readBody(req: Request): Promise<string | Response> {
    const declared = Number(req.headers.get("content-length") ?? 0);
    if (declared > MAX_REPORT_BYTES) return bad(`a body of ${declared} bytes; at most ${MAX_REPORT_BYTES}`, 413);
    let body: string;
    try {
      body = await req.text();
    } catch (e) {
      return bad(`the body could not be read: ${(e as Error).message}`);
    }
    if (body.length > MAX_REPORT_BYTES) return bad(`a body of more than ${MAX_REPORT_BYTES} bytes`, 413);
    return body;
  }

  /** A POST's body as the plugin's command (ADD or CHECK), or the answer when it is not one. */
  async function readCommand(req: Request, path: string): Promise<AddRequest | Response> {
    if (req.method !== "POST") return bad(`${req.method} ${path}: only POST`, 405);
    const body = await readBody(req);
    if (typeof body !== "string") return body;
    let parsed: AddRequest | string;
    try {
      parsed = parseAddRequest(JSON.parse(body));
    } catch {
      parsed = "the body is not JSON";
    }
    return typeof parsed === "string" ? bad(parsed) : parsed;
  }

  /** Bounded like a lookup, and given up with the plugin. */
  const commandSignal = (req: Request) =>
    AbortSignal.any([req.signal, AbortSignal.timeout(deps.timeoutMs ?? AGENT_APPLY_TIMEOUT_MS)]);

  /** The agent does not answer this command in full: the plugin goes on without it. */
  const declined = (msg: string, why: string, lookupFailed = false) =>
    // `lookup: "failed"`: asking the agent for the pod again would wait for the same failure.
    json(409, { code: Code.TryAgainLater, msg, details: why, ...(lookupFailed ? { lookup: "failed" } : {}) });

  return async (req) => {
    let url: URL;
    try {
      url = new URL(req.url);
    } catch {
      return bad("the request URL cannot be parsed");
    }
    const path = url.pathname;
    if (path.startsWith("/v1/pods/")) {
      if (req.method !== "GET") return bad(`${req.method} ${path}: only GET`, 405);
      const parts = path.slice("/v1/pods/".length).split("/");
      if (parts.length !== 2) return bad(`${path}: expected /v1/pods/NAMESPACE/NAME`);
      const [namespace, name] = parts as [string, string];
      if (!LABEL.test(namespace)) return bad(`${JSON.stringify(namespace.slice(0, 100))} is not a namespace name`);
      if (!SUBDOMAIN.test(name)) return bad(`${JSON.stringify(name.slice(0, 300))} is not a pod name`);
      const uids = url.searchParams.getAll("uid");
      if (uids.length > 1) return bad("more than one uid");
      const uid = uids[0];
      if (uid !== undefined && !UID.test(uid))
        return bad(`uid ${JSON.stringify(uid.slice(0, 100))} is not a Kubernetes UID`);
      return lookup(req, namespace, name, uid);
    }
    if (path === ADD_PATH) {
      const parsed = await readCommand(req, path);
      if (parsed instanceof Response) return parsed;
      const decline = (why: string, lookupFailed = false) => {
        deps.onDeclined?.(why);
        return declined("the agent does not plan this ADD", why, lookupFailed);
      };
      if (!deps.planAdd) return decline("this agent does not plan ADDs");
      let planned: PlanAnswer;
      try {
        // Given up with the plugin: a plugin that went on without this answer must not find a
        // record written after it.
        planned = await deps.planAdd(parsed, commandSignal(req));
      } catch (e) {
        return decline(`planning failed: ${(e as Error).message}`);
      }
      if (!planned.ok) return decline(planned.why, planned.lookupFailed === true);
      // An answer without rules is the whole ADD: reported here, as the plugin would have (the
      // plugin version's report, for the same lines), built and printed once the answer is out.
      // Only an answer the plugin's own check takes, to a plugin still waiting: one it refuses,
      // or gives up on, it runs and reports itself, so no ADD is reported twice.
      const answer = planned.answer;
      if (reportsItself(parsed, answer) && !req.signal.aborted) {
        const text = JSON.stringify({ ...answer, reported: true });
        const takes = typeof checkAddAnswer(JSON.parse(text), parsed.env.CNI_ARGS) !== "string";
        if (Buffer.byteLength(text) <= MAX_ANSWER_BYTES && takes) {
          const answeredMs = epochNow();
          setImmediate(() => deps.onReport(buildAnsweredReport(parsed, answer, answeredMs, parsed.version)));
          return jsonText(200, text);
        }
      }
      return json(200, answer);
    }
    if (path === APPLIES_PATH) {
      if (req.method !== "GET") return bad(`${req.method} ${path}: only GET`, 405);
      return json(200, deps.applies?.() ?? { applies: false, reason: "this agent does not apply rules" });
    }
    if (path === CHECK_PATH) {
      const parsed = await readCommand(req, path);
      if (parsed instanceof Response) return parsed;
      const decline = (why: string, lookupFailed = false) =>
        declined("the agent does not answer this CHECK", why, lookupFailed);
      if (!deps.check) return decline("this agent does not apply rules, so it does not check them");
      let r: CheckResult;
      try {
        r = await deps.check(parsed, commandSignal(req));
      } catch (e) {
        return decline(`checking failed: ${(e as Error).message}`);
      }
      if (!r.ok) return decline(r.why, r.lookupFailed === true);
      const answer = r.answer;
      // Reported here as the plugin would, when the plugin said when it started and takes it.
      if (parsed.startedMs !== undefined && !req.signal.aborted) {
        const text = JSON.stringify({ ...answer, reported: true });
        if (
          Buffer.byteLength(text) <= MAX_ANSWER_BYTES &&
          typeof checkCheckAnswer(JSON.parse(text), parsed.env.CNI_ARGS) !== "string"
        ) {
          const answeredMs = epochNow();
          const request = parsed;
          setImmediate(() => deps.onReport(buildCheckReport(request, answer, answeredMs, request.version)));
          return jsonText(200, text);
        }
      }
      return json(200, answer);
    }
    if (path === REPORTS_PATH) {
      if (req.method !== "POST") return bad(`${req.method} ${path}: only POST`, 405);
      const body = await readBody(req);
      if (typeof body !== "string") return body;
      const parsed = parseReport(body);
      if (!parsed.ok) return bad(parsed.error);
      // Answered first: the plugin does not wait for the printing.
      setImmediate(() => deps.onReport(parsed.report));
      return new Response(null, { status: 204 });
    }
    return bad(
      `${req.method} ${path}: no such endpoint (GET /v1/pods/NAMESPACE/NAME, POST ${ADD_PATH}, POST ${CHECK_PATH}, ` +
        `POST ${REPORTS_PATH})`,
    );
  };
}
