// An istio-cni entry of the `kubernetes`-section era (Istio 1.7-1.20 chart: log_level,
// log_uds_address, kubernetes.{kubeconfig,cni_bin_dir,exclude_namespaces,k8s_api_root,
// intercept_type,node_name}) with only `type` changed to meshcni and `mesh: istio` added works:
// the compiled plugin, run as the runtime runs it (cniVersion 0.3.1, the bridge plugin's
// prevResult), looks the pod up through the kubeconfig and writes the Istio payloads to
// MESHCNI_DRY_RUN_FILE.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { repoPath } from "../support/golden.ts";
import { cniEnv, runPlugin } from "../support/plugin-run.ts";
import { buildCasePod, goldenPayload } from "./cases.ts";

const ENTRY = "testdata/istio/conf/istio-cni-1.18.conflist-entry.json";

describe("istio-cni era-B config with type meshcni", () => {
  let api: ApiServer;
  let dir: string;
  let stdin: string;

  beforeAll(async () => {
    api = await startApiServer({ token: "istio-cni-token" });
    dir = mkdtempSync(join(tmpdir(), "meshcni-istio-conf-"));
    const kubeconfig = join(dir, "ZZZ-istio-cni-kubeconfig");
    writeFileSync(kubeconfig, api.kubeconfig(), { mode: 0o600 });
    stdin = readFileSync(repoPath(ENTRY), "utf8").replace("__KUBECONFIG_FILEPATH__", kubeconfig);
    api.addPod(buildCasePod({ pod: "sidecar.json" }));
    api.addPod(
      buildCasePod({
        pod: "sidecar.json",
        name: "reviews-bad",
        annotations: { "traffic.sidecar.istio.io/excludeOutboundPorts": "5432,$(reboot)" },
      }),
    );
    api.addPod(
      buildCasePod({
        pod: "sidecar.json",
        name: "reviews-tproxy",
        annotations: { "sidecar.istio.io/interceptionMode": "TPROXY" },
      }),
    );
    api.addPod(buildCasePod({ pod: "sidecar.json", name: "reviews-dual", proxyEnv: { ISTIO_DUAL_STACK: "true" } }));
  });

  afterAll(async () => {
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const args = (ns: string, name: string) => ({
    CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${name};K8S_POD_INFRA_CONTAINER_ID=3f2a9c1d7e5b`,
  });

  test("ADD for an injected pod writes exactly the default pod's payload and passes prevResult on", async () => {
    const r = await runPlugin(cniEnv("ADD", args("bookinfo", "reviews-v1-7f9c6d8b5-k4m2p")), stdin, { dryRun: true });
    expect(r.stderr).not.toContain("error");
    expect(r.code).toBe(0);
    expect(r.payload).toBe(goldenPayload("default"));
    const result = JSON.parse(r.stdout);
    expect(result.cniVersion).toBe("0.3.1");
    expect(result.ips[0].address).toBe("10.244.1.12/24");
    expect(
      api.requests.some(
        (q) =>
          q.path === "/api/v1/namespaces/bookinfo/pods/reviews-v1-7f9c6d8b5-k4m2p" &&
          q.authorization === "Bearer istio-cni-token",
      ),
    ).toBe(true);
    // istio-cni reads pod annotations only: the namespace is never fetched.
    expect(api.requests.some((q) => q.path === "/api/v1/namespaces/bookinfo")).toBe(false);
  });

  test("TPROXY through the same entry", async () => {
    const r = await runPlugin(cniEnv("ADD", args("bookinfo", "reviews-tproxy")), stdin, { dryRun: true });
    expect(r.code).toBe(0);
    expect(r.payload).toBe(goldenPayload("interception-mode-tproxy"));
  });

  test("kubernetes.exclude_namespaces is honoured before any API call", async () => {
    const before = api.requests.length;
    const r = await runPlugin(cniEnv("ADD", args("istio-system", "istiod-7d4f8b6c9-x1y2z")), stdin, { dryRun: true });
    expect(r.code).toBe(0);
    expect(r.payload).toBe("");
    expect(api.requests.length).toBe(before);
  });

  test("an invalid annotation fails ADD with code 7 naming it, and nothing is written", async () => {
    const r = await runPlugin(cniEnv("ADD", args("bookinfo", "reviews-bad")), stdin, { dryRun: true });
    expect(r.code).toBe(1);
    const err = JSON.parse(r.stdout);
    expect(err.cniVersion).toBe("0.3.1");
    expect(err.code).toBe(7);
    expect(err.msg).toBe("invalid annotation traffic.sidecar.istio.io/excludeOutboundPorts");
    expect(err.details).toContain("$(reboot)");
    expect(r.payload).toBeUndefined();
  });

  const dualStackInput = (): string => {
    const conf = JSON.parse(stdin);
    conf.cniVersion = "1.0.0";
    conf.prevResult = {
      cniVersion: "1.0.0",
      interfaces: conf.prevResult.interfaces,
      ips: [
        { interface: 2, address: "10.244.1.12/24", gateway: "10.244.1.1" },
        { interface: 2, address: "fd00:10:244:1::c/64", gateway: "fd00:10:244:1::1" },
      ],
    };
    return JSON.stringify(conf);
  };

  test("a dual-stack prevResult turns on the ip6tables payload only when istio-proxy has ISTIO_DUAL_STACK=true", async () => {
    const r = await runPlugin(cniEnv("ADD", args("bookinfo", "reviews-dual")), dualStackInput(), { dryRun: true });
    expect(r.code).toBe(0);
    expect(r.payload).toContain("# ip6tables-restore --noflush (IPv6)");
    expect(r.payload).toContain("-A ISTIO_OUTPUT -s ::6/128 -o lo -j RETURN");
    expect(r.payload).toContain("# ip -6 addr replace ::6/128 dev lo");
    const plain = await runPlugin(cniEnv("ADD", args("bookinfo", "reviews-v1-7f9c6d8b5-k4m2p")), dualStackInput(), {
      dryRun: true,
    });
    expect(plain.code).toBe(0);
    expect(plain.payload).toBe(goldenPayload("default"));
  });
});
