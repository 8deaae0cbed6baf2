// Podman with its CNI backend runs the compiled plugin with the Istio profile, chained after the
// reference bridge + host-local plugins: an injected pod's TCP goes through its sidecar's ports,
// a bad annotation keeps the container from starting (podman shows why), and removing the
// container runs DEL.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { bridgeConflist } from "../support/cni-runtime.ts";
import { type Listener, listen, probe, uniq } from "../support/netns.ts";
import { PodLab } from "../support/pod-lab.ts";
import { PodmanLab, tagScript } from "../support/podman.ts";
import { buildCasePod } from "./cases.ts";

describe("podman (CNI backend) with meshcni's Istio profile", () => {
  let lab: PodLab;
  let pm: PodmanLab;
  let outside: Listener;
  const network = `istio${uniq()}`;
  const bridge = `mci${uniq()}`.slice(0, 15);
  const subnet = `10.${20 + (process.pid % 100)}.9.0/24`;
  const gateway = subnet.replace(/0\/24$/, "1");
  const OUT = 18997;

  beforeAll(async () => {
    lab = await PodLab.start();
    pm = new PodmanLab();
    lab.api.addPod(buildCasePod({ pod: "sidecar.json", name: "reviews-podman" }));
    lab.api.addPod(
      buildCasePod({
        pod: "sidecar.json",
        name: "reviews-bad",
        annotations: { "traffic.sidecar.istio.io/includeOutboundIPRanges": "10.0.0.1" },
      }),
    );
    lab.api.addPod(buildCasePod({ pod: "not-injected.json", name: "curl-podman" }));
    pm.writeNetwork(
      "10-istio.conflist",
      bridgeConflist({
        name: network,
        bridge,
        subnet,
        ipamDir: `${pm.dir}/ipam`,
        meshcni: lab.entry({ mesh: "istio", kubernetes: { exclude_namespaces: ["istio-system", "kube-system"] } }),
      }),
      bridge,
    );
    outside = await listen(undefined, { [OUT]: "outside" });
  });

  afterAll(async () => {
    outside?.stop();
    await pm?.close();
    await lab?.close();
  });

  test("an injected pod's TCP goes to 15006 inbound and 15001 outbound; UID 1337 goes straight out", async () => {
    const ip = await pm.run(
      "reviews-podman",
      network,
      tagScript({ 15006: "proxy-inbound", 15001: "proxy-outbound", 9080: "app", 15021: "health" }),
      "K8S_POD_NAMESPACE=bookinfo",
    );
    await pm.waitListening("reviews-podman", 15006);
    expect(probe(undefined, ip, 9080)).toBe("proxy-inbound port=15006");
    expect(probe(undefined, ip, 15021)).toBe("health port=15021");
    expect((await pm.exec("reviews-podman", ["nc", "-w", "3", gateway, String(OUT)])).stdout.trim()).toBe(
      "proxy-outbound port=15001",
    );
    expect((await pm.exec("reviews-podman", ["nc", "-w", "3", gateway, String(OUT)], "1337:1337")).stdout.trim()).toBe(
      `outside port=${OUT}`,
    );
    expect(lab.api.requests.some((r) => r.path === "/api/v1/namespaces/bookinfo/pods/reviews-podman")).toBe(true);
    await pm.rm("reviews-podman");
  });

  test("a pod without istio-proxy gets no rules", async () => {
    const ip = await pm.run(
      "curl-podman",
      network,
      tagScript({ 15006: "proxy-inbound", 9080: "app" }),
      "K8S_POD_NAMESPACE=bookinfo",
    );
    await pm.waitListening("curl-podman", 9080);
    expect(probe(undefined, ip, 9080)).toBe("app port=9080");
    await pm.rm("curl-podman");
  });

  test("an excluded namespace passes through without an API call", async () => {
    const before = lab.api.requests.length;
    const ip = await pm.run(
      "istiod-podman",
      network,
      tagScript({ 15006: "proxy-inbound", 9080: "app" }),
      "K8S_POD_NAMESPACE=istio-system",
    );
    await pm.waitListening("istiod-podman", 9080);
    expect(probe(undefined, ip, 9080)).toBe("app port=9080");
    expect(lab.api.requests.length).toBe(before);
    await pm.rm("istiod-podman");
  });

  test("an invalid annotation keeps the container from starting, and podman says which", async () => {
    const err = await pm.runFailing("reviews-bad", network, "K8S_POD_NAMESPACE=bookinfo");
    expect(err).toContain("traffic.sidecar.istio.io/includeOutboundIPRanges");
    expect(err).toContain("10.0.0.1");
  });
});
