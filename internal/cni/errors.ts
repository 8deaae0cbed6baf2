import { Code, type CodeValue, isSupportedVersion, LATEST_VERSION } from "./spec.ts";

/**
 * The one error type that crosses the plugin boundary. `msg` is short and stable; `details`
 * tells a cluster operator what happened and what to do.
 */
export class CniError extends Error {
  readonly code: CodeValue;
  readonly msg: string;
  readonly details: string;

  constructor(code: CodeValue, msg: string, details = "", options?: { cause?: unknown }) {
    super(details ? `${msg}: ${details}` : msg, options);
    this.name = "CniError";
    this.code = code;
    this.msg = msg;
    this.details = details;
  }
}

/** Renders the spec's error object; `cniVersion` is the request's when it is one we speak. */
export function renderError(err: CniError, requestVersion: unknown): string {
  const cniVersion = isSupportedVersion(requestVersion) ? requestVersion : LATEST_VERSION;
  const body: Record<string, unknown> = { cniVersion, code: err.code, msg: err.msg };
  if (err.details) body.details = err.details;
  return `${JSON.stringify(body, null, 2)}\n`;
}

/** Maps anything thrown to a CniError without wrapping a CniError twice. */
export function toCniError(e: unknown): CniError {
  if (e instanceof CniError) return e;
  const text = e instanceof Error ? e.message : String(e);
  return new CniError(
    Code.Internal,
    "internal error in meshcni",
    `${text}; this is a bug, please report it with the plugin's log lines (grep 'meshcni:')`,
    { cause: e },
  );
}
