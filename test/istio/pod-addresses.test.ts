// Without `ips` in the previous result, the Istio profile reads the pod's addresses inside its
// network namespace (ip -j addr show through nsenter) to decide on IPv6 rules as istio-iptables
// does: a real namespace holding an IPv6 address only gets ip6tables rules too, one that also
// holds an IPv4 address does not.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseIpAddrJson } from "../../internal/net/ip-addr.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { Netns, uniq } from "../support/netns.ts";
import { cniEnv, runPlugin } from "../support/plugin-run.ts";
import { buildCasePod, istioEntry } from "./cases.ts";

test("ip -j addr show: every inet and inet6 address, in order; anything else is not an answer", () => {
  const doc = [
    {
      ifname: "lo",
      addr_info: [
        { family: "inet", local: "127.0.0.1", scope: "host" },
        { family: "inet6", local: "::1" },
      ],
    },
    {
      ifname: "eth0",
      addr_info: [
        { family: "inet6", local: "fd00::c", scope: "global" },
        { family: "inet6", local: "fe80::1", scope: "link" },
      ],
    },
    { ifname: "d1" },
  ];
  expect(parseIpAddrJson(JSON.stringify(doc))).toEqual(["127.0.0.1", "::1", "fd00::c", "fe80::1"]);
  expect(parseIpAddrJson("[]")).toEqual([]);
  expect(parseIpAddrJson("{}")).toBeUndefined();
  expect(parseIpAddrJson("1: lo: <LOOPBACK>")).toBeUndefined();
});

describe("the pod's addresses from its namespace (dist/meshcni)", () => {
  let api: ApiServer;
  let dir: string;
  let netns: Netns;
  let kubeconfig: string;
  const name = `reviews-addr-${uniq()}`;

  beforeAll(async () => {
    api = await startApiServer({ token: "addr-token" });
    api.addPod(buildCasePod({ pod: "sidecar.json", name }));
    dir = mkdtempSync(join(tmpdir(), "meshcni-addr-"));
    kubeconfig = join(dir, "kubeconfig");
    writeFileSync(kubeconfig, api.kubeconfig(), { mode: 0o600 });
    netns = Netns.create(`mca-${uniq()}`);
    for (const argv of [
      ["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth0p"],
      ["ip", "link", "set", "eth0p", "up"],
      ["ip", "-6", "addr", "add", "fd00:10:244:1::c/64", "dev", "eth0", "nodad"],
      ["ip", "link", "set", "eth0", "up"],
    ]) {
      const r = netns.exec(argv);
      if (r.code !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr}`);
    }
  });
  afterAll(async () => {
    netns?.delete();
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const stdin = (extra: Record<string, unknown> = {}) =>
    JSON.stringify(istioEntry({ kubernetes: { kubeconfig }, istio: { "iptables-mode": "nft" }, ...extra }));
  const env = (path: string) =>
    cniEnv("ADD", { CNI_NETNS: path, CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=bookinfo;K8S_POD_NAME=${name}` });

  test("an IPv6-only namespace and no prevResult: the IPv6 rules are applied too", async () => {
    const r = await runPlugin(env(netns.path), stdin());
    expect(r.stderr).toMatch(/the previous result names no address; in the pod's namespace: \[.*"fd00:10:244:1::c"/);
    expect(r.code).toBe(0);
    expect(netns.save("nft", 6)).toContain("-A ISTIO_OUTPUT -s ::6/128 -o lo -j RETURN");
    expect(netns.save("nft", 4)).toContain("-A ISTIO_REDIRECT -p tcp -j REDIRECT --to-ports 15001");
  });

  test("the previous result's addresses win when it names some", async () => {
    const prevResult = { cniVersion: "1.0.0", ips: [{ address: "10.244.1.12/24" }] };
    const r = await runPlugin(env(netns.path), stdin({ prevResult }), { dryRun: true });
    expect(r.code).toBe(0);
    expect(r.payload).not.toContain("ip6tables");
    expect(r.stderr).not.toContain("in the pod's namespace");
  });

  test("once the namespace has an IPv4 address too, IPv4 rules only (no ISTIO_DUAL_STACK)", async () => {
    const add = netns.exec(["ip", "addr", "add", "10.244.1.12/24", "dev", "eth0"]);
    expect(add.code).toBe(0);
    const r = await runPlugin(env(netns.path), stdin(), { dryRun: true });
    expect(r.code).toBe(0);
    expect(r.payload).toContain("# iptables-restore --noflush (IPv4)");
    expect(r.payload).not.toContain("ip6tables");
  });
});
