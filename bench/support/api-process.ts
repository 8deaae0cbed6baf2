// The stand-in API server in a process of its own, so that benchmarks can time the plugin with
// blocking spawns, with a stand-in node agent (test/support/agent.ts) on a socket of its own.
// Prints one JSON line {url, kubeconfig, caFile, token, agentSocket, stateDir} once it listens;
// exits when stdin closes.
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startStandInAgent } from "../../test/support/agent.ts";
import { startApiServer } from "../../test/support/apiserver.ts";
import { makePki } from "../../test/support/certs.ts";
import { repoPath } from "../../test/support/golden.ts";

const api = await startApiServer({ token: "bench-token" });
const pods = ["linkerd-meshed", "not-injected", "linkerd-annotated"];
for (const p of pods) api.addPod(await Bun.file(repoPath(`testdata/pods/${p}.json`)).json());
api.addNamespace(await Bun.file(repoPath("testdata/pods/namespace-emojivoto.json")).json());
api.addNamespace({ metadata: { name: "default" } });
const dir = mkdtempSync(join(tmpdir(), "meshcni-bench-api-"));
const kubeconfig = join(dir, "ZZZ-meshcni-kubeconfig");
writeFileSync(kubeconfig, api.kubeconfig());
// A warm node agent too: the agent's socket server answering from the objects above (no API
// request). Its state folder (the socket, the records) on tmpfs where there is one, as
// /var/run/meshcni is on a node (/run is tmpfs); this machine's /tmp is a disk.
const stateDir = existsSync("/dev/shm") ? mkdtempSync("/dev/shm/meshcni-bench-state-") : undefined;
const agent = startStandInAgent(api, stateDir ? { dir: stateDir } : {});
console.log(
  JSON.stringify({
    url: api.url,
    kubeconfig,
    caFile: makePki().paths.ca,
    token: "bench-token",
    agentSocket: agent.socket,
    stateDir: agent.dir,
  }),
);
for await (const _ of Bun.stdin.stream()) {
  // keep running until the parent closes our stdin
}
agent.close();
await api.close();
rmSync(dir, { recursive: true, force: true });
if (stateDir) rmSync(stateDir, { recursive: true, force: true });
