// Real TCP through the Istio profile's rules: dual-stack pods wired by the reference bridge +
// host-local plugins with the compiled meshcni (mesh: istio) chained after them, on every
// backend (iptables-nft, iptables-legacy, native nftables) and on a node whose iptables binaries
// are hidden (auto picks nftables). Stand-ins listen where Envoy would (15006 inbound, 15001
// outbound); for TPROXY the inbound stand-in is a transparent socket per family, which also
// reports the original destination it was handed.
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
import { type Listener, listen, probe, uniq } from "../support/netns.ts";
import { type Pod, PodLab, REFERENCE_PLUGINS } from "../support/pod-lab.ts";
import { buildCasePod } from "./cases.ts";
import { listenTransparent } from "./transparent.ts";

const OUT = 18999; // an outside service the pod calls
const OUT_EXCLUDED = 18443; // an outside port excluded by annotation

/** An injected pod whose proxy listens on both families (ISTIO_DUAL_STACK), so it gets IPv6 rules too. */
function istioPod(name: string, annotations: Record<string, string> = {}): any {
  return buildCasePod({ pod: "sidecar.json", name, annotations, proxyEnv: { ISTIO_DUAL_STACK: "true" } });
}

const label = (b: TestBackend | "hidden") =>
  b === "nftables" ? "native nftables" : b === "hidden" ? "no iptables on the node (auto: nftables)" : `iptables-${b}`;

