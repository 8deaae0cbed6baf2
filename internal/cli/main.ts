// meshcnictl's dispatcher: picks the command, parses its flags, maps errors to exit codes.
// Bad usage is refused before anything reaches stdout.
import * as check from "./commands/check.ts";
import * as completion from "./commands/completion.ts";
import * as explain from "./commands/explain.ts";
import * as installCni from "./commands/install-cni.ts";
import * as uninstallCni from "./commands/uninstall-cni.ts";
import * as version from "./commands/version.ts";
import type { CliContext } from "./context.ts";
import { CliError } from "./errors.ts";
import { type CommandSpec, type Flags, parseCommandArgs } from "./spec.ts";
import { renderCommandHelp, renderMainHelp } from "./usage.ts";

interface Command {
  spec: CommandSpec;
  run(ctx: CliContext, flags: Flags, args: string[]): Promise<number>;
}

const COMMANDS: Command[] = [
  installCni,
  uninstallCni,
  explain,
  check,
  version,
  { spec: completion.spec, run: completion.makeRun(() => COMMANDS.map((c) => c.spec)) },
];

export const COMMAND_SPECS: readonly CommandSpec[] = COMMANDS.map((c) => c.spec);

export async function runCli(argv: readonly string[], ctx: CliContext): Promise<number> {
  const [name, ...rest] = argv;
  try {
    if (name === undefined || name === "--help" || name === "-h" || name === "help") {
      const topic = name === "help" ? COMMANDS.find((c) => c.spec.name === rest[0]) : undefined;
      ctx.out(topic ? renderCommandHelp(topic.spec) : renderMainHelp(COMMAND_SPECS, ctx.version));
      if (name === "help" && rest[0] !== undefined && !topic)
        throw new CliError(`unknown command ${JSON.stringify(rest[0])}`);
      return name === undefined ? 2 : 0;
    }
    if (name === "--version") return await version.run(ctx, {}, []);
    const command = COMMANDS.find((c) => c.spec.name === name);
    if (!command) {
      throw new CliError(
        `unknown command ${JSON.stringify(name)}; commands: ` +
          `${COMMAND_SPECS.map((s) => s.name).join(", ")} (see meshcnictl --help)`,
      );
    }
    const { flags, args } = parseCommandArgs(command.spec, rest);
    if (flags.help) {
      ctx.out(renderCommandHelp(command.spec));
      return 0;
    }
    return await command.run(ctx, flags, args);
  } catch (e) {
    if (e instanceof CliError) {
      ctx.log.error(e.message);
      return e.exitCode;
    }
    ctx.log.error(`unexpected error: ${(e as Error)?.stack ?? String(e)}`);
    return 70;
  }
}
