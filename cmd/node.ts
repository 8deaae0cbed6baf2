// meshcni, the node binary: the CNI plugin and the node agent in one executable, chosen by the
// name it runs as. `meshcni` (what the container runtime runs for every pod) is the plugin;
// `meshcni-installer` (a link to it) or `meshcni installer ARGS...` is the agent. One Bun runtime
// (~100 MB) on the node and in the image instead of two.
//
// The plugin's code is in this entry chunk, as it was when cmd/plugin.ts was the entrypoint;
// the agent's is a separate chunk inside the executable, loaded only on the agent's path, so the
// plugin's start-up parses nothing of it (bench/plugin.ts measures VERSION against an empty
// program, test/plugin/build.test.ts checks the chunks).
import { main as plugin } from "./plugin.ts";

/** The agent's name, as a link to this binary or as the first argument. */
const AGENT_NAME = "meshcni-installer";
const AGENT_ARG = "installer";

const self = process.argv0.slice(process.argv0.lastIndexOf("/") + 1);
const args = Bun.argv.slice(2);
if (self === AGENT_NAME || args[0] === AGENT_ARG) {
  const { main } = await import("./installer.ts");
  process.exit(await main(self === AGENT_NAME ? args : args.slice(1)));
}
process.exit(await plugin());
