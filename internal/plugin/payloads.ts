// The text of everything a plan would apply with a backend: what MESHCNI_DRY_RUN_FILE
// receives, what `simulate` logs, and what `meshcnictl explain` prints. Without a backend, the
// iptables backend's payloads (one iptables-restore payload per address family).
import { iptablesBackend } from "../firewall/iptables/index.ts";
import type { Backend } from "../firewall/backend.ts";
import type { Plan } from "../plan/model.ts";

export function renderPayloads(plan: Plan, backend: Backend = iptablesBackend): string {
  return backend.render(plan);
}

export { countRules } from "../plan/model.ts";
