// The log levels, the one definition: the plugin's `log_level`, the agent's --log-level,
// install-cni's --cni-log-level and the chart's logLevel, and the levels of the agent's lines.
// Pure, and small enough for the plugin.

export const LOG_LEVELS = ["debug", "info", "warn", "error"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Higher is more severe: a logger at level L prints lines whose rank is at least L's. */
export const LEVEL_RANK: Record<LogLevel, number> = { debug: 10, info: 20, warn: 30, error: 40 };
