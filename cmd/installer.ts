// meshcni-installer: the node agent, the process of the meshcni DaemonSet (internal/agent/run.ts).
// In dist/meshcni, cmd/node.ts loads this module when the binary runs under that name.
import { main } from "../internal/agent/run.ts";

export { main };

if (import.meta.main) process.exit(await main());
