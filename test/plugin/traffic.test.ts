// Real TCP through real rules: pods wired by the reference bridge + host-local plugins with the
// compiled meshcni chained after them, for the legacy and the nft iptables backends.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { type Listener, listen, probe } from "../support/netns.ts";
import { type Pod, PodLab, readFixture, withAnnotations } from "../support/pod-lab.ts";

for (const backend of ["nft", "legacy"] as const) {
  describe(`linkerd redirect with iptables-${backend}`, () => {
    let lab: PodLab;
    let meshed: Pod;
    let skipping: Pod;
    let runAs: Pod;
    const listeners: Listener[] = [];

    beforeAll(async () => {
      lab = await PodLab.start();
      const entry = lab.entry({ linkerd: { "iptables-mode": backend } });
      const base = await readFixture("testdata/pods/linkerd-meshed.json");
      lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
      meshed = await lab.addPod(withAnnotations(base, `web-${backend}-1`, {}), entry);
      skipping = await lab.addPod(withAnnotations(base, `web-${backend}-2`, {
        "config.linkerd.io/skip-outbound-ports": "9443",
        "config.linkerd.io/skip-inbound-ports": "8081",
        "config.linkerd.io/skip-subnets": `${meshed.gateway}/32`,
      }), entry);
      // The proxy runs as 2103 (linkerd-proxy's securityContext) while the config says 2102.
      const other = withAnnotations(base, `web-${backend}-3`, {});
      other.spec.containers.find((c: any) => c.name === "linkerd-proxy").securityContext.runAsUser = 2103;
      runAs = await lab.addPod(other, entry);
      for (const pod of [meshed, skipping, runAs]) {
        listeners.push(await listen(pod.netns, { 4143: "proxy-inbound", 4140: "proxy-outbound", 8080: "app", 8081: "app", 4191: "admin" }));
      }
      // "Outside the pod": listeners in the host namespace, reached through the bridge gateway.
      listeners.push(await listen(undefined, { 19999: "outside", 9443: "outside" }));
    });

    afterAll(async () => {
      for (const l of listeners) l.stop();
      await lab?.close();
    });

    test("the rules are in the backend the config names", () => {
      const save = meshed.netns.save(backend);
      expect(save).toContain("-A PREROUTING -m comment --comment \"proxy-init/install-proxy-init-prerouting\" -j PROXY_INIT_REDIRECT");
      expect(save).toContain("-j REDIRECT --to-ports 4140");
      const other = meshed.netns.save(backend === "nft" ? "legacy" : "nft");
      expect(other).not.toContain("PROXY_INIT");
    });

    test("TCP from outside to a pod port arrives at the proxy's inbound port 4143", () => {
      expect(probe(undefined, meshed.ip, 8080)).toBe("proxy-inbound port=4143");
    });

    test("the proxy's admin port 4191 is not redirected", () => {
      expect(probe(undefined, meshed.ip, 4191)).toBe("admin port=4191");
    });

    test("TCP from the pod to an outside address arrives at the proxy's outbound port 4140", () => {
      expect(probe(meshed.netns, meshed.gateway, 19999)).toBe("proxy-outbound port=4140");
    });

    test("a process running as the proxy's UID 2102 reaches the outside directly", () => {
      expect(probe(meshed.netns, meshed.gateway, 19999, { uid: 2102 })).toBe("outside port=19999");
      // and any other user is redirected
      expect(probe(meshed.netns, meshed.gateway, 19999, { uid: 1000 })).toBe("proxy-outbound port=4140");
    });

    test("the UID exempted is the one linkerd-proxy runs as (runAsUser 2103), not the config's 2102", () => {
      expect(probe(runAs.netns, runAs.gateway, 19999, { uid: 2103 })).toBe("outside port=19999");
      expect(probe(runAs.netns, runAs.gateway, 19999, { uid: 2102 })).toBe("proxy-outbound port=4140");
    });

    test("loopback traffic inside the pod is not redirected", () => {
      expect(probe(meshed.netns, "127.0.0.1", 8080)).toBe("app port=8080");
    });

    test("skip-outbound-ports bypasses the proxy, other ports do not", () => {
      expect(probe(skipping.netns, skipping.gateway, 9443)).toBe("outside port=9443");
      expect(probe(skipping.netns, skipping.gateway, 19999)).toBe("proxy-outbound port=4140");
    });

    test("skip-subnets: connections from a skipped subnet reach the application directly", () => {
      // The host reaches the pod from the gateway address, which the annotation skips.
      expect(probe(undefined, skipping.ip, 8080)).toBe("app port=8080");
      // The same connection to the pod without the annotation goes to the proxy.
      expect(probe(undefined, meshed.ip, 8080)).toBe("proxy-inbound port=4143");
    });

    test("CHECK passes while the rules are in place and fails once one is gone", async () => {
      await meshed.runtime.check(meshed.attachment);
      const bin = `iptables-${backend}`;
      const r = meshed.netns.exec([bin, "-t", "nat", "-D", "PROXY_INIT_OUTPUT", "-o", "lo", "-m", "comment", "--comment", "proxy-init/ignore-loopback", "-j", "RETURN"]);
      expect(r.code).toBe(0);
      const err = await meshed.runtime.check(meshed.attachment).then(() => undefined, (e) => e as Error & { run: { stdout: string } });
      expect(err).toBeDefined();
      const body = JSON.parse(err!.run.stdout);
      expect(body.code).toBe(103);
      expect(body.details).toContain("proxy-init/ignore-loopback");
      // ADD again repairs it, with exactly one copy of every rule.
      await meshed.runtime.exec("ADD", meshed.runtime.conflist.plugins[1]!, meshed.attachment, meshed.result);
      await meshed.runtime.exec("ADD", meshed.runtime.conflist.plugins[1]!, meshed.attachment, meshed.result);
      await meshed.runtime.check(meshed.attachment);
      const save = meshed.netns.save(backend);
      expect(save.split("\n").filter((l) => l.includes("install-proxy-init-output")).length).toBe(1);
      expect(save.split("\n").filter((l) => l.includes("redirect-all-outgoing-to-proxy-port")).length).toBe(1);
    });
  });
}
