// Where the agent's socket and the state folder are, read from stdin without the schema (the
// schema checks them when it runs). Pure and light: on the plugin's hot path.
import { DEFAULT_AGENT_SOCKET, DEFAULT_STATE_DIR } from "../../wire/protocol.ts";
import { peekConf } from "../peek.ts";

/**
 * Where the agent and the state folder are, read from stdin without the schema (the schema checks
 * them when it runs).
 */
export function agentPaths(stdin: string): { socket: string; stateDir: string; conf?: Record<string, unknown> } {
  const conf = peekConf(stdin);
  const path = (x: unknown, d: string) => (typeof x === "string" && x.startsWith("/") && !x.includes("\0") ? x : d);
  const out: { socket: string; stateDir: string; conf?: Record<string, unknown> } = {
    socket: path(conf?.agent_socket, DEFAULT_AGENT_SOCKET),
    stateDir: path(conf?.state_dir, DEFAULT_STATE_DIR),
  };
  if (conf) out.conf = conf;
  return out;
}
