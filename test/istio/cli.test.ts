// meshcnictl with the Istio profile: `explain` prints the same payloads as the plugin (the
// rules goldens), and `install-cni --mesh istio` renders a conflist entry that selects the Istio
// profile and gives those payloads. Runs the compiled dist/meshcnictl.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import { profileFor } from "../../internal/mesh/index.ts";
import { istioProfile } from "../../internal/mesh/istio/profile.ts";
import { parsePod } from "../../internal/kube/objects.ts";
import { iptablesBackend } from "../../internal/firewall/iptables/index.ts";
import { repoPath } from "../support/golden.ts";
import { buildCasePod, goldenPayload } from "./cases.ts";

const CLI = repoPath("dist/meshcnictl");

function cli(args: string[]) {
  const r = Bun.spawnSync([CLI, ...args], { stdout: "pipe", stderr: "pipe", cwd: repoPath() });
  return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

/** explain's output from the first payload on (after its header comments). */
function payloadOf(out: string): string {
  const at = out.indexOf("# iptables-restore");
  return at === -1 ? "" : out.slice(at);
}

describe("meshcnictl with the Istio profile (build dist/ first)", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "meshcni-istio-cli-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const podFile = (name: string, pod: unknown) => {
    const file = join(dir, `${name}.json`);
    writeFileSync(file, JSON.stringify(pod));
    return file;
  };

  test("explain --mesh istio prints the plugin's payloads for an injected pod", () => {
    const r = cli(["explain", "--mesh", "istio", "-f", "testdata/istio/pods/sidecar.json"]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toContain("istio-proxy as a sidecar");
    expect(payloadOf(r.stdout)).toBe(goldenPayload("default"));
  });

  test("explain shows TPROXY's payloads and ip commands", () => {
    const file = podFile(
      "tproxy",
      buildCasePod({ pod: "sidecar.json", annotations: { "sidecar.istio.io/interceptionMode": "TPROXY" } }),
    );
    const r = cli(["explain", "--mesh", "istio", "-f", file]);
    expect(r.code).toBe(0);
    expect(payloadOf(r.stdout)).toBe(goldenPayload("interception-mode-tproxy"));
  });

  test("explain says why a gateway and a pod with istio-init are skipped", () => {
    const gw = cli(["explain", "--mesh", "istio", "-f", "testdata/istio/pods/gateway.json"]);
    expect(gw.code).toBe(0);
    expect(gw.stdout).toContain(`"proxy router" (a gateway)`);
    expect(gw.stdout).not.toContain("*nat");
    const init = cli(["explain", "--mesh", "istio", "-f", "testdata/istio/pods/istio-init.json"]);
    expect(init.stdout).toContain("istio-init init container");
  });

  test("explain fails like ADD on an invalid annotation, naming it", () => {
    const file = podFile(
      "bad",
      buildCasePod({
        pod: "sidecar.json",
        annotations: { "traffic.sidecar.istio.io/excludeInterfaces": "eth0,-j ACCEPT" },
      }),
    );
    const r = cli(["explain", "--mesh", "istio", "-f", file]);
    expect(r.code).toBe(1);
    expect(r.stdout + r.stderr).toContain("traffic.sidecar.istio.io/excludeInterfaces");
    expect(r.stdout + r.stderr).toContain("-j ACCEPT");
  });

  function renderedEntry(args: string[]): Record<string, unknown> {
    const r = cli(["install-cni", "--mesh", "istio", ...args]);
    expect(r.code).toBe(0);
    const cm = parseAllDocuments(r.stdout)
      .map((d) => d.toJS())
      .find((o) => o?.kind === "ConfigMap" && o.metadata?.name === "meshcni-config");
    expect(cm).toBeDefined();
    return JSON.parse(cm.data["plugin-config.json"]);
  }

  test("install-cni --mesh istio renders an entry that selects the Istio profile and its rules", () => {
    const entry = renderedEntry([]);
    expect(entry.mesh).toBe("istio");
    expect((entry.kubernetes as any).exclude_namespaces).toEqual(["istio-system", "kube-system"]);
    // The runtime adds cniVersion (from the conflist) when it calls the plugin.
    const conf = parsePluginConf(JSON.stringify({ cniVersion: "1.0.0", ...entry }));
    expect(profileFor(conf)).toBe(istioProfile);
    const pod = parsePod(buildCasePod({ pod: "sidecar.json" }))!;
    expect(iptablesBackend.render(istioProfile.plan({ conf, pod, podAddresses: ["10.244.1.12"] }))).toBe(
      goldenPayload("default"),
    );
  });

  test("install-cni --mesh istio carries the port and id flags into the istio section", () => {
    const entry = renderedEntry([
      "--outbound-port",
      "16001",
      "--inbound-port",
      "16006",
      "--proxy-uid",
      "2337",
      "--proxy-gid",
      "2338",
      "--iptables-mode",
      "nft",
    ]);
    const conf = parsePluginConf(JSON.stringify({ cniVersion: "1.0.0", ...entry }));
    expect(istioProfile.firewall(conf).mode).toBe("nft");
    const pod = parsePod(
      buildCasePod({ pod: "sidecar.json", proxySecurityContext: { runAsUser: null, runAsGroup: null } }),
    )!;
    const text = iptablesBackend.render(istioProfile.plan({ conf, pod, podAddresses: ["10.244.1.12"] }));
    expect(text).toContain("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 16001");
    expect(text).toContain("-A ISTIO_IN_REDIRECT -p tcp -j REDIRECT --to-ports 16006");
    expect(text).toContain("-A ISTIO_OUTPUT -m owner --uid-owner 2337 -j RETURN");
    expect(text).toContain("-A ISTIO_OUTPUT -m owner --gid-owner 2338 -j RETURN");
  });
});
