// How a meshcnictl command describes itself: its flags (for parsing, --help and shell
// completion) and its arguments. Parsing is node:util's parseArgs with clearer errors. Pure.
import { parseArgs } from "node:util";
import { CliError } from "./errors.ts";

export interface OptionSpec {
  type: "string" | "boolean";
  short?: string;
  /** May be given more than once (lists also take commas). */
  multiple?: boolean;
  /** Repeated, but commas belong to the value (e.g. annotations). */
  repeatOnly?: boolean;
  /** The placeholder --help shows, e.g. PORT. */
  arg?: string;
  /** The default --help shows. */
  default?: string;
  help: string;
  /** Allowed values, for --help and completion. */
  choices?: readonly string[];
  /** Completion offers file names. */
  file?: boolean;
  /** Completion offers folders. */
  dir?: boolean;
}

export interface CommandSpec {
  name: string;
  summary: string;
  /** The usage line after `meshcnictl NAME`. */
  usage: string;
  /** Paragraphs after the usage line. */
  description?: string;
  options: Record<string, OptionSpec>;
  /** Values of the first argument, for completion. */
  argChoices?: readonly string[];
  examples?: readonly string[];
}

export type FlagValue = string | boolean | string[] | undefined;
export type Flags = Record<string, FlagValue>;

export const HELP_OPTION: OptionSpec = { type: "boolean", short: "h", help: "show this help" };

/** Parses argv against a command's flags; unknown flags and missing values name the flag. */
export function parseCommandArgs(spec: CommandSpec, argv: readonly string[]): { flags: Flags; args: string[] } {
  const options = { ...spec.options, help: HELP_OPTION };
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: true,
      options: Object.fromEntries(
        Object.entries(options).map(([name, o]) => [
          name,
          {
            type: o.type,
            ...(o.short ? { short: o.short } : {}),
            ...(o.multiple ? { multiple: true } : {}),
          },
        ]),
      ),
    });
    return { flags: values as Flags, args: positionals };
  } catch (e) {
    const err = e as Error & { code?: string };
    const msg = err.message
      .split("\n")[0]!
      .replace(/^Unknown option '([^']+)'.*$/, "unknown flag $1")
      .replace(
        /^Option '(-\w, )?(--[\w-]+)' argument is ambiguous\.?$/,
        "$2 needs a value (write $2=VALUE when the value starts with -)",
      )
      .replace(/^Option '(-\w, )?(--[\w-]+)[^']*' argument missing$/, "$2 needs a value")
      .replace(/^Option '(-\w, )?(--[\w-]+)' does not take an argument$/, "$2 takes no value");
    throw new CliError(`${spec.name}: ${msg} (see meshcnictl ${spec.name} --help)`);
  }
}

/** A string flag's value (the last one when repeated). */
export function str(flags: Flags, name: string): string | undefined {
  const v = flags[name];
  if (Array.isArray(v)) return v[v.length - 1];
  return typeof v === "string" ? v : undefined;
}

/** A list flag: repeated and comma-separated values, trimmed, empty items dropped. */
export function list(flags: Flags, name: string): string[] | undefined {
  const v = flags[name];
  if (v === undefined || typeof v === "boolean") return undefined;
  const items = (Array.isArray(v) ? v : [v])
    .flatMap((s) => s.split(","))
    .map((s) => s.trim())
    .filter((s) => s !== "");
  return items;
}
