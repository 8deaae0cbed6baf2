// Regression tests for what the fuzzer found, through the compiled plugin.
import { describe, expect, test } from "bun:test";
import { cniEnv, runPlugin } from "../support/plugin-run.ts";

const base = { cniVersion: "1.0.0", name: "k8s-pod-network", type: "meshcni", kubernetes: { kubeconfig: "/nonexistent/kubeconfig" } };
const args = "IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=web-5b8b6f7c9d-x2x7q";

describe("a list where the config needs an object is invalid config (code 7), not an empty object", () => {
  for (const key of ["prevResult", "linkerd", "istio", "kubernetes"]) {
    test(key, async () => {
      const r = await runPlugin(cniEnv("ADD", { CNI_ARGS: args }), JSON.stringify({ ...base, [key]: [{ cniVersion: "1.0.0" }, 2] }), { dryRun: true });
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
      const stdin = JSON.stringify({ ...base, prevResult: { cniVersion: "1.0.0", ips: [] } }).replace('"ips":[]', `"ips":[],"x":${deep}`);
      const r = await runPlugin(cniEnv("ADD", { CNI_ARGS: "" }), stdin, { dryRun: true });
      expect(r.code).toBe(1);
      expect(JSON.parse(r.stdout).code).toBe(6);
      expect(r.ms).toBeLessThan(1000);
      expect(r.payload).toBeUndefined();
    });
  }

  test("1000 levels (inside strings, brackets do not count) are still fine", async () => {
    const deep = `${"[".repeat(998)}"]]]]{{{"${"]".repeat(998)}`;
    const stdin = JSON.stringify({ ...base, prevResult: { cniVersion: "1.0.0", ips: [] } }).replace('"ips":[]', `"ips":[],"x":${deep}`);
    const r = await runPlugin(cniEnv("ADD", { CNI_ARGS: "" }), stdin, { dryRun: true });
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).x.flat(Infinity)).toEqual(["]]]]{{{"]);
    expect(r.payload).toBe("");
  });
});
