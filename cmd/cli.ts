// meshcnictl: the operator's CLI. Wires the real outside world to internal/cli.
import { runCli } from "../internal/cli/main.ts";
import { createCliContext } from "../internal/cli/io/context.ts";
import { VERSION } from "../internal/version.ts";

const ctx = createCliContext(VERSION);
const code = await runCli(process.argv.slice(2), ctx);
await ctx.flush();
process.exit(code);
