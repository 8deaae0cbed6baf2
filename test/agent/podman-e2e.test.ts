// End to end: the compiled installer chains meshcni into a host's single-plugin bridge `.conf`
// in a temporary net dir, copying the compiled plugin into a temporary bin dir and writing its
// kubeconfig with a token of the plugin's own account (asked for with the service account
// folder's); podman (CNI backend) then creates a pod network from
// that very folder, with plugins from that very bin dir, and the meshed pod's traffic goes
// through its proxy ports. On SIGTERM the host's `.conf` comes back.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { repoPath } from "../support/golden.ts";
import { isRoot, type Listener, listen, probe, uniq } from "../support/netns.ts";
import { readFixture, withAnnotations } from "../support/pod-lab.ts";
import { PodmanLab, tagScript } from "../support/podman.ts";
import { ensureBuilt, HostDirs, type InstallerProcess, isChainedIn, startInstaller, until } from "./harness.ts";

const canRun = isRoot() && Bun.which("podman") !== null && Bun.which("busybox") !== null;

describe.skipIf(!canRun)("installer + podman (CNI backend) end to end", () => {
  let api: ApiServer;
  let dirs: HostDirs;
  let pm: PodmanLab;
  let outside: Listener;
  let inst: InstallerProcess | undefined;
  const network = `meshe2e${uniq()}`; // no "-": PodmanLab.run reads the IP through a Go template
  const bridge = `mce${uniq()}`.slice(0, 15);
  const octet = 60 + (process.pid % 60);
  const gateway = `10.${octet}.9.1`;
  const outsidePort = 19_000 + (process.pid % 900);
  let hostConf: string;

  beforeAll(async () => {
    ensureBuilt();
    api = await startApiServer({ token: "e2e-sa-token" });
    api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
    // On the agent's node (NODE_NAME=node-a): the agent answers only its own node's pods.
    const pod = withAnnotations(await readFixture("testdata/pods/linkerd-meshed.json"), "web-e2e", {});
    pod.spec.nodeName = "node-a";
    api.addPod(pod);
    dirs = new HostDirs("e2e-sa-token", api.caPem);
    // The recorded minikube host config (a single bridge .conf), made unique to this run: network
    // and bridge names, subnet, IPAM folder.
    hostConf = readFileSync(repoPath("testdata/hosts/minikube-legacy/1-k8s.conf"), "utf8")
      .replace('"name": "bridge"', `"name": ${JSON.stringify(network)}`)
      .replace('"bridge": "bridge"', `"bridge": ${JSON.stringify(bridge)}`)
      .replace("10.244.0.0/16", `10.${octet}.9.0/24`)
      .replace(
        '"type": "host-local",',
        `"type": "host-local",\n      "dataDir": ${JSON.stringify(join(dirs.root, "ipam"))},`,
      );
    expect(hostConf).toContain(`"subnet": "10.${octet}.9.0/24"`);
    writeFileSync(join(dirs.net, "1-k8s.conf"), hostConf);
    pm = new PodmanLab({ netDir: dirs.net, pluginDirs: ["/usr/lib/cni", dirs.bin] });
    outside = await listen(undefined, { [outsidePort]: "outside" });
  }, 60_000);

  afterAll(async () => {
    await inst?.stop("SIGKILL");
    outside?.stop();
    await pm?.close();
    Bun.spawnSync(["ip", "link", "del", bridge]);
    await api?.close();
    dirs?.cleanup();
  });

  test("podman's pod on the chained host config has its traffic redirected; undo restores the .conf", async () => {
    const port = new URL(api.url).port;
    inst = startInstaller(dirs, ["--dest-net-dir", dirs.net], {
      KUBERNETES_SERVICE_HOST: "127.0.0.1",
      KUBERNETES_SERVICE_PORT: port,
    });
    await until(() => isChainedIn(dirs, "1-k8s.conflist"), 15_000, "the chain");
    await until(() => dirs.file("1-k8s.conf") === undefined, 2000, "the .conf to go");

    const ip = await pm.run(
      "web-e2e",
      network,
      tagScript({ 4143: "proxy-inbound", 4140: "proxy-outbound", 8080: "app" }),
      "K8S_POD_NAMESPACE=emojivoto",
    );
    expect(ip).toStartWith(`10.${octet}.9.`);
    await pm.waitListening("web-e2e", 4143);
    // Inbound to the app port lands on the proxy's inbound port; outbound on its outbound port.
    expect(probe(undefined, ip, 8080)).toBe("proxy-inbound port=4143");
    expect((await pm.exec("web-e2e", ["nc", "-w", "3", gateway, String(outsidePort)])).stdout.trim()).toBe(
      "proxy-outbound port=4140",
    );
    // The proxy's own user goes out directly.
    expect((await pm.exec("web-e2e", ["nc", "-w", "3", gateway, String(outsidePort)], "2102:2102")).stdout.trim()).toBe(
      `outside port=${outsidePort}`,
    );
    // The plugin's kubeconfig holds a token of the plugin's own account.
    const pluginToken = api.issued.at(-1)!;
    expect(pluginToken.user).toBe("system:serviceaccount:meshcni:meshcni-plugin");
    expect(dirs.file("ZZZ-meshcni-kubeconfig")).toContain(`token: "${pluginToken.token}"`);
    // The pod came from the agent's cache of its node's pods, listed with the service account token.
    const list = api.requests.find(
      (r) => r.path === "/api/v1/pods" && r.query.includes("spec.nodeName%3Dnode-a") && !r.query.includes("watch"),
    );
    expect(list?.authorization).toBe("Bearer e2e-sa-token");
    await pm.rm("web-e2e");

    expect(await inst.stop("SIGTERM")).toBe(0);
    expect(dirs.names().filter((n) => n !== "cni.lock")).toEqual(["1-k8s.conf"]);
    expect(dirs.file("1-k8s.conf")).toBe(hostConf);
  }, 90_000);
});
