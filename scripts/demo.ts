// npm run demo: meshcni's main job on one machine. A pod network namespace is wired by the
// reference bridge + host-local plugins with the compiled meshcni chained after them; a
// stand-in API server serves the pod (a Linkerd-injected one); a stand-in proxy listens on 4143
// and 4140 inside the pod; real TCP connections show where traffic arrives. Then the node agent:
// the real dist/meshcni-installer against a stand-in API server chains meshcni after the bridge,
// fills its watch cache, and answers the plugin over its socket; the demo prints what
// `kubectl logs` on the agent shows for the pod and how many API requests its ADD made (none).
// Cleans up after itself.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { consola } from "consola";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  type InstallerProcess,
  isChainedIn,
  PLUGIN,
  startCluster,
  startInstaller,
  until,
} from "../test/agent/harness.ts";
import { type Conflist, CniRuntime } from "../test/support/cni-runtime.ts";
import { type Listener, listen, Netns, probe, sh, uniq } from "../test/support/netns.ts";
import { PodLab, REFERENCE_PLUGINS, readFixture, withAnnotations } from "../test/support/pod-lab.ts";

if (process.getuid?.() !== 0) {
  consola.error("the demo creates network namespaces and iptables rules: run it as root");
  process.exit(1);
}

const listeners: Listener[] = [];
const lab = await PodLab.start();
let failed = 0;

function expectArrival(what: string, got: string, want: string): void {
  const ok = got === want;
  if (!ok) failed++;
  const line = `${what}\n      answered by: ${got || "(nothing)"}`;
  if (ok) consola.success(line);
  else consola.fail(`${line}\n      expected:    ${want}`);
}

try {
  consola.start(`Stand-in Kubernetes API server (TLS, bearer token) at ${lab.api.url}`);
  lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
  const pod = withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-demo", {
    "config.linkerd.io/skip-outbound-ports": "9443",
  });
  consola.info(
    `It serves pod emojivoto/web-demo: containers ` +
      `${pod.spec.containers.map((c: { name: string }) => c.name).join(", ")}; ` +
      `annotation config.linkerd.io/skip-outbound-ports=9443`,
  );

  const entry = lab.entry({ log_level: "info" });
  const runtime = lab.runtime(entry);
  consola.start(
    `Conflist ${runtime.conflist.name} (cniVersion ${runtime.conflist.cniVersion}): ` +
      `bridge (host-local IPAM, ${lab.subnet}) then meshcni`,
  );
  console.log(JSON.stringify(runtime.conflist, null, 2).replace(/^/gm, "    "));

  consola.start("ADD through the chain, as a container runtime does it (spec call sequence)");
  const started = performance.now();
  const p = await lab.addPod(pod, entry);
  const meshcniRun = p.runtime.runs.find((r) => r.type === "meshcni")!;
  consola.success(
    `pod network ready in ${Math.round(performance.now() - started)} ms (meshcni ADD: ` +
      `${meshcniRun.ms.toFixed(1)} ms); pod IP ${p.ip}, gateway ${p.gateway}`,
  );
  for (const line of meshcniRun.stderr.trim().split("\n")) console.log(`    ${line}`);

  consola.start("Rules meshcni applied in the pod's network namespace (iptables-save -t nat):");
  const backend = meshcniRun.stderr.includes("(legacy") ? "legacy" : "nft";
  console.log(
    p.netns
      .save(backend, 4, "nat")
      .split("\n")
      .filter((l) => l && !l.startsWith("#"))
      .map((l) => `    ${l}`)
      .join("\n"),
  );

  consola.start("A stand-in proxy listens in the pod on 4143 (inbound) and 4140 (outbound); the app on 8080");
  listeners.push(
    await listen(p.netns, { 4143: "proxy-inbound", 4140: "proxy-outbound", 8080: "app", 4191: "proxy-admin" }),
  );
  listeners.push(await listen(undefined, { 19090: "outside-service", 9443: "outside-database" }));

  consola.start("Real TCP connections:");
  expectArrival(
    `host -> pod ${p.ip}:8080 (inbound to the app)`,
    probe(undefined, p.ip, 8080),
    "proxy-inbound port=4143",
  );
  expectArrival(
    `host -> pod ${p.ip}:4191 (the proxy's admin port, ignored)`,
    probe(undefined, p.ip, 4191),
    "proxy-admin port=4191",
  );
  expectArrival(`pod -> ${p.gateway}:19090 (outbound)`, probe(p.netns, p.gateway, 19090), "proxy-outbound port=4140");
  expectArrival(
    `pod as UID 2102 (the proxy itself) -> ${p.gateway}:19090`,
    probe(p.netns, p.gateway, 19090, { uid: 2102 }),
    "outside-service port=19090",
  );
  expectArrival(
    `pod -> ${p.gateway}:9443 (skip-outbound-ports)`,
    probe(p.netns, p.gateway, 9443),
    "outside-database port=9443",
  );
  expectArrival("pod -> 127.0.0.1:8080 (loopback)", probe(p.netns, "127.0.0.1", 8080), "app port=8080");

  consola.start("CHECK through the chain");
  await p.runtime.check(p.attachment);
  consola.success("CHECK passed: every rule is in place");

  consola.start("DEL through the chain (reverse order)");
  await p.runtime.del(p.attachment);
  consola.success(
    `DEL done; meshcni's chains left in the namespace: ` +
      `${p.netns.save(backend, 4, "nat").includes("PROXY_INIT") ? "some (unexpected)" : "none"}`,
  );
} catch (e) {
  failed++;
  consola.error(e);
} finally {
  for (const l of listeners) l.stop();
  await lab.close();
  consola.info("cleaned up: namespaces, bridge, API server, temporary files");
}

