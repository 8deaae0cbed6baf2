// `meshcnictl check` against a real agent: the compiled dist/meshcni-installer runs against
// temporary host folders (test/agent/harness.ts), and the stand-in API server's pod proxy
// forwards to its health port, so the CLI reads the /status the agent itself builds.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import type { PodRecord } from "../../internal/wire/state.ts";
import { podProxyHandler } from "../support/apiserver.ts";
import { repoPath } from "../support/golden.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  type InstallerProcess,
  isChainedIn,
  startCluster,
  startInstaller,
  until,
} from "../agent/harness.ts";
import { ensureCli, runCli, runCliAsync } from "./support.ts";

type Obj = Record<string, any>;
let cluster: Cluster;
let dirs: HostDirs;
let agent: InstallerProcess | undefined;
let kubeconfig: string;
let port: number;

const WEB1 = "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f";

function meshedPod(name: string, uid: string): Obj {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: "emojivoto", uid },
    spec: { nodeName: "node-a", containers: [{ name: "web-svc" }, { name: "linkerd-proxy" }] },
    status: { phase: "Running", conditions: [{ type: "PodReadyToStartContainers", status: "True" }] },
  };
}

beforeAll(async () => {
  ensureBuilt();
  await ensureCli();
  cluster = await startCluster();
  dirs = cluster.dirs();
  const plugin = join(dirs.root, "meshcni-build");
  writeFileSync(plugin, "#!/bin/sh\n# stand-in plugin\n", { mode: 0o755 });
  writeFileSync(
    join(dirs.net, "10-calico.conflist"),
    readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8"),
  );
  cluster.setDaemonSet("present");
  port = freePort();
  agent = startInstaller(dirs, ["--plugin-binary", plugin, "--health-port", String(port)], cluster.env);
  await until(
    async () =>
      isChainedIn(dirs, "10-calico.conflist") &&
      (await fetch(`http://127.0.0.1:${port}/status`).then(
        (r) => r.ok,
        () => false,
      )),
    15_000,
    "the agent up",
  ).catch((e) => {
    throw new Error(`${e.message}\n${agent?.log()}`);
  });
  // The plugin ran an ADD for web-1 only; web-2 started before meshcni was chained.
  mkdirSync(join(dirs.state, "containers"), { recursive: true });
  const record: PodRecord = {
    v: 1,
    containerId: "3f0c9b6a1e2d",
    namespace: "emojivoto",
    name: "web-1",
    uid: WEB1,
    decision: "meshed",
    reason: "the pod runs linkerd-proxy",
    backend: "iptables-nft",
    families: [4],
    time: "2026-11-24T09:12:03.118Z",
  };
  writeFileSync(join(dirs.state, "containers", "3f0c9b6a1e2d.json"), JSON.stringify(record));

  const api = cluster.api;
  const cm = parseAllDocuments(runCli(["install-cni"]).stdout)
    .map((d) => d.toJS() as Obj)
    .find((o) => o.kind === "ConfigMap")!;
  api.objects.set("/api/v1/namespaces/meshcni/configmaps/meshcni-config", cm);
  api.objects.set("/api/v1/namespaces/meshcni/pods", {
    kind: "PodList",
    items: [
      {
        metadata: { name: "meshcni-node-4x7bq", namespace: "meshcni" },
        spec: {
          nodeName: "node-a",
          containers: [{ name: "install-cni", ports: [{ name: "health", containerPort: 9813 }] }],
        },
        status: { phase: "Running", conditions: [{ type: "Ready", status: "True" }] },
      },
    ],
  });
  api.objects.set("/api/v1/pods", {
    kind: "PodList",
    items: [meshedPod("web-1", WEB1), meshedPod("web-2", "5d6e7f80-91a2-4b3c-8d4e-5f6a7b8c9d0e")],
  });
  api.objects.set("/api/v1/namespaces/linkerd/configmaps/linkerd-config", {
    kind: "ConfigMap",
    data: { values: "cniEnabled: true\n" },
  });
  api.handlers.push(
    podProxyHandler(new Map([["meshcni/meshcni-node-4x7bq", { forward: `http://127.0.0.1:${port}` }]])),
  );
  kubeconfig = join(dirs.root, "kubeconfig");
  writeFileSync(kubeconfig, api.kubeconfig({ token: "any" }));
}, 60_000);

afterAll(async () => {
  await agent?.stop("SIGKILL");
  await cluster?.close();
  dirs?.cleanup();
});

test("check reads the real agent's /status through the pod proxy, and --pods warns of the pod without a record", async () => {
  const r = await runCliAsync(["check", "-o", "json"], { env: { KUBECONFIG: kubeconfig } });
  const node = JSON.parse(r.stdout).checks.filter((c: Obj) => c.node === "node-a");
  const by = (name: string) => node.find((c: Obj) => c.name === name);
  expect(by("the agent answers /status")?.result).toBe("ok");
  expect(by("meshcni is chained in the runtime's CNI configuration")).toMatchObject({
    result: "ok",
    detail: expect.stringContaining("10-calico.conflist"),
  });
  expect(by("the plugin binary on the node is current")?.result).toBe("ok");
  // No host paths mounted here (--host-root's default is not there): the check was skipped.
  expect(by("the host check judged the plugin binary")).toMatchObject({
    result: "warning",
    detail: expect.stringMatching(/^host check skipped: \/host\/root is not there/),
  });
  expect(by("pods the plugin handled on this node")).toMatchObject({
    result: "ok",
    detail: "1 pod: 1 meshed, 0 skipped",
  });
  expect(
    cluster.api.requests.some((q) => q.path === "/api/v1/namespaces/meshcni/pods/meshcni-node-4x7bq:9813/proxy/status"),
  ).toBe(true);

  const pods = await runCliAsync(["check", "--pods"], { env: { KUBECONFIG: kubeconfig } });
  // No record is no evidence of a bypass: a warning, not a failure.
  expect(pods.code).toBe(0);
  expect(pods.stdout).toContain(
    "‼ pod emojivoto/web-2 on node-a has a record of meshcni's ADD\n" +
      "    unverified: no record of an ADD for its sandbox on its node",
  );
  expect(pods.stdout).not.toContain("emojivoto/web-1 on node-a");
}, 60_000);
