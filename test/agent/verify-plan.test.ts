// Verify's pure core (internal/agent/verify/plan.ts): which pods are looked at and where their
// namespace is (the record's, else the one namespace holding all their addresses), the CHECK's
// outcome judged (only missing rules are evidence; a namespace gone is not), the requests the
// agent runs, the spread over the period, and the addresses read from a namespace's /proc files.
// Also repair's planner in --repair in-place mode.
import { describe, expect, test } from "bun:test";
import {
  actOn,
  addressContainerId,
  dueIn,
  inPlaceMessage,
  judgeCheck,
  namespaceOf,
  parseLocalAddresses,
  planTargets,
  podIps,
  podRequest,
  redirectGone,
  resolveByAddress,
  slotOf,
  targetFromAdd,
  type VerifyTarget,
} from "../../internal/agent/verify/plan.ts";
import {
  afterActs,
  newRepairMemory,
  noteActs,
  planRepair,
  type RepairConfig,
} from "../../internal/agent/repair/plan.ts";
import type { CheckResult } from "../../internal/agent/socket/check.ts";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import { linkerdProfile } from "../../internal/mesh/linkerd/profile.ts";
import type { PodRecord } from "../../internal/wire/state.ts";

const CFG: RepairConfig = {
  mode: "in-place",
  node: "node-a",
  conf: parsePluginConf(
    JSON.stringify({
      cniVersion: "1.0.0",
      name: "k8s-pod-network",
      type: "meshcni",
      mesh: "linkerd",
      kubernetes: { kubeconfig: "/k", exclude_namespaces: ["kube-system"], pod_namespace: "meshcni" },
    }),
  ),
  profile: linkerdProfile,
  daemonSetName: "meshcni-node",
  graceMs: 1000,
  ratePerMinute: 10,
  retryMs: 60_000,
};
const NOW = Date.parse("2026-11-29T10:00:00Z");

