import { expect, test } from "bun:test";
import * as v from "valibot";
import { parsePluginConf, type PluginConf, PluginConfSchema } from "./plugin-config.ts";

const entry = {
  cniVersion: "1.0.0",
  name: "k8s-pod-network",
  type: "meshcni",
  mesh: "istio",
  log_level: "debug",
  kubernetes: { kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig", exclude_namespaces: ["kube-system"] },
  istio: { "exclude-inbound-ports": "15020" },
  agent_socket: "/var/run/meshcni/agent.sock",
};
const prev = (ip: string) => ({
  cniVersion: "1.0.0",
  ips: [{ address: `${ip}/24` }],
  interfaces: [{ name: "eth0", sandbox: "/var/run/netns/x" }],
});
/** What the schema alone makes of `x`, as parsePluginConf did before it remembered configs. */
const whole = (x: unknown) => v.parse(PluginConfSchema, x) as PluginConf;

test(
  "the same entry with another prevResult parses as the " + "whole schema parses it, from the configs it remembers",
  () => {
    const first = parsePluginConf(JSON.stringify({ ...entry, prevResult: prev("10.0.0.1") }));
    const second = parsePluginConf(JSON.stringify({ ...entry, prevResult: prev("10.0.0.2") }));
    expect(first).toEqual(whole({ ...entry, prevResult: prev("10.0.0.1") }));
    expect(second).toEqual(whole({ ...entry, prevResult: prev("10.0.0.2") }));
    expect(second.prevResult).toEqual(prev("10.0.0.2"));
    // Remembered, so shared between pods: frozen, nested sections too.
    expect(Object.isFrozen(second.istio)).toBe(true);
    expect(() => {
      (second.kubernetes as { kubeconfig?: string }).kubeconfig = "/elsewhere";
    }).toThrow();
    // Without prevResult: the remembered config itself.
    const bare = parsePluginConf(JSON.stringify(entry));
    expect(bare).toEqual(whole(entry));
    expect(bare.prevResult).toBeUndefined();
    // Another entry is not mistaken for it.
    expect(parsePluginConf(JSON.stringify({ ...entry, mesh: "linkerd" })).mesh).toBe("linkerd");
  },
);

test("an entry or prevResult the schema refuses gets the whole parse's error, remembered entry or not", () => {
  parsePluginConf(JSON.stringify(entry));
  const err = (x: unknown) => {
    try {
      parsePluginConf(JSON.stringify(x));
    } catch (e) {
      return { code: (e as { code: number }).code, msg: (e as Error).message };
    }
    return undefined;
  };
  expect(err({ ...entry, prevResult: [1, 2] })).toEqual({ code: 7, msg: expect.stringContaining("prevResult") });
  expect(err({ ...entry, prevResult: { cniVersion: 1 } })).toEqual({
    code: 7,
    msg: expect.stringContaining("prevResult.cniVersion"),
  });
  expect(err({ ...entry, timeout_seconds: 600, prevResult: prev("10.0.0.3") })).toEqual({
    code: 7,
    msg: expect.stringContaining("timeout_seconds"),
  });
});

test(
  "an entry with a number JSON cannot write back (1e400, " + "-0) is never remembered, so it never stands for another",
  () => {
    const inf = parsePluginConf(`{"cniVersion":"1.0.0","name":"n","type":"meshcni","foo":1e400}`) as unknown as {
      foo: unknown;
    };
    expect(inf.foo).toBe(Number.POSITIVE_INFINITY);
    const nul = parsePluginConf(`{"cniVersion":"1.0.0","name":"n","type":"meshcni","foo":null}`) as unknown as {
      foo: unknown;
    };
    expect(nul.foo).toBeNull();
  },
);
