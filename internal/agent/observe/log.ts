// The agent's log: consola, one line per event with a timestamp and the level, info on
// stdout and warnings and errors on stderr (a DaemonSet's log keeps both).
import { createConsola, type LogObject } from "consola";
import type { Logger } from "../../log/logger.ts";
import type { LogLevel } from "../options.ts";

const LEVELS: Record<LogLevel, number> = { error: 0, warn: 1, info: 3, debug: 4 };

export function renderLogLine(obj: Pick<LogObject, "date" | "type" | "args">): string {
  const text = obj.args.map((a) => (a instanceof Error ? a.message : String(a))).join(" ");
  return `${obj.date.toISOString()} ${obj.type.padEnd(5)} ${text}\n`;
}

export function createAgentLog(level: LogLevel): Logger {
  const consola = createConsola({
    level: LEVELS[level],
    reporters: [
      {
        log(obj) {
          const line = renderLogLine(obj);
          if (obj.level <= 1) process.stderr.write(line);
          else process.stdout.write(line);
        },
      },
    ],
  });
  return {
    debug: (m) => consola.debug(m),
    info: (m) => consola.info(m),
    warn: (m) => consola.warn(m),
    error: (m) => consola.error(m),
  };
}

/**
 * Lines printed for the plugin (its reports, its fallback log): always on stdout, whatever the
 * agent's own level, in the same columns as the agent's log.
 */
export function printPluginLines(lines: readonly { level: string; text: string }[], now = new Date()): void {
  if (lines.length === 0) return;
  const at = now.toISOString();
  process.stdout.write(lines.map((l) => `${at} ${l.level.padEnd(5)} ${l.text}\n`).join(""));
}
