// Judging one outcome of a fuzz case: never a crash, a hang, or anything but a result or a CNI
// error on stdout; an error has a documented code (the expected one when the case says), and a
// rejected input never writes the dry-run file; accepted rules mean exactly what the input said.
import { asRead, DOCUMENTED_CODES, expectedResult, jsonEqual, SUPPORTED, versionAnswer } from "./expect.ts";
import type { FuzzCase } from "./generate.ts";
import { checkPayload } from "./payload-check.ts";

export interface Outcome {
  /** null when the process was killed or runPlugin did not return. */
  exitCode: number | null;
  stdout: string;
  /** What MESHCNI_DRY_RUN_FILE received; undefined when it was not written. */
  payload?: string;
  ms: number;
  /** runPlugin threw, or the process died by a signal. */
  crash?: string;
  timedOut?: boolean;
}

/** Longest a case may take: the largest timeout_seconds the fuzzer writes (10 s) plus start-up. */
export const CASE_BOUND_MS = 12_000;

function parseJson(text: string): { ok: true; value: any } | { ok: false } {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch {
    return { ok: false };
  }
}

const short = (s: string, n = 300) => (s.length > n ? `${s.slice(0, n)}… (${s.length} chars)` : s);

export function judge(c: FuzzCase, o: Outcome): string[] {
  const p: string[] = [];
  const e = c.expect;
  if (o.crash) return [`crashed: ${short(o.crash, 2000)}`];
  if (o.timedOut) return [`no answer within ${CASE_BOUND_MS} ms (a hang)`];
  if (o.ms > CASE_BOUND_MS) p.push(`took ${Math.round(o.ms)} ms`);
  if (o.exitCode !== 0 && o.exitCode !== 1) p.push(`exit code ${o.exitCode}`);
  const command = c.env.CNI_COMMAND;
  // Without CNI_COMMAND it is no CNI call: stdin is not read, and errors are in the latest version.
  const requested = command ? (versionAnswer(c.stdin) as { cniVersion: string }).cniVersion : "1.1.0";

  if (o.exitCode !== 0) {
    const parsed = parseJson(o.stdout);
    if (!parsed.ok || typeof parsed.value !== "object" || parsed.value === null) {
      return [...p, `stdout of a failure is not a CNI error object: ${JSON.stringify(short(o.stdout))}`];
    }
    const err = parsed.value as Record<string, unknown>;
    const extra = Object.keys(err).filter((k) => !["cniVersion", "code", "msg", "details"].includes(k));
    if (extra.length > 0) p.push(`error object has keys ${extra.join(", ")}`);
    if (!Number.isInteger(err.code)) p.push(`error code ${JSON.stringify(err.code)}`);
    else if (!(DOCUMENTED_CODES as readonly number[]).includes(err.code as number))
      p.push(`undocumented error code ${err.code}: ${err.msg}: ${short(String(err.details ?? ""))}`);
    else if (!e.weak && !e.codes.includes(err.code as number)) {
      p.push(
        `error code ${err.code} (${err.msg}: ${short(String(err.details ?? ""))}), ` +
          `expected ${e.ok ? "success" : ""}${e.ok && e.codes.length ? " or " : ""}${e.codes.join("/")} (${e.why})`,
      );
    }
    if (typeof err.msg !== "string" || err.msg === "") p.push("error without msg");
    if (err.details !== undefined && typeof err.details !== "string") p.push("details is not a string");
    if (err.cniVersion !== requested)
      p.push(`error in version ${JSON.stringify(err.cniVersion)}, the request's is ${requested}`);
    if (o.payload !== undefined) p.push(`a rejected input wrote the dry-run file: ${JSON.stringify(short(o.payload))}`);
    return p;
  }

  if (!e.weak && !e.ok) p.push(`succeeded, expected code ${e.codes.join("/")} (${e.why})`);
  const out = o.stdout === "" ? { ok: true as const, value: "" } : parseJson(o.stdout);
  if (!out.ok) return [...p, `stdout of a success is not JSON: ${JSON.stringify(short(o.stdout))}`];
  if (command === "VERSION") {
    const v = out.value as { cniVersion?: unknown; supportedVersions?: unknown };
    if (!jsonEqual(v.supportedVersions, [...SUPPORTED])) p.push(`VERSION lists ${JSON.stringify(v.supportedVersions)}`);
    // Answering in the request's version (spec) or in the latest (libcni's skel) are both fine.
    if (v.cniVersion !== requested && v.cniVersion !== "1.1.0")
      p.push(`VERSION answers in ${JSON.stringify(v.cniVersion)}`);
    if (o.payload !== undefined) p.push("VERSION wrote the dry-run file");
    return p;
  }
  if (command === "ADD") {
    let want = e.weak ? undefined : e.stdout;
    if (e.weak) {
      const conf = parseJson(asRead(c.stdin));
      if (conf.ok && conf.value && typeof conf.value === "object") {
        const prev = conf.value.prevResult;
        want = expectedResult(prev && typeof prev === "object" ? prev : undefined, conf.value.cniVersion);
      }
    }
    if (want !== undefined && !jsonEqual(out.value, want)) {
      p.push(
        `ADD result ${short(JSON.stringify(out.value))} is not prevResult ` +
          `in version ${requested}: ${short(JSON.stringify(want))}`,
      );
    }
    if (o.payload === undefined) p.push("a successful ADD in a dry run did not write the dry-run file");
    else if (!e.weak && e.rules === undefined && o.payload !== "")
      p.push(`rules for a pod that gets none (${e.why}): ${short(o.payload)}`);
    else if (!e.weak && e.rules !== undefined && o.payload === "") p.push(`no rules for a redirected pod (${e.why})`);
    else if (o.payload !== "") {
      const problems = checkPayload(o.payload, e.weak ? undefined : e.rules);
      for (const x of problems.slice(0, 12)) p.push(`payload: ${short(x)}`);
      if (problems.length > 12) p.push(`payload: … ${problems.length - 12} more`);
    }
    return p;
  }
  if (o.stdout !== "") p.push(`${command} printed ${JSON.stringify(short(o.stdout))}`);
  if (o.payload !== undefined) p.push(`${command} wrote the dry-run file`);
  return p;
}
