// `meshcnictl completion bash|zsh`.
import type { CliContext } from "../context.ts";
import { CliError } from "../errors.ts";
import type { CommandSpec, Flags } from "../spec.ts";
import { renderBashCompletion, renderZshCompletion } from "../usage.ts";

export const SHELLS = ["bash", "zsh"] as const;

export const spec: CommandSpec = {
  name: "completion",
  summary: "print a shell completion script (bash or zsh)",
  usage: "bash|zsh",
  options: {},
  argChoices: SHELLS,
  examples: [
    "source <(meshcnictl completion bash)        # in ~/.bashrc",
    'meshcnictl completion zsh > "${fpath[1]}/_meshcnictl"',
  ],
};

export function makeRun(all: () => readonly CommandSpec[]) {
  return async (ctx: CliContext, _flags: Flags, args: string[]): Promise<number> => {
    const shell = args[0];
    if (args.length !== 1 || (shell !== "bash" && shell !== "zsh")) {
      throw new CliError(
        `completion needs one shell: ${SHELLS.join(" or ")}${shell ? ` (got ${JSON.stringify(args.join(" "))})` : ""}`,
      );
    }
    ctx.out(shell === "bash" ? renderBashCompletion(all()) : renderZshCompletion(all()));
    return 0;
  };
}
