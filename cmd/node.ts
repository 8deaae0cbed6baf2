// meshcni, the node binary: the CNI plugin and the node agent in one executable, chosen by the
// name it runs as. `meshcni` (what the container runtime runs for every pod) is the plugin;
// `meshcni-installer` (a link to it) or `meshcni installer ARGS...` is the agent. One Bun runtime
// (~100 MB) on the node and in the image instead of two.
//
// Start-up is on every pod's critical path, so this entry chunk holds only the choice, the
// VERSION answer and a DEL's read of stdin; the plugin's code (cmd/plugin.ts) and the agent's
// (cmd/installer.ts) are separate chunks inside the executable, each imported only on its own
// path: the plugin never parses the agent's code, a DEL decided by its record only the record and
// report code, and VERSION parses neither (bench/plugin.ts measures VERSION against
// an empty program, test/plugin/build.test.ts checks the chunks).
import { renderVersionInfo } from "../internal/cni/spec.ts";

const AGENT_NAME = "meshcni-installer";
const AGENT_ARG = "installer";

const self = process.argv0.slice(process.argv0.lastIndexOf("/") + 1);
const args = Bun.argv.slice(2);
if (self === AGENT_NAME || args[0] === AGENT_ARG) {
  // The binary starts with the plugin's JIT policy (scripts/build.ts's JIT_POLICY); the agent
  // runs for days and gets the normal one.
  Bun.unsafe.setJITPolicy(1);
  const { main } = await import("./installer.ts");
  process.exit(await main(self === AGENT_NAME ? args : args.slice(1)));
}
if (Bun.env.CNI_COMMAND === "VERSION") {
  await Bun.write(Bun.stdout, `${renderVersionInfo()}\n`);
  process.exit(0);
}
// A DEL is answered from its record with the record and report code alone, none of the plugin's
// chunk (internal/plugin/io/report.ts), stdin read while that code loads; the plugin takes the
// input read when the record cannot decide.
if (Bun.env.CNI_COMMAND === "DEL") {
  const started = new Date();
  const t0 = performance.now();
  const [{ runDel }, stdin] = await Promise.all([import("../internal/plugin/io/report.ts"), Bun.file(0).text()]);
  const code = await runDel({ stdin, started, t0 });
  if (code !== undefined) process.exit(code);
  const { main } = await import("./plugin.ts");
  process.exit(await main({ stdin, started, t0 }));
}
const { main } = await import("./plugin.ts");
process.exit(await main());
