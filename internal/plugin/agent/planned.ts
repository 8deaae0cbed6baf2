// What a planned ADD comes to for the plugin, and the agent's log lines as the plugin writes
// them: shared by the request (add.ts) and the apply of a plan (apply.ts). Pure.
import { escapeText } from "../../text/escape.ts";
import type { Summary } from "../../wire/summary.ts";
import type { FollowUp } from "./client.ts";

export type PlannedAdd =
  /**
   * The command is answered: print `stdout`, exit with `exitCode`, report `summary` (through
   * `followUp`, the agent's connection kept open for it, when there is one).
   */
  | { kind: "done"; stdout: string; exitCode: 0 | 1; summary: Summary; followUp?: FollowUp; reported?: true }
  /**
   * The agent does not plan this ADD (409), or sent an answer or a plan the plugin cannot use:
   * the plugin runs it, and may still ask the agent for the pod, unless the agent's own lookup
   * of the pod is what failed (`lookupFailed`): then it goes to its kubeconfig at once.
   */
  | { kind: "declined"; why: string; lookupFailed?: boolean }
  /** No agent, no answer in time, or one the plugin cannot use: the plugin runs the ADD through its kubeconfig. */
  | { kind: "unavailable"; why: string };

/** The agent's 409 (it does not answer this command): its reason, and whether its lookup failed. */
export function declinedOf(body: string): Extract<PlannedAdd, { kind: "declined" }> {
  let why = "the agent declined";
  let lookupFailed = false;
  try {
    const b = JSON.parse(body) as { details?: unknown; lookup?: unknown };
    if (typeof b?.details === "string") why = b.details;
    lookupFailed = b?.lookup === "failed";
  } catch {
    // the default
  }
  return lookupFailed ? { kind: "declined", why, lookupFailed } : { kind: "declined", why };
}

/**
 * The agent's log lines as the plugin writes them: each one "meshcni: ..." on one line, escaped
 * again (escapeText leaves an already escaped line as it is), so an answer can neither add a line
 * nor drive the terminal of whoever reads the runtime's journal.
 */
export function agentLines(lines: readonly string[]): string[] {
  const out: string[] = [];
  for (const l of lines) {
    let text = "";
    for (const p of l.split("\n"))
      if (p !== "") text += `${p.startsWith("meshcni: ") ? "" : "meshcni: "}${escapeText(p)}\n`;
    out.push(text);
  }
  return out;
}
