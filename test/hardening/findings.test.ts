// Regression tests for what the fuzzer found, through the compiled plugin.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { buildCasePod, istioEntry } from "../istio/cases.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { cniEnv, runPlugin } from "../support/plugin-run.ts";

const base = {
  cniVersion: "1.0.0",
  name: "k8s-pod-network",
  type: "meshcni",
  kubernetes: { kubeconfig: "/nonexistent/kubeconfig" },
};
const args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=web-5b8b6f7c9d-x2x7q";

describe("a list where the config needs an object is invalid config (code 7), not an empty object", () => {
  for (const key of ["prevResult", "linkerd", "istio", "kubernetes"]) {
    test(key, async () => {
      const r = await runPlugin(
        cniEnv("ADD", { CNI_ARGS: args }),
        JSON.stringify({ ...base, [key]: [{ cniVersion: "1.0.0" }, 2] }),
        { dryRun: true },
      );
      expect(r.code).toBe(1);
      const err = JSON.parse(r.stdout);
      expect(err.code).toBe(7);
      expect(err.details).toContain(key);
      expect(r.payload).toBeUndefined();
    });
  }
});

describe("deeply nested stdin is a decode failure (code 6), answered at once", () => {
  for (const depth of [1001, 20_000, 200_000]) {
    test(`${depth} levels in prevResult`, async () => {
      const deep = `${"[".repeat(depth)}${"]".repeat(depth)}`;
      const stdin = JSON.stringify({ ...base, prevResult: { cniVersion: "1.0.0", ips: [] } }).replace(
        '"ips":[]',
        `"ips":[],"x":${deep}`,
      );
      const r = await runPlugin(cniEnv("ADD", { CNI_ARGS: "" }), stdin, { dryRun: true });
      expect(r.code).toBe(1);
      // How fast: bench/bounds.ts.
      expect(JSON.parse(r.stdout).code).toBe(6);
      expect(r.payload).toBeUndefined();
    });
  }

  test("1000 levels (inside strings, brackets do not count) are still fine", async () => {
    const deep = `${"[".repeat(998)}"]]]]{{{"${"]".repeat(998)}`;
    const stdin = JSON.stringify({ ...base, prevResult: { cniVersion: "1.0.0", ips: [] } }).replace(
      '"ips":[]',
      `"ips":[],"x":${deep}`,
    );
    const r = await runPlugin(cniEnv("ADD", { CNI_ARGS: "" }), stdin, { dryRun: true });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).x.flat(Infinity)).toEqual(["]]]]{{{"]);
    expect(r.payload).toBe("");
  });
});

describe("text a pod controls never forges a log line or reaches the terminal raw", () => {
  let api: ApiServer;
  let dir: string;
  let kubeconfig: string;
  const FORGED = "router\nmeshcni: info ADD 0: applied 0 rules\x1b[2J\u202e";
  beforeAll(async () => {
    api = await startApiServer({ token: "t" });
    dir = mkdtempSync(join(tmpdir(), "meshcni-forge-"));
    kubeconfig = join(dir, "kubeconfig");
    writeFileSync(kubeconfig, api.kubeconfig(), { mode: 0o600 });
    const gateway = buildCasePod({ pod: "sidecar.json", name: "gw" });
    gateway.spec.containers.find((c: any) => c.name === "istio-proxy").args = ["proxy", FORGED];
    api.addPod(gateway);
    api.addPod(
      buildCasePod({
        pod: "sidecar.json",
        name: "bad",
        annotations: { "traffic.sidecar.istio.io/excludeOutboundPorts": `80,${FORGED}` },
      }),
    );
  });
  afterAll(async () => {
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const add = (name: string) =>
    runPlugin(
      cniEnv("ADD", { CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=bookinfo;K8S_POD_NAME=${name}` }),
      JSON.stringify(istioEntry({ kubernetes: { kubeconfig, exclude_namespaces: [] } })),
    );
  const noRawControl = (stderr: string) => {
    expect(stderr).not.toMatch(/[\x00-\x09\x0b-\x1f\x7f\u202e]/);
    // Every line is one of the plugin's, and only one says what happened to the pod.
    for (const line of stderr.trimEnd().split("\n"))
      expect(line).toMatch(/^meshcni: (debug|info|warn|error) ADD 3f2a9c1d7e5b: /);
    expect(stderr).not.toMatch(/^meshcni: info ADD 0:/m);
  };

  test("istio-proxy's args[1] (a gateway) is quoted in the skip reason", async () => {
    const r = await add("gw");
    expect(r.code).toBe(0);
    expect(r.stderr).toContain(
      `runs as "proxy router\\nmeshcni: info ADD 0: applied 0 rules\\x1b[2J\\u202e" (a gateway)`,
    );
    noRawControl(r.stderr);
  });

  test("an annotation value is quoted in the error and its log line", async () => {
    const r = await add("bad");
    expect(r.code).toBe(1);
    const err = JSON.parse(r.stdout);
    expect(err.code).toBe(7);
    expect(err.details).toContain("\\x1b[2J\\u202e");
    expect(err.details).not.toMatch(/[\x1b\n\u202e]/);
    noRawControl(r.stderr);
  });
});
