// The one logger interface: the plugin's plain lines (internal/plugin/log.ts), the agent's log
// (internal/agent/observe/log.ts) and meshcnictl's (internal/cli/io/context.ts) implement it, and
// code below them (the backends, the agent) writes through it.
export interface Logger {
  debug(msg: string): void;
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
}
