// Podman, a real container runtime with the CNI backend, runs the compiled plugin chained after
// the reference bridge + host-local plugins: VERSION probes, ADD, DEL as podman does them.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { bridgeConflist } from "../support/cni-runtime.ts";
import { type Listener, listen, probe, uniq } from "../support/netns.ts";
import { PodmanLab, tagScript } from "../support/podman.ts";
import { PodLab, readFixture, withAnnotations } from "../support/pod-lab.ts";

describe("podman (CNI backend) with meshcni chained after bridge", () => {
  let lab: PodLab;
  let pm: PodmanLab;
  let outside: Listener;
  const network = `mesh${uniq()}`;
  const bridge = `mcp${uniq()}`.slice(0, 15);
  let gateway: string;

  beforeAll(async () => {
    lab = await PodLab.start();
    pm = new PodmanLab();
    const base = await readFixture("testdata/pods/linkerd-meshed.json");
    lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
    lab.api.addPod(withAnnotations(base, "web-podman", {}));
    lab.api.addPod(await readFixture("testdata/pods/not-injected.json"));
    const subnet = `10.${120 + (process.pid % 100)}.7.0/24`;
    gateway = subnet.replace(/0\/24$/, "1");
    pm.writeNetwork(
      "10-mesh.conflist",
      bridgeConflist({
        name: network,
        bridge,
        subnet,
        ipamDir: `${pm.dir}/ipam`,
        meshcni: lab.entry(),
      }),
      bridge,
    );
    outside = await listen(undefined, { 19998: "outside" });
  });

  afterAll(async () => {
    outside?.stop();
    await pm?.close();
    await lab?.close();
  });

  test("a meshed pod's traffic goes through its proxy ports", async () => {
    const ip = await pm.run(
      "web-podman",
      network,
      tagScript({ 4143: "proxy-inbound", 4140: "proxy-outbound", 8080: "app" }),
      "K8S_POD_NAMESPACE=emojivoto",
    );
    await pm.waitListening("web-podman", 4143);
    expect(probe(undefined, ip, 8080)).toBe("proxy-inbound port=4143");
    expect((await pm.exec("web-podman", ["nc", "-w", "3", gateway, "19998"])).stdout.trim()).toBe(
      "proxy-outbound port=4140",
    );
    // the proxy's own user goes straight out
    expect((await pm.exec("web-podman", ["nc", "-w", "3", gateway, "19998"], "2102:2102")).stdout.trim()).toBe(
      "outside port=19998",
    );
    // the plugin asked the API about this pod by the name podman gave it
    expect(lab.api.requests.some((r) => r.path === "/api/v1/namespaces/emojivoto/pods/web-podman")).toBe(true);
    await pm.rm("web-podman");
  });

  test("a pod without linkerd-proxy gets no rules", async () => {
    const ip = await pm.run(
      "nginx-6d4cf56db6-abcde",
      network,
      tagScript({ 4143: "proxy-inbound", 8080: "app" }),
      "K8S_POD_NAMESPACE=default",
    );
    await pm.waitListening("nginx-6d4cf56db6-abcde", 8080);
    expect(probe(undefined, ip, 8080)).toBe("app port=8080");
    await pm.rm("nginx-6d4cf56db6-abcde");
  });

  test("a container outside Kubernetes (no namespace in CNI_ARGS) passes through without an API call", async () => {
    const before = lab.api.requests.length;
    const ip = await pm.run(`plain-${uniq()}`, network, tagScript({ 8080: "app" }));
    expect(ip).toMatch(/^10\./);
    expect(lab.api.requests.length).toBe(before);
  });

  test("a meshed pod whose lookup fails is not started (fail closed), and podman shows why", async () => {
    lab.api.setGlobalFault({ kind: "status", code: 500 });
    try {
      const err = await pm.runFailing("web-failing", network, "K8S_POD_NAMESPACE=emojivoto");
      expect(err).toContain("meshcni");
      expect(err).toContain("try again later");
    } finally {
      lab.api.setGlobalFault(undefined);
    }
  });
});
