// The stand-in API server in a process of its own, so that benchmarks can time the plugin with
// blocking spawns. Prints one JSON line {url, kubeconfig, caFile, token} once it listens; exits
// when stdin closes.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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
console.log(JSON.stringify({ url: api.url, kubeconfig, caFile: makePki().paths.ca, token: "bench-token" }));
for await (const _ of Bun.stdin.stream()) {
  // keep running until the parent closes our stdin
}
await api.close();
rmSync(dir, { recursive: true, force: true });
