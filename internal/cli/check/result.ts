// One line of `meshcnictl check`: what each judgement of check/ returns. Pure.

export interface CheckResult {
  category: string;
  name: string;
  ok: boolean;
  /** What was found (shown under a failure, or after a pass in parentheses). */
  detail?: string;
  /** What to do about a failure. */
  hint?: string;
  /** A failure that does not fail the check (shown as ‼; exit code 0). */
  warning?: boolean;
  /** The node a per-node or per-pod result is about. */
  node?: string;
  /** The pod a per-pod result is about. */
  pod?: { namespace: string; name: string; node?: string; uid?: string };
}