// ---- the node agent -------------------------------------------------------------------------
ensureBuilt(); // dist/meshcni-installer (the same binary, multi-call)
let cluster: Cluster | undefined;
let dirs: HostDirs | undefined;
let agent: InstallerProcess | undefined;
let netns: Netns | undefined;
const bridge = `mcdemo${uniq()}`.slice(0, 15);
try {
  cluster = await startCluster();
  cluster.setDaemonSet("present");
  consola.start(
    `The node agent (dist/meshcni-installer) with its service ` +
      `account pointing at a stand-in API server at ${cluster.api.url}`,
  );
  cluster.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
  const pod = withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-agent", {});
  pod.spec.nodeName = "node-a";
  cluster.api.addPod(pod);
  dirs = cluster.dirs();
  writeFileSync(
    join(dirs.net, "10-bridge.conflist"),
    JSON.stringify({
      cniVersion: "1.0.0",
      name: "node-net",
      plugins: [
        {
          type: "bridge",
          bridge,
          isGateway: true,
          ipMasq: false,
          ipam: { type: "host-local", subnet: "10.244.77.0/24", dataDir: join(dirs.root, "ipam") },
        },
      ],
    }),
  );
  const port = freePort();
  agent = startInstaller(
    dirs,
    [
      "--node-name",
      "node-a",
      "--plugin-binary",
      PLUGIN,
      "--dest-net-dir",
      dirs.net,
      "--health-port",
      String(port),
      "--repair",
      "off",
    ],
    cluster.env,
  );
  const d = dirs;
  await until(() => isChainedIn(d, "10-bridge.conflist"), 15_000, "meshcni chained");
  await until(
    async () =>
      (
        (await (await fetch(`http://127.0.0.1:${port}/status`).catch(() => undefined))?.json()) as {
          cache?: { pods?: { synced?: boolean } };
        }
      )?.cache?.pods?.synced === true,
    15_000,
    "the watch cache",
  );
  consola.success(
    `the agent chained meshcni after the bridge and its watch cache holds node-a's pods; socket ${dirs.socket}`,
  );

  const runtime = new CniRuntime(
    JSON.parse(await Bun.file(join(dirs.net, "10-bridge.conflist")).text()) as Conflist,
    [REFERENCE_PLUGINS, dirs.bin],
    join(dirs.root, "cni-cache"),
  );
  netns = Netns.create(`mcdemo-${uniq()}`);
  const a = {
    containerId: `demo${uniq()}`,
    netns: netns.path,
    ifname: "eth0",
    cniArgs: `IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=web-agent;K8S_POD_UID=${pod.metadata.uid}`,
  };
  const requestsBefore = cluster.api.requests.length;
  const mark = agent.log().length;
  consola.start("ADD for pod emojivoto/web-agent through the host's chain as the agent wrote it");
  await runtime.add(a);
  const summary = await agent.waitForLog(/plugin ADD pod=emojivoto\/web-agent .*/, 5000);
  const made = cluster.api.requests.slice(requestsBefore).filter((r) => !r.query.includes("watch"));
  const forPod = made.filter(
    (r) => r.path.includes("/pods/web-agent") || r.path === "/api/v1/namespaces/emojivoto",
  ).length;
  consola.start("kubectl logs -n meshcni meshcni-node-… (the agent's output for this pod):");
  const shown = agent
    .log()
    .slice(mark)
    .split("\n")
    .filter((l) => l.trim() !== "");
  for (const l of shown.slice(0, shown.findIndex((l) => l.includes(summary)) + 1)) console.log(`    ${l}`);
  // The agent planned it (the plugin applied the checked plan): its counter says so.
  const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const planned = Number(/^meshcni_agent_adds_planned_total (\d+)$/m.exec(metrics)?.[1] ?? 0);
  if (forPod === 0 && summary.includes("outcome=meshed") && planned === 1) {
    consola.success(
      `API requests the ADD made: ${forPod} (the pod came from the agent's watch cache); the agent planned ` +
        `the ADD, the plugin checked and applied the plan (meshcni_agent_adds_planned_total ${planned})`,
    );
  } else {
    failed++;
    consola.fail(`API requests the ADD made: ${forPod}; ADDs the agent planned: ${planned}; summary: ${summary}`);
  }
  await runtime.del(a);
} catch (e) {
  failed++;
  consola.error(e);
  if (agent) console.log(agent.log());
} finally {
  await agent?.stop("SIGTERM");
  netns?.delete();
  sh(["ip", "link", "del", bridge]);
  dirs?.cleanup();
  await cluster?.close();
  consola.info("cleaned up: the agent, its folders, the API server");
}

if (failed > 0) {
  consola.fail(`${failed} check(s) failed`);
  process.exit(1);
}
consola.success(
  "demo complete: TCP in and out of the pod went through the proxy ports, " +
    "nothing else did; through the agent, the ADD made no API request",
);
