// The host lacks what the plugin would apply rules with: retryable (11) rather than 101, since
// on such a node the node agent applies the rules (internal/agent/apply/), and it did not answer,
// declined or could not this time. No pod starts unmeshed; the runtime tries again.
import { CniError } from "../cni/errors.ts";
import { Code } from "../cni/spec.ts";

export function retryableWhereAgentApplies(e: unknown): unknown {
  if (!(e instanceof CniError) || e.code !== Code.MissingBinary) return e;
  return new CniError(
    Code.TryAgainLater,
    e.msg,
    `${e.details}; where the host lacks it, the meshcni agent applies the rules, and it did not apply them ` +
      "this time (not running, not answering in time, or unable to enter namespaces): the runtime will try again",
  );
}
