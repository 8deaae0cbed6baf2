// npm run demo: meshcni's main job on one machine. A pod network namespace is wired by the
// reference bridge + host-local plugins with the compiled meshcni chained after them; a
// stand-in API server serves the pod (a Linkerd-injected one); a stand-in proxy listens on 4143
// and 4140 inside the pod; real TCP connections show where traffic arrives. Cleans up after itself.
import { consola } from "consola";
import { type Listener, listen, probe } from "../test/support/netns.ts";
import { PodLab, readFixture, withAnnotations } from "../test/support/pod-lab.ts";

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
  consola.start("Stand-in Kubernetes API server (TLS, bearer token) at " + lab.api.url);
  lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
  const pod = withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-demo", {
    "config.linkerd.io/skip-outbound-ports": "9443",
  });
  consola.info(`It serves pod emojivoto/web-demo: containers ${pod.spec.containers.map((c: { name: string }) => c.name).join(", ")}; ` +
    `annotation config.linkerd.io/skip-outbound-ports=9443`);

  const entry = lab.entry({ log_level: "info" });
  const runtime = lab.runtime(entry);
  consola.start(`Conflist ${runtime.conflist.name} (cniVersion ${runtime.conflist.cniVersion}): bridge (host-local IPAM, ${lab.subnet}) then meshcni`);
  console.log(JSON.stringify(runtime.conflist, null, 2).replace(/^/gm, "    "));

  consola.start("ADD through the chain, as a container runtime does it (spec call sequence)");
  const started = performance.now();
  const p = await lab.addPod(pod, entry);
  const meshcniRun = p.runtime.runs.find((r) => r.type === "meshcni")!;
  consola.success(`pod network ready in ${Math.round(performance.now() - started)} ms (meshcni ADD: ${meshcniRun.ms.toFixed(1)} ms); pod IP ${p.ip}, gateway ${p.gateway}`);
  for (const line of meshcniRun.stderr.trim().split("\n")) console.log(`    ${line}`);

  consola.start("Rules meshcni applied in the pod's network namespace (iptables-save -t nat):");
  const backend = meshcniRun.stderr.includes("(legacy") ? "legacy" : "nft";
  console.log(p.netns.save(backend, 4, "nat").split("\n").filter((l) => l && !l.startsWith("#")).map((l) => `    ${l}`).join("\n"));

  consola.start("A stand-in proxy listens in the pod on 4143 (inbound) and 4140 (outbound); the app on 8080");
  listeners.push(await listen(p.netns, { 4143: "proxy-inbound", 4140: "proxy-outbound", 8080: "app", 4191: "proxy-admin" }));
  listeners.push(await listen(undefined, { 19090: "outside-service", 9443: "outside-database" }));

  consola.start("Real TCP connections:");
  expectArrival(`host -> pod ${p.ip}:8080 (inbound to the app)`, probe(undefined, p.ip, 8080), "proxy-inbound port=4143");
  expectArrival(`host -> pod ${p.ip}:4191 (the proxy's admin port, ignored)`, probe(undefined, p.ip, 4191), "proxy-admin port=4191");
  expectArrival(`pod -> ${p.gateway}:19090 (outbound)`, probe(p.netns, p.gateway, 19090), "proxy-outbound port=4140");
  expectArrival(`pod as UID 2102 (the proxy itself) -> ${p.gateway}:19090`, probe(p.netns, p.gateway, 19090, { uid: 2102 }), "outside-service port=19090");
  expectArrival(`pod -> ${p.gateway}:9443 (skip-outbound-ports)`, probe(p.netns, p.gateway, 9443), "outside-database port=9443");
  expectArrival("pod -> 127.0.0.1:8080 (loopback)", probe(p.netns, "127.0.0.1", 8080), "app port=8080");

  consola.start("CHECK through the chain");
  await p.runtime.check(p.attachment);
  consola.success("CHECK passed: every rule is in place");

  consola.start("DEL through the chain (reverse order)");
  await p.runtime.del(p.attachment);
  consola.success(`DEL done; meshcni's chains left in the namespace: ${p.netns.save(backend, 4, "nat").includes("PROXY_INIT") ? "some (unexpected)" : "none"}`);
} catch (e) {
  failed++;
  consola.error(e);
} finally {
  for (const l of listeners) l.stop();
  await lab.close();
  consola.info("cleaned up: namespaces, bridge, API server, temporary files");
}
if (failed > 0) {
  consola.fail(`${failed} check(s) failed`);
  process.exit(1);
}
consola.success("demo complete: TCP in and out of the pod went through the proxy ports, nothing else did");
