// `meshcnictl version`.
import type { CliContext } from "../context.ts";
import { CliError } from "../errors.ts";
import { type CommandSpec, type Flags, str } from "../spec.ts";

export const spec: CommandSpec = {
  name: "version",
  summary: "print meshcnictl's version",
  usage: "[--short]",
  options: {
    short: { type: "boolean", help: "print the version alone" },
    output: {
      type: "string",
      short: "o",
      arg: "FORMAT",
      choices: ["text", "json"],
      default: "text",
      help: "output format",
    },
  },
};

export async function run(ctx: CliContext, flags: Flags, args: string[]): Promise<number> {
  if (args.length) throw new CliError(`version takes no arguments (got ${JSON.stringify(args[0])})`);
  const output = str(flags, "output") ?? "text";
  if (output !== "text" && output !== "json")
    throw new CliError(`--output ${JSON.stringify(output)}: must be text or json`);
  if (output === "json") ctx.out(`${JSON.stringify({ client: { version: ctx.version } })}\n`);
  else ctx.out(flags.short ? `${ctx.version}\n` : `meshcnictl ${ctx.version}\n`);
  return 0;
}
