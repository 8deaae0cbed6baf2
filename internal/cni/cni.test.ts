import { describe, expect, test } from "bun:test";
import { parseCmdArgs } from "./env.ts";
import type { CniError } from "./errors.ts";
import { parseK8sArgs } from "./k8s-args.ts";
import { convertResult } from "./result.ts";

const env = (e: Record<string, string>) => (k: string) => e[k];
const code = (f: () => unknown) => {
  try {
    f();
  } catch (e) {
    return (e as CniError).code;
  }
  return 0;
};

describe("environment", () => {
  test("per-command requirements; empty counts as absent", () => {
    expect(
      parseCmdArgs(env({ CNI_COMMAND: "DEL", CNI_CONTAINERID: "a", CNI_IFNAME: "eth0", CNI_NETNS: "" })).netns,
    ).toBeUndefined();
    expect(
      code(() => parseCmdArgs(env({ CNI_COMMAND: "ADD", CNI_CONTAINERID: "a", CNI_IFNAME: "eth0", CNI_NETNS: "" }))),
    ).toBe(4);
    expect(parseCmdArgs(env({ CNI_COMMAND: "GC" })).command).toBe("GC");
    expect(
      parseCmdArgs(
        env({
          CNI_COMMAND: "ADD",
          CNI_CONTAINERID: "a",
          CNI_IFNAME: "eth0",
          CNI_NETNS: "/proc/1/ns/net",
          CNI_PATH: "/a::/b",
        }),
      ).path,
    ).toEqual(["/a", "/b"]);
  });
  test("interface names as Linux allows them", () => {
    const base = { CNI_COMMAND: "ADD", CNI_CONTAINERID: "a", CNI_NETNS: "/x" };
    expect(code(() => parseCmdArgs(env({ ...base, CNI_IFNAME: "a".repeat(16) })))).toBe(4);
    expect(code(() => parseCmdArgs(env({ ...base, CNI_IFNAME: ".." })))).toBe(4);
    expect(code(() => parseCmdArgs(env({ ...base, CNI_IFNAME: "net1" })))).toBe(0);
  });
});

describe("CNI_ARGS", () => {
  test("kubelet's keys; the last of a repeated key wins; unknown keys ignored", () => {
    expect(parseK8sArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;K8S_POD_NAME=c;FOO=bar")).toEqual({
      podNamespace: "a",
      podName: "c",
    });
    expect(parseK8sArgs("K8S_POD_NAME=Web_1")).toEqual({ podName: "Web_1" });
    expect(parseK8sArgs("")).toEqual({});
  });
  test("malformed pairs and names that are not Kubernetes names are code 4", () => {
    expect(code(() => parseK8sArgs("K8S_POD_NAME"))).toBe(4);
    expect(code(() => parseK8sArgs("A=b=c"))).toBe(4);
    expect(code(() => parseK8sArgs("K8S_POD_NAMESPACE=a;K8S_POD_NAME=../x"))).toBe(4);
    expect(code(() => parseK8sArgs("K8S_POD_NAMESPACE=Kube;K8S_POD_NAME=x"))).toBe(4);
  });
});

describe("results", () => {
  const prev = {
    cniVersion: "0.3.1",
    ips: [
      { version: "4", address: "10.0.0.2/24" },
      { version: "6", address: "fd00::2/64" },
    ],
    dns: {},
  };
  test("1.x drops ips[].version, 0.x adds it from the address", () => {
    expect(convertResult(prev, "1.0.0")).toEqual({
      cniVersion: "1.0.0",
      ips: [{ address: "10.0.0.2/24" }, { address: "fd00::2/64" }],
      dns: {},
    });
    const back = convertResult(convertResult(prev, "1.1.0"), "0.4.0");
    expect(back.ips).toEqual([
      { version: "4", address: "10.0.0.2/24" },
      { version: "6", address: "fd00::2/64" },
    ]);
  });
  test("pre-0.3 results cannot be passed on", () => {
    expect(code(() => convertResult({ cniVersion: "0.2.0", ip4: { ip: "10.0.0.2/24" } }, "1.0.0"))).toBe(1);
  });
});