let n = 0;
function pod(
  name: string,
  o: { ns?: string; node?: string; meshed?: boolean; hostNetwork?: boolean; ip?: string; failed?: boolean } = {},
) {
  const meshed = o.meshed ?? true;
  return {
    metadata: {
      name,
      namespace: o.ns ?? "emojivoto",
      uid: `0000000${++n}-aaaa-4bbb-8ccc-000000000000`,
      annotations: meshed ? { "linkerd.io/inject": "enabled" } : {},
    },
    spec: {
      nodeName: o.node ?? "node-a",
      ...(o.hostNetwork ? { hostNetwork: true } : {}),
      initContainers: meshed
        ? [
            { name: "linkerd-network-validator", image: "proxy:1" },
            { name: "linkerd-proxy", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1", restartPolicy: "Always" },
          ]
        : [],
      containers: [{ name: "web" }],
    },
    status: {
      phase: "Running",
      podIPs: o.ip ? [{ ip: o.ip }] : [],
      conditions: [
        { type: "PodReadyToStartContainers", status: "True", lastTransitionTime: new Date(NOW - 60_000).toISOString() },
      ],
      initContainerStatuses: meshed
        ? [
            o.failed
              ? {
                  name: "linkerd-network-validator",
                  state: { waiting: { reason: "CrashLoopBackOff" } },
                  lastState: { terminated: { exitCode: 95, reason: "Error" } },
                }
              : { name: "linkerd-network-validator", state: { terminated: { exitCode: 0 } } },
          ]
        : [],
    },
  };
}
const record = (p: ReturnType<typeof pod>, over: Partial<PodRecord> = {}): PodRecord => ({
  v: 1,
  containerId: `c-${p.metadata.name}`,
  namespace: p.metadata.namespace,
  name: p.metadata.name,
  uid: p.metadata.uid,
  decision: "meshed",
  reason: "meshed",
  netns: `/var/run/netns/cni-${p.metadata.name}`,
  backend: "iptables-nft",
  time: new Date(NOW - 61_000).toISOString(),
  ...over,
});

describe("which pods verify looks at, and where", () => {
  test("a record naming a namespace in the netns folder: that namespace; no record, an older meshcni's record or a skipped one: by address", () => {
    const withRecord = pod("web-1", { ip: "10.0.0.1" });
    const noRecord = pod("web-2", { ip: "10.0.0.2" });
    const oldRecord = pod("web-3", { ip: "10.0.0.3" });
    const outside = pod("web-4", { ip: "10.0.0.4" });
    const records = [
      record(withRecord),
      record(oldRecord, { netns: undefined }),
      record(outside, { netns: "/proc/123/ns/net" }),
    ];
    const { targets, pending } = planTargets(CFG, [withRecord, noRecord, oldRecord, outside], records);
    expect(targets).toEqual([
      {
        namespace: "emojivoto",
        name: "web-1",
        uid: withRecord.metadata.uid,
        ips: ["10.0.0.1"],
        netns: "cni-web-1",
        via: "record",
        containerId: "c-web-1",
        backend: "iptables-nft",
      },
    ]);
    expect(pending.map((p) => p.name)).toEqual(["web-2", "web-3", "web-4"]);
  });

  test("never: another node's pod, a hostNetwork pod, an unmeshed pod, an excluded namespace, meshcni's own pods", () => {
    const never = [
      pod("a", { node: "node-b", ip: "10.0.0.5" }),
      pod("b", { hostNetwork: true, ip: "10.0.0.6" }),
      pod("c", { meshed: false, ip: "10.0.0.7" }),
      pod("d", { ns: "kube-system", ip: "10.0.0.8" }),
      pod("meshcni-node-x", { ns: "meshcni", ip: "10.0.0.9" }),
    ];
    const { targets, pending } = planTargets(
      CFG,
      never,
      never.map((p) => record(p)),
    );
    expect([targets, pending]).toEqual([[], []]);
  });

  test("a pod whose validator failed is looked at too (by address unless handled)", () => {
    const p = pod("web-5", { ip: "10.0.0.10", failed: true });
    expect(planTargets(CFG, [p], []).pending.map((x) => x.name)).toEqual(["web-5"]);
  });

  test("by address: the one namespace holding every address of the pod; none or two: unreachable, and why", () => {
    const byAddress = new Map([
      ["10.0.0.1", ["ns-a"]],
      ["fd00::1", ["ns-a", "ns-b"]],
      ["10.0.0.2", ["ns-b", "ns-c"]],
    ]);
    expect(namespaceOf(["10.0.0.1", "fd00::1"], byAddress)).toEqual({ netns: "ns-a" });
    expect(namespaceOf(["10.0.0.2"], byAddress)).toEqual({
      why: "2 namespaces hold its address 10.0.0.2 (ns-b, ns-c)",
    });
    expect(namespaceOf(["10.9.9.9"], byAddress)).toEqual({
      why: "no namespace in the netns folder holds its address 10.9.9.9",
    });
    expect(namespaceOf([], byAddress)).toEqual({ why: "it has no address in its status (status.podIPs)" });
    const p = { namespace: "emojivoto", name: "web", uid: "u-1", ips: ["10.0.0.1"] };
    const q = { namespace: "emojivoto", name: "web-2", uid: "u-2", ips: ["10.0.0.2"] };
    const r = resolveByAddress([p, q], byAddress);
    expect(r.targets).toEqual([{ ...p, netns: "ns-a", via: "address", containerId: "meshcni-verify-u-1" }]);
    expect(r.unreachable.map((u) => u.name)).toEqual(["web-2"]);
  });

  test("the pod's addresses: status.podIPs, else status.podIP", () => {
    expect(podIps({ status: { podIPs: [{ ip: "10.0.0.1" }, { ip: "fd00::1" }] } })).toEqual(["10.0.0.1", "fd00::1"]);
    expect(podIps({ status: { podIP: "10.0.0.1" } })).toEqual(["10.0.0.1"]);
    expect(podIps({})).toEqual([]);
    expect(addressContainerId("a/b c")).toBe("meshcni-verify-abc");
  });
});

const answer = (exitCode: number, summary: Record<string, unknown>): CheckResult => ({
  ok: true,
  answer: { v: 1, stdout: "", exitCode, lines: [], level: "info", context: "", summary } as never,
});

describe("the CHECK's outcome judged", () => {
  test("rules in place: ok; missing or altered (code 103): evidence; the namespace gone: nothing; else cannot tell", () => {
    expect(judgeCheck(answer(0, { outcome: "meshed" }), true)).toEqual({ kind: "ok" });
    expect(judgeCheck(answer(1, { outcome: "failed", code: 103, reason: "no jump" }), true)).toEqual({
      kind: "missing",
      why: "no jump",
    });
    // Gone wins over anything the CHECK said: a namespace torn down mid-CHECK fails it.
    expect(judgeCheck(answer(1, { outcome: "failed", code: 103 }), false)).toEqual({ kind: "gone" });
    expect(judgeCheck({ ok: false, why: "the image has no ip" }, true).kind).toBe("unknown");
    expect(judgeCheck(answer(0, { outcome: "skipped", reason: "not injected" }), true)).toEqual({
      kind: "unknown",
      why: "the pod gets no rules now: not injected",
    });
    expect(judgeCheck(answer(1, { outcome: "failed", code: 4, reason: "CNI_NETNS does not exist" }), true).kind).toBe(
      "unknown",
    );
  });

  test("evidence to evict or delete on: a table, chain or jump of meshcni's gone; rules that merely differ are not", () => {
    const gone = [
      "iptables chain PROXY_INIT_REDIRECT is missing from table nat",
      "nft table ip meshcni is missing",
      "nft chain proxy_init_redirect is missing from table ip meshcni",
      "iptables nat/PREROUTING: expected one '-A PREROUTING -j PROXY_INIT_REDIRECT', found 0",
    ];
    for (const p of gone)
      expect([p, redirectGone(`meshcni's rules for web are not in place: ${p}`)]).toEqual([p, true]);
    const differ = [
      "iptables nat/PROXY_INIT_REDIRECT: missing '-A PROXY_INIT_REDIRECT -p tcp --dport 4191 -j RETURN'",
      "iptables nat/PROXY_INIT_REDIRECT: missing '-A X'; unexpected '-A Y'",
      "iptables nat/PREROUTING: expected one '-A PREROUTING -j PROXY_INIT_REDIRECT', found 2",
      "nft ip meshcni/prerouting: declared 'regular', expected 'type nat hook prerouting priority -100'",
    ];
    for (const p of differ) expect([p, redirectGone(p)]).toEqual([p, false]);
  });

  test("only missing rules are acted on: written in place, else reported", () => {
    expect(actOn({ kind: "missing", why: "x" }, "in-place")).toBe("write");
    expect(actOn({ kind: "missing", why: "x" }, "report")).toBe("report");
    for (const v of [{ kind: "ok" }, { kind: "gone" }, { kind: "unknown", why: "x" }] as const)
      expect(actOn(v, "in-place")).toBe("none");
  });

  test("the Event's message says what was done and what it does not change", () => {
    expect(inPlaceMessage("node-a", "no jump")).toBe(
      "meshcni found this pod's rules missing or altered in its network namespace on node node-a (no jump) " +
        "and wrote them back; connections opened before keep their path until they close",
    );
  });
});

describe("the requests the agent runs", () => {
  const t: VerifyTarget = {
    namespace: "emojivoto",
    name: "web-1",
    uid: "u-1",
    ips: ["10.0.0.1", "fd00::1"],
    netns: "cni-1",
    via: "record",
    containerId: "c-1",
  };
  test("CHECK and ADD as a runtime sends them: the entry, the pod's addresses as the previous result", () => {
    const entry = { type: "meshcni", mesh: "linkerd", state_dir: "/var/run/meshcni" };
    const req = podRequest("CHECK", t, entry, "1.2.3");
    expect(req.env).toEqual({
      CNI_COMMAND: "CHECK",
      CNI_CONTAINERID: "c-1",
      CNI_NETNS: "/var/run/netns/cni-1",
      CNI_IFNAME: "eth0",
      CNI_ARGS: "IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=web-1;K8S_POD_UID=u-1",
      CNI_PATH: "/opt/cni/bin",
    });
    expect(req.version).toBe("1.2.3");
    const stdin = JSON.parse(req.stdin);
    expect(stdin).toMatchObject({ cniVersion: "1.0.0", type: "meshcni", state_dir: "/var/run/meshcni" });
    expect(stdin.prevResult.ips).toEqual([
      { address: "10.0.0.1/32", interface: 0 },
      { address: "fd00::1/128", interface: 0 },
    ]);
    expect(podRequest("ADD", t, entry, "1.2.3").env.CNI_COMMAND).toBe("ADD");
    // An ADD the agent applied, as a target: the pod, its namespace and the result's addresses.
    expect(targetFromAdd({ ...req, env: { ...req.env, CNI_COMMAND: "ADD" } })).toEqual({
      namespace: "emojivoto",
      name: "web-1",
      uid: "u-1",
      ips: ["10.0.0.1", "fd00::1"],
      netns: "cni-1",
      via: "record",
      containerId: "c-1",
    });
    expect(targetFromAdd({ ...req, env: { ...req.env, CNI_NETNS: "/proc/1/ns/net" } })).toBeUndefined();
  });
});

describe("spread over the period", () => {
  const pods = Array.from({ length: 110 }, (_, i) => ({ uid: `uid-${i}-${i * 7919}` }));
  test("every pod comes due exactly once a period, in ticks of a second", () => {
    const period = 60_000;
    const seen = new Map<string, number>();
    for (let t = 0; t < period; t += 1000)
      for (const p of dueIn(pods, period, NOW + t, NOW + t + 1000)) seen.set(p.uid, (seen.get(p.uid) ?? 0) + 1);
    expect(seen.size).toBe(110);
    expect([...seen.values()].every((c) => c === 1)).toBe(true);
  });
  test("not all at one instant: no second of the period holds more than a tenth of the pods", () => {
    const counts = new Map<number, number>();
    for (const p of pods) {
      const s = Math.floor(slotOf(p.uid, 60_000) / 1000);
      counts.set(s, (counts.get(s) ?? 0) + 1);
    }
    expect(Math.max(...counts.values())).toBeLessThanOrEqual(11);
    expect(counts.size).toBeGreaterThan(40);
  });
  test("a span of a period or more takes every pod", () => {
    expect(dueIn(pods, 2000, NOW, NOW + 2000)).toHaveLength(110);
  });
});

describe("the addresses of a namespace from its /proc files", () => {
  test("IPv4 host leaves of fib_trie (not loopback), IPv6 of global scope (not lo)", () => {
    const fib = [
      "Main:",
      "  +-- 0.0.0.0/0 3 0 5",
      "     |-- 0.0.0.0",
      "        /0 universe UNICAST",
      "     +-- 10.88.0.0/16 2 0 2",
      "        |-- 10.88.0.0",
      "           /16 link UNICAST",
      "        |-- 10.88.0.7",
      "           /32 host LOCAL",
      "  +-- 127.0.0.0/8 2 0 2",
      "     |-- 127.0.0.1",
      "        /32 host LOCAL",
      "Local:",
      "        |-- 10.88.0.7",
      "           /32 host LOCAL",
    ].join("\n");
    const v6 = [
      "00000000000000000000000000000001 01 80 10 80       lo",
      "fd000000000000000000000000000007 02 40 00 80     eth0",
      "fe80000000000000c0a1b2fffec3d4e5 02 40 20 80     eth0",
      "20010db8000000010000000000000abc 02 40 00 80     eth0",
    ].join("\n");
    expect(parseLocalAddresses(fib, v6).sort()).toEqual(["10.88.0.7", "2001:db8:0:1::abc", "fd00::7"]);
  });
});

describe("repair on verification's evidence (--repair evict, delete, off)", () => {
  test("a pod whose rules the check found missing bypasses the mesh, handled or unverified; without the evidence it does not", () => {
    const handled = pod("web-10", { ip: "10.0.0.20" });
    const early = pod("web-11", { ip: "10.0.0.21" });
    const cfg: RepairConfig = { ...CFG, mode: "evict" };
    const input = {
      pods: [handled, early],
      records: [record(handled)],
      synced: true,
      chainSince: NOW - 120_000,
      now: NOW,
    };
    const none = planRepair(cfg, newRepairMemory(), input);
    expect(none.bypassing).toEqual([]);
    expect(none.unverified.map((u) => u.name)).toEqual(["web-11"]);
    const missingRules = new Map([
      [handled.metadata.uid, "no jump to PROXY_INIT_REDIRECT"],
      [early.metadata.uid, "no table"],
    ]);
    const seen = planRepair(cfg, newRepairMemory(), { ...input, missingRules });
    expect(seen.bypassing.map((b) => [b.name, b.reason])).toEqual([
      ["web-10", "its rules are missing or altered in its network namespace: no jump to PROXY_INIT_REDIRECT"],
      ["web-11", "its rules are missing or altered in its network namespace: no table"],
    ]);
    expect(seen.unverified).toEqual([]);
    // Acted on after the confirmation delay, as the validator's evidence is.
    const later = planRepair(cfg, seen.memory, { ...input, missingRules, now: NOW + 2000 });
    expect(later.act.map((a) => a.name)).toEqual(["web-10", "web-11"]);
  });
});

describe("repair in place on the validator's evidence", () => {
  test("the plan marks the pod rewritten; one the agent could not reach is evicted and says so", () => {
    const p = pod("web-9", { failed: true });
    const input = { pods: [p], records: [], synced: true, chainSince: NOW - 120_000, now: NOW };
    let plan = planRepair(CFG, newRepairMemory(), input);
    plan = planRepair(CFG, plan.memory, { ...input, now: NOW + 2000 });
    expect(plan.act.map((a) => a.name)).toEqual(["web-9"]);
    expect(plan.bypassing[0]!.action).toBe("rewritten");
    const ref = { namespace: "emojivoto", name: "web-9", uid: p.metadata.uid };
    const m = noteActs(CFG, plan.memory, [{ ref, outcome: "done", as: "evicted" }], NOW + 2000);
    expect(m.repaired).toBe(1);
    expect(afterActs(plan, m, [{ ref, outcome: "done", as: "evicted" }]).bypassing[0]!.action).toBe("evicted");
    expect(afterActs(plan, m, [{ ref, outcome: "done", as: "rewritten" }]).bypassing[0]!.action).toBe("rewritten");
  });
});