for (const backend of [...BACKENDS, "hidden"] as const) {
  describe(`istio capture with ${label(backend)}`, () => {
    const rules: TestBackend = backend === "hidden" ? "nftables" : backend;
    let lab: PodLab;
    let hiddenDir: string | undefined;
    const pods: Record<string, Pod> = {};
    const listeners: Listener[] = [];
    const id = uniq();

    beforeAll(async () => {
      lab = await PodLab.start({ dualStack: true });
      if (backend === "hidden") {
        hiddenDir = hiddenIptablesDir(mkdtempSync(join(tmpdir(), "meshcni-noipt-")));
        lab.pluginDirs = [REFERENCE_PLUGINS, hiddenDir];
      }
      const entry = lab.entry({ mesh: "istio", istio: { "iptables-mode": backend === "hidden" ? "auto" : backend } });
      lab.api.addNamespace(JSON.parse(await Bun.file("testdata/istio/pods/namespace-bookinfo.json").text()));
      const gw = lab.subnet.replace(/0\/24$/, "1");
      const specs: Record<string, Record<string, string>> = {
        redirect: {},
        inbound: { "traffic.sidecar.istio.io/excludeInboundPorts": "9090" },
        // Every port excluded but a list included: Istio captures the listed ports.
        listed: {
          "traffic.sidecar.istio.io/excludeInboundPorts": "*",
          "traffic.sidecar.istio.io/includeInboundPorts": "9080",
        },
        tproxy: { "sidecar.istio.io/interceptionMode": "TPROXY" },
        // Application init containers run before the proxy listens (seed 004).
        "init-ports": { "traffic.sidecar.istio.io/excludeOutboundPorts": String(OUT_EXCLUDED) },
        "init-ranges": { "traffic.sidecar.istio.io/excludeOutboundIPRanges": `${gw}/32` },
      };
      for (const [key, annotations] of Object.entries(specs)) {
        pods[key] = await lab.addPod(istioPod(`reviews-${key}-${id}`, annotations), entry);
      }
      for (const key of ["redirect", "inbound", "listed"]) {
        listeners.push(
          await listen(pods[key]!.netns, {
            15006: "proxy-inbound",
            15001: "proxy-outbound",
            9080: "app",
            9090: "app",
            15021: "health",
          }),
        );
      }
      listeners.push(await listen(pods.tproxy!.netns, { 15001: "proxy-outbound", 9080: "app", 15021: "health" }));
      listeners.push(await listenTransparent(pods.tproxy!.netns, "proxy-inbound", 15006));
      listeners.push(await listenTransparent(pods.tproxy!.netns, "proxy-inbound", 15006, 6));
      listeners.push(await listen(undefined, { [OUT]: "outside", [OUT_EXCLUDED]: "outside" }));
    });

    afterAll(async () => {
      for (const l of listeners) l.stop();
      await lab?.close();
      if (hiddenDir) rmSync(hiddenDir, { recursive: true, force: true });
    });

    test("the rules are Istio's, in the backend the config names, both families, and CHECK passes", async () => {
      for (const family of [4, 6] as const) {
        const text = listRules(pods.redirect!.netns, rules, family);
        if (rules === "nftables") {
          expect(text).toContain("meta l4proto tcp jump nat_ISTIO_INBOUND");
          expect(text).toContain("meta l4proto tcp redirect to :15001");
          expect(text).toContain("meta l4proto tcp redirect to :15006");
        } else {
          expect(text).toContain("-A PREROUTING -p tcp -j ISTIO_INBOUND");
          expect(text).toContain("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001");
          expect(text).toContain("-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 15006");
        }
      }
      for (const other of BACKENDS.filter((b) => b !== rules)) {
        expect(listRules(pods.redirect!.netns, other, 4)).not.toContain("ISTIO_");
      }
      for (const key of ["redirect", "tproxy"]) await pods[key]!.runtime.check(pods[key]!.attachment);
    });

    describe("IPv6", () => {
      test("inbound TCP arrives at 15006, outbound at 15001; UID 1337 and ::1 are not captured", () => {
        const p = pods.redirect!;
        expect(probe(undefined, p.ip6!, 9080)).toBe("proxy-inbound port=15006");
        expect(probe(undefined, p.ip6!, 15021)).toBe("health port=15021");
        expect(probe(p.netns, p.gateway6!, OUT, { uid: 1000 })).toBe("proxy-outbound port=15001");
        expect(probe(p.netns, p.gateway6!, OUT, { uid: 1337 })).toBe(`outside port=${OUT}`);
        expect(probe(p.netns, "::1", 9080, { uid: 1000 })).toBe("app port=9080");
      });
      test("TPROXY: inbound TCP arrives at the transparent listener with its original destination", () => {
        const p = pods.tproxy!;
        expect(probe(undefined, p.ip6!, 9080)).toBe(`proxy-inbound port=15006 dst=[${p.ip6}]:9080`);
        expect(probe(undefined, p.ip6!, 15021)).toBe("health port=15021");
        expect(probe(p.netns, p.gateway6!, OUT, { uid: 1000 })).toBe("proxy-outbound port=15001");
        expect(p.netns.exec(["ip", "-6", "rule"]).stdout).toMatch(/fwmark 0x539 lookup 133/);
      });
    });

    describe("REDIRECT", () => {
      test("TCP from outside to an application port arrives at the inbound listener 15006", () => {
        expect(probe(undefined, pods.redirect!.ip, 9080)).toBe("proxy-inbound port=15006");
      });
      test("the proxy's health port 15021 and excluded inbound ports reach their listener", () => {
        expect(probe(undefined, pods.redirect!.ip, 15021)).toBe("health port=15021");
        expect(probe(undefined, pods.inbound!.ip, 9090)).toBe("app port=9090");
        expect(probe(undefined, pods.inbound!.ip, 9080)).toBe("proxy-inbound port=15006");
      });
      test('excludeInboundPorts "*" with includeInboundPorts 9080: 9080 is captured, 9090 is not', () => {
        expect(probe(undefined, pods.listed!.ip, 9080)).toBe("proxy-inbound port=15006");
        expect(probe(undefined, pods.listed!.ip, 9090)).toBe("app port=9090");
      });
      test("TCP from the pod to an outside address arrives at the outbound listener 15001", () => {
        expect(probe(pods.redirect!.netns, pods.redirect!.gateway, OUT, { uid: 1000 })).toBe(
          "proxy-outbound port=15001",
        );
        expect(probe(pods.redirect!.netns, pods.redirect!.gateway, OUT)).toBe("proxy-outbound port=15001");
      });
      test("the proxy's UID 1337 goes straight out", () => {
        expect(probe(pods.redirect!.netns, pods.redirect!.gateway, OUT, { uid: 1337 })).toBe(`outside port=${OUT}`);
      });
      test("localhost stays local", () => {
        expect(probe(pods.redirect!.netns, "127.0.0.1", 9080, { uid: 1000 })).toBe("app port=9080");
      });
    });

    describe("TPROXY", () => {
      test("TCP from outside arrives at the transparent listener 15006 with its original destination", () => {
        const ip = pods.tproxy!.ip;
        expect(probe(undefined, ip, 9080)).toBe(`proxy-inbound port=15006 dst=${ip}:9080`);
        expect(probe(undefined, ip, 9443)).toBe(`proxy-inbound port=15006 dst=${ip}:9443`);
      });
      test("the excluded health port 15021 is not intercepted", () => {
        expect(probe(undefined, pods.tproxy!.ip, 15021)).toBe("health port=15021");
      });
      test("outbound TCP arrives at 15001; the proxy's UID 1337 goes straight out", () => {
        const p = pods.tproxy!;
        expect(probe(p.netns, p.gateway, OUT, { uid: 1000 })).toBe("proxy-outbound port=15001");
        expect(probe(p.netns, p.gateway, OUT, { uid: 1337 })).toBe(`outside port=${OUT}`);
      });
      test("the policy route for marked packets is in place", () => {
        const p = pods.tproxy!;
        expect(p.netns.exec(["ip", "-4", "rule"]).stdout).toMatch(/fwmark 0x539 lookup 133/);
        expect(p.netns.exec(["ip", "-4", "route", "show", "table", "133"]).stdout).toContain("local default dev lo");
      });
    });

    describe("application init containers (before the proxy listens)", () => {
      test("excludeOutboundPorts: the init container reaches its target, other ports do not", () => {
        const p = pods["init-ports"]!;
        expect(probe(p.netns, p.gateway, OUT_EXCLUDED, { uid: 1000 })).toBe(`outside port=${OUT_EXCLUDED}`);
        // Without the exclusion the connection goes to 15001, where nothing listens yet.
        expect(probe(p.netns, p.gateway, OUT, { uid: 1000 })).toBe("");
      });
      test("excludeOutboundIPRanges: the init container reaches any port of that range", () => {
        const p = pods["init-ranges"]!;
        expect(probe(p.netns, p.gateway, OUT, { uid: 1000 })).toBe(`outside port=${OUT}`);
        expect(probe(p.netns, p.gateway, OUT_EXCLUDED, { uid: 1000 })).toBe(`outside port=${OUT_EXCLUDED}`);
        // Other destinations are still captured: a neighbour pod's address goes to 15001.
        expect(probe(p.netns, pods.redirect!.ip, 9080, { uid: 1000 })).toBe("");
      });
      test("once the proxy listens, the rest is captured and the exclusions still bypass it", async () => {
        const ports = pods["init-ports"]!;
        const ranges = pods["init-ranges"]!;
        const proxies = [
          await listen(ports.netns, { 15001: "proxy-outbound" }),
          await listen(ranges.netns, { 15001: "proxy-outbound" }),
        ];
        try {
          expect(probe(ports.netns, ports.gateway, OUT, { uid: 1000 })).toBe("proxy-outbound port=15001");
          expect(probe(ports.netns, ports.gateway, OUT_EXCLUDED, { uid: 1000 })).toBe(`outside port=${OUT_EXCLUDED}`);
          expect(probe(ranges.netns, pods.redirect!.ip, 9080, { uid: 1000 })).toBe("proxy-outbound port=15001");
          expect(probe(ranges.netns, ranges.gateway, OUT, { uid: 1000 })).toBe(`outside port=${OUT}`);
        } finally {
          for (const p of proxies) p.stop();
        }
      });
    });

    test("CHECK fails once a TPROXY rule is gone; ADD again repairs it", async () => {
      const p = pods.tproxy!;
      flushChain(p.netns, rules, "mangle", "ISTIO_DIVERT");
      const err = await p.runtime.check(p.attachment).then(
        () => undefined,
        (e) => e as Error & { run: { stdout: string } },
      );
      expect(err).toBeDefined();
      const body = JSON.parse(err!.run.stdout);
      expect(body.code).toBe(103);
      expect(body.details).toContain("ISTIO_DIVERT");
      await p.runtime.exec("ADD", p.runtime.conflist.plugins[1]!, p.attachment, p.result);
      await p.runtime.check(p.attachment);
      expect(
        p.netns
          .exec(["ip", "-4", "rule"])
          .stdout.split("\n")
          .filter((l) => l.includes("lookup 133")).length,
      ).toBe(1);
    });

    test("DEL leaves the rules, the ip rule and the route to the namespace; ADD into it replaces them, one copy", async () => {
      const count = (p: Pod) => ({
        ours: anythingOfOurs(p.netns).length,
        rules: [4, 6].map((f) => listRules(p.netns, rules, f as 4 | 6).split("\n").length),
        ipRules: p.netns
          .exec(["ip", "-4", "rule"])
          .stdout.split("\n")
          .filter((l) => l.includes("lookup 133")).length,
      });
      for (const key of ["tproxy", "redirect"]) {
        const p = pods[key]!;
        const before = count(p);
        expect(before.ours).toBeGreaterThan(0);
        await p.runtime.del(p.attachment);
        // The runtime destroys the namespace right after DEL; until then everything is as it was.
        expect(count(p)).toEqual(before);
        await p.runtime.add(p.attachment);
        expect(count(p)).toEqual(before);
        if (key === "tproxy") expect(before.ipRules).toBe(1);
        await p.runtime.check(p.attachment);
      }
    });
  });
}
