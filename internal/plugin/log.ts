// The plugin's logger: plain lines on stderr, each starting with "meshcni:" so that
// `journalctl -t kubelet | grep meshcni:` finds them. No logging library: the plugin's start-up
// is on every pod's critical path. Every line goes through escapeText (internal/text/escape.ts),
// so text a pod controls can never add a line or drive a terminal, wherever it came from.
import { escapeText } from "../text/escape.ts";
import { LEVEL_RANK, type LogLevel } from "../log/levels.ts";
import type { Logger } from "../log/logger.ts";

export type Level = LogLevel;

/** The plugin's logger: the one Logger, and what only the plugin asks of it. */
export interface PluginLogger extends Logger {
  /** Whether lines at this level are kept (to skip building a costly message). */
  enabled(level: Level): boolean;
  /** A logger whose lines carry extra context, e.g. the container and pod. */
  with(context: string): PluginLogger;
}

/** Reads `log_level` as linkerd-cni does: case-insensitive, unknown levels mean warn. */
export function parseLevel(raw: string | undefined): Level {
  const l = (raw ?? "info").toLowerCase();
  if (l === "debug" || l === "trace") return "debug";
  if (l === "info") return "info";
  if (l === "error" || l === "fatal" || l === "panic") return "error";
  return "warn";
}

/** The context of a command's lines: the command and the container ID's first 12 characters. */
export function logContext(command: string, containerId: string | undefined): string {
  return containerId ? `${command} ${containerId.slice(0, 12)}` : command;
}

/**
 * `s` without the line feeds it ends with: what s.replace(/\n+$/, "") returns, without a RegExp
 * to compile in the plugin's fresh process (log.test.ts holds the two together).
 */
export function trimNewlines(s: string): string {
  let end = s.length;
  while (end > 0 && s.charCodeAt(end - 1) === 10) end--;
  return end === s.length ? s : s.slice(0, end);
}

/** The head of every line: "meshcni: LEVEL CONTEXT: ". */
const headOf = (l: Level, context: string) => `meshcni: ${l}${context ? ` ${context}` : ""}: `;

/**
 * One line as a logger at `level` writes `msg` at `l` ("" when that level drops it), for a
 * message that is a single line already escaped: no logger to build for one line.
 */
export function renderLine(level: Level, l: Level, context: string, msg: string): string {
  return LEVEL_RANK[l] < LEVEL_RANK[level] ? "" : `${headOf(l, context)}${msg}\n`;
}

export function createLogger(level: Level, sink: (line: string) => void, context = ""): PluginLogger {
  const emit = (l: Level, msg: string) => {
    if (LEVEL_RANK[l] < LEVEL_RANK[level]) return;
    // Every line carries the prefix, multi-line messages (payloads) included.
    const head = headOf(l, context);
    let text = "";
    // split("\n"), not split(/\r?\n/): a RegExp split is another builtin to compile on first use.
    for (const raw of trimNewlines(msg).split("\n"))
      text += `${head + escapeText(raw.endsWith("\r") ? raw.slice(0, -1) : raw)}\n`;
    sink(text);
  };
  return {
    debug: (m) => emit("debug", m),
    info: (m) => emit("info", m),
    warn: (m) => emit("warn", m),
    error: (m) => emit("error", m),
    enabled: (l) => LEVEL_RANK[l] >= LEVEL_RANK[level],
    with: (c) => createLogger(level, sink, context ? `${context} ${c}` : c),
  };
}
