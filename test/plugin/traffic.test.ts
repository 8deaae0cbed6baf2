// Real TCP through real rules: dual-stack pods wired by the reference bridge + host-local
// plugins with the compiled meshcni chained after them, on every backend (iptables-nft,
// iptables-legacy, native nftables), and on a node whose iptables binaries are hidden (a
// private mount namespace), where `auto` picks nftables.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  anythingOfOurs,
  BACKENDS,
  flushChain,
  hiddenIptablesDir,
  listRules,
  type TestBackend,
} from "../support/backends.ts";
import { type Listener, listen, probe } from "../support/netns.ts";
import { type Pod, PodLab, readFixture, REFERENCE_PLUGINS, withAnnotations } from "../support/pod-lab.ts";

const label = (b: TestBackend | "hidden") =>
  b === "nftables"
    ? "native nftables"
    : b === "hidden"
      ? "no iptables and no nft binary on the node (auto: nftables in process)"
      : `iptables-${b}`;

for (const backend of [...BACKENDS, "hidden"] as const) {
  describe(`linkerd redirect with ${label(backend)}`, () => {
    const rules: TestBackend = backend === "hidden" ? "nftables" : backend;
    let lab: PodLab;
    let meshed: Pod;
    let skipping: Pod;
    let hiddenDir: string | undefined;
    let runAs: Pod;
    const listeners: Listener[] = [];

    beforeAll(async () => {
      lab = await PodLab.start({ dualStack: true });
      if (backend === "hidden") {
        hiddenDir = hiddenIptablesDir(mkdtempSync(join(tmpdir(), "meshcni-noipt-")), { hideNft: true });
        lab.pluginDirs = [REFERENCE_PLUGINS, hiddenDir];
      }
      const mode = backend === "hidden" ? "auto" : backend;
      const entry = lab.entry({ linkerd: { "iptables-mode": mode, ipv6: true } });
      const base = await readFixture("testdata/pods/linkerd-meshed.json");
      lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
      meshed = await lab.addPod(withAnnotations(base, `web-${backend}-1`, {}), entry);
      skipping = await lab.addPod(
        withAnnotations(base, `web-${backend}-2`, {
          "config.linkerd.io/skip-outbound-ports": "9443",
          "config.linkerd.io/skip-inbound-ports": "8081",
          "config.linkerd.io/skip-subnets": `${meshed.gateway}/32,${meshed.gateway6}/128`,
        }),
        entry,
      );
      // The proxy runs as 2103 (linkerd-proxy's securityContext) while the config says 2102.
      const other = withAnnotations(base, `web-${backend}-3`, {});
      other.spec.containers.find((c: any) => c.name === "linkerd-proxy").securityContext.runAsUser = 2103;
      runAs = await lab.addPod(other, entry);
      for (const pod of [meshed, skipping, runAs]) {
        listeners.push(
          await listen(pod.netns, {
            4143: "proxy-inbound",
            4140: "proxy-outbound",
            8080: "app",
            8081: "app",
            4191: "admin",
          }),
        );
      }
      // "Outside the pod": listeners in the host namespace, reached through the bridge gateway.
      listeners.push(await listen(undefined, { 19999: "outside", 9443: "outside" }));
    });

    afterAll(async () => {
      for (const l of listeners) l.stop();
      await lab?.close();
      if (hiddenDir) rmSync(hiddenDir, { recursive: true, force: true });
    });

    test("the rules are in the backend the config names, for both families, and nowhere else", () => {
      for (const family of [4, 6] as const) {
        const text = listRules(meshed.netns, rules, family);
        if (rules === "nftables") {
          expect(text).toContain('jump nat_PROXY_INIT_REDIRECT comment "proxy-init/install-proxy-init-prerouting"');
          expect(text).toContain("meta l4proto tcp redirect to :4140");
        } else {
          expect(text).toContain(
            '-A PREROUTING -m comment --comment "proxy-init/install-proxy-init-prerouting" -j PROXY_INIT_REDIRECT',
          );
          expect(text).toContain("-j REDIRECT --to-ports 4140");
        }
      }
      // iptables lines name our chains; the nft listing names the meshcni tables.
      const ours = anythingOfOurs(meshed.netns);
      expect(ours.filter((l) => (rules === "nftables") !== l.includes("table ip"))).toEqual([]);
      for (const other of BACKENDS.filter((b) => b !== rules)) {
        expect(listRules(meshed.netns, other, 4)).not.toMatch(/PROXY_INIT/);
      }
    });

    if (backend === "hidden") {
      test("the plugin really ran without iptables binaries and without nft", () => {
        const r = Bun.spawnSync([
          join(hiddenDir!, "probe"),
          "sh",
          "-c",
          "command -v iptables || command -v iptables-nft-restore || command -v iptables-legacy-restore " +
            "|| command -v ip6tables-restore || echo none; command -v nft || echo no-nft",
        ]);
        expect(r.stdout.toString().trim().split("\n")).toEqual(["none", "no-nft"]);
      });
    }

    test("TCP from outside to a pod port arrives at the proxy's inbound port 4143 (IPv4 and IPv6)", () => {
      expect(probe(undefined, meshed.ip, 8080)).toBe("proxy-inbound port=4143");
      expect(probe(undefined, meshed.ip6!, 8080)).toBe("proxy-inbound port=4143");
    });

    test("the proxy's admin port 4191 is not redirected", () => {
      expect(probe(undefined, meshed.ip, 4191)).toBe("admin port=4191");
      expect(probe(undefined, meshed.ip6!, 4191)).toBe("admin port=4191");
    });

    test("TCP from the pod to an outside address arrives at the proxy's outbound port 4140 (IPv4 and IPv6)", () => {
      expect(probe(meshed.netns, meshed.gateway, 19999)).toBe("proxy-outbound port=4140");
      expect(probe(meshed.netns, meshed.gateway6!, 19999)).toBe("proxy-outbound port=4140");
    });

    test("a process running as the proxy's UID 2102 reaches the outside directly", () => {
      expect(probe(meshed.netns, meshed.gateway, 19999, { uid: 2102 })).toBe("outside port=19999");
      expect(probe(meshed.netns, meshed.gateway6!, 19999, { uid: 2102 })).toBe("outside port=19999");
      // and any other user is redirected
      expect(probe(meshed.netns, meshed.gateway, 19999, { uid: 1000 })).toBe("proxy-outbound port=4140");
      expect(probe(meshed.netns, meshed.gateway6!, 19999, { uid: 1000 })).toBe("proxy-outbound port=4140");
    });

    test("the UID exempted is the one linkerd-proxy runs as (runAsUser 2103), not the config's 2102", () => {
      expect(probe(runAs.netns, runAs.gateway, 19999, { uid: 2103 })).toBe("outside port=19999");
      expect(probe(runAs.netns, runAs.gateway, 19999, { uid: 2102 })).toBe("proxy-outbound port=4140");
    });

    test("loopback traffic inside the pod is not redirected", () => {
      expect(probe(meshed.netns, "127.0.0.1", 8080)).toBe("app port=8080");
      expect(probe(meshed.netns, "::1", 8080)).toBe("app port=8080");
    });

    test("skip-outbound-ports bypasses the proxy, other ports do not", () => {
      expect(probe(skipping.netns, skipping.gateway, 9443)).toBe("outside port=9443");
      expect(probe(skipping.netns, skipping.gateway6!, 9443)).toBe("outside port=9443");
      expect(probe(skipping.netns, skipping.gateway, 19999)).toBe("proxy-outbound port=4140");
      expect(probe(skipping.netns, skipping.gateway6!, 19999)).toBe("proxy-outbound port=4140");
    });

    test("skip-inbound-ports: 8081 reaches the application", () => {
      expect(probe(undefined, skipping.ip, 8081)).toBe("app port=8081");
      expect(probe(undefined, meshed.ip, 8081)).toBe("proxy-inbound port=4143");
    });

    test("skip-subnets: connections from a skipped subnet reach the application directly", () => {
      // The host reaches the pod from the gateway address, which the annotation skips.
      expect(probe(undefined, skipping.ip, 8080)).toBe("app port=8080");
      expect(probe(undefined, skipping.ip6!, 8080)).toBe("app port=8080");
      // The same connection to the pod without the annotation goes to the proxy.
      expect(probe(undefined, meshed.ip, 8080)).toBe("proxy-inbound port=4143");
      expect(probe(undefined, meshed.ip6!, 8080)).toBe("proxy-inbound port=4143");
    });

    test("CHECK passes while the rules are in place and fails once some are gone", async () => {
      await meshed.runtime.check(meshed.attachment);
      flushChain(meshed.netns, rules, "nat", "PROXY_INIT_OUTPUT", 6);
      const err = await meshed.runtime.check(meshed.attachment).then(
        () => undefined,
        (e) => e as Error & { run: { stdout: string } },
      );
      expect(err).toBeDefined();
      const body = JSON.parse(err!.run.stdout);
      expect(body.code).toBe(103);
      expect(body.details).toContain("proxy-init/ignore-loopback");
      // ADD again repairs it, with exactly one copy of every rule.
      await meshed.runtime.exec("ADD", meshed.runtime.conflist.plugins[1]!, meshed.attachment, meshed.result);
      await meshed.runtime.exec("ADD", meshed.runtime.conflist.plugins[1]!, meshed.attachment, meshed.result);
      await meshed.runtime.check(meshed.attachment);
      for (const family of [4, 6] as const) {
        const text = listRules(meshed.netns, rules, family).split("\n");
        expect(text.filter((l) => l.includes("install-proxy-init-output")).length).toBe(1);
        expect(text.filter((l) => l.includes("redirect-all-outgoing-to-proxy-port")).length).toBe(1);
      }
    });

    test("DEL leaves meshcni's rules to the namespace; an ADD into the kept namespace replaces them", async () => {
      const before = anythingOfOurs(skipping.netns);
      expect(before.length).toBeGreaterThan(0);
      await skipping.runtime.del(skipping.attachment);
      // The runtime destroys the namespace right after DEL; until then the rules are as they were.
      expect(anythingOfOurs(skipping.netns)).toEqual(before);
      // The same namespace again, the pod now skipping 8082 instead of 8081.
      const base = await readFixture("testdata/pods/linkerd-meshed.json");
      lab.api.addPod(
        withAnnotations(base, skipping.name, {
          "config.linkerd.io/skip-outbound-ports": "9443",
          "config.linkerd.io/skip-inbound-ports": "8082",
        }),
      );
      const result = (await skipping.runtime.add(skipping.attachment)) as any;
      const ip = String(result.ips.find((i: any) => !String(i.address).includes(":")).address).split("/")[0]!;
      for (const family of [4, 6] as const) {
        const text = listRules(skipping.netns, rules, family);
        expect(text).toContain("8082");
        expect(text).not.toContain("8081");
        const lines = text.split("\n");
        expect(lines.filter((l) => l.includes("install-proxy-init-prerouting")).length).toBe(1);
      }
      await skipping.runtime.check(skipping.attachment);
      // 8081 is no longer skipped, nor is the host's address: the connection reaches the proxy.
      expect(probe(undefined, ip, 8081)).toBe("proxy-inbound port=4143");
    });
  });
}
