// Istio's sidecar capture rules (istio-iptables as istio-cni runs it), one address family at a
// time, plus the `ip` commands TPROXY and IPv6 need. Pure.
//
// The chains, tables and rule order are Istio's, so an operator who knows `iptables-save` of an
// Istio pod recognises ours. Two differences in the text only: Istio's restore payloads use
// the short form (`-p tcp --dport 15008`, `--set-mark 1337`), ours are written exactly as
// iptables-save prints them back (`-p tcp -m tcp --dport 15008`, `--set-xmark 0x539/0xffffffff`)
// so CHECK can compare text; and where Istio inserts at the head of its own chain (TPROXY's
// `-I ISTIO_INBOUND 1..3`) we append in the final order, which installs the same chain.
import type { Cidr } from "../../net/cidr.ts";
import {
  A,
  type Family,
  type FamilyPlan,
  type IpCommand,
  M,
  type Match,
  PlanBuilder,
  type Stage,
  undoIpCommand,
} from "../../plan/model.ts";
import type { IstioOptions } from "./options.ts";

export const IstioChains = {
  inbound: "ISTIO_INBOUND",
  redirect: "ISTIO_REDIRECT",
  inRedirect: "ISTIO_IN_REDIRECT",
  output: "ISTIO_OUTPUT",
  outputDns: "ISTIO_OUTPUT_DNS",
  divert: "ISTIO_DIVERT",
  tproxy: "ISTIO_TPROXY",
  drop: "ISTIO_DROP",
} as const;

/** Every chain the Istio rules can create, by table (what DEL removes). */
export const ISTIO_OWNED_CHAINS: readonly { stage: Stage; name: string }[] = [
  { stage: "mangle", name: IstioChains.divert },
  { stage: "mangle", name: IstioChains.tproxy },
  { stage: "mangle", name: IstioChains.inbound },
  { stage: "mangle", name: IstioChains.drop },
  { stage: "nat", name: IstioChains.inbound },
  { stage: "nat", name: IstioChains.redirect },
  { stage: "nat", name: IstioChains.inRedirect },
  { stage: "nat", name: IstioChains.output },
  { stage: "nat", name: IstioChains.outputDns },
  { stage: "raw", name: IstioChains.outputDns },
  { stage: "raw", name: IstioChains.inbound },
];

/** istio-iptables' fixed TPROXY values: inbound mark 1337, outbound mark 1338, route table 133. */
export const TPROXY_MARK = 1337;
export const OUTBOUND_MARK = 1338;
export const TPROXY_TABLE = 133;
/** The rule priority `ip rule add` picks in a fresh pod namespace; fixed so a second ADD is a no-op. */
export const TPROXY_RULE_PREF = 32765;
/** pilot-agent's DNS proxy. */
export const DNS_PORT = 15053;

const hex = (n: number) => `0x${n.toString(16)}`;

/** Per-family addresses Istio swaps in its versioned rules. */
function loopback(f: Family) {
  return f === 4
    ? { host: "127.0.0.1/32", passthrough: "127.0.0.6/32", anyIp: "0.0.0.0" }
    : { host: "::1/128", passthrough: "::6/128", anyIp: "::" };
}

const tcpPort = (p: number) => [M.tcp, M.dport("tcp", p)];
const udpPort = (p: number) => [M.udp, M.dport("udp", p)];

function ofFamily(cidrs: "*" | Cidr[], f: Family): "*" | string[] {
  return cidrs === "*" ? "*" : cidrs.filter((c) => c.family === f).map((c) => c.text);
}

/** Whether an include range names a loopback address (then app-to-self over lo is captured too). */
function includesLoopback(cidrs: "*" | Cidr[]): boolean {
  if (cidrs === "*") return false;
  return cidrs.some((c) =>
    c.family === 4 ? c.bytes[0] === 127 : c.bytes.slice(0, 15).every((b) => b === 0) && c.bytes[15] === 1,
  );
}

/** Istio's sidecar rules for one address family, in istio-iptables' order. */
export function buildIstioRules(o: IstioOptions, family: Family): FamilyPlan {
  const b = new PlanBuilder(family);
  const C = IstioChains;
  const lo = loopback(family);
  const tproxy = o.mode === "TPROXY";
  const inboundTable: Stage = tproxy ? "mangle" : "nat";
  const capturesInbound = o.includeInboundPorts === "*" || o.includeInboundPorts.length > 0;

  // Chains are declared (-N) in first-use order, which is Istio's order.
  // 1. Interfaces that bypass capture altogether.
  for (const i of o.excludeInterfaces) {
    b.append("nat", "PREROUTING", [M.in(i)], A.ret);
    b.append("nat", "OUTPUT", [M.out(i)], A.ret);
  }
  if (tproxy) {
    for (const i of o.excludeInterfaces) {
      b.append("mangle", "PREROUTING", [M.in(i)], A.ret);
      b.append("mangle", "OUTPUT", [M.out(i)], A.ret);
    }
  }
  // 2. Virtual (KubeVirt) interfaces: not inbound; the outbound step below reroutes them.
  for (const i of o.rerouteInterfaces) b.insert("nat", "PREROUTING", 1, [M.in(i)], A.ret);
  // 3. INVALID_DROP.
  if (o.dropInvalid) {
    b.append("mangle", "PREROUTING", [M.ctstate("INVALID")], A.jump(C.drop));
    b.append("mangle", C.drop, [], A.drop);
  }

  // 4.-5. The tunnel port passes; the two redirect targets.
  const tproxyHead: Match[][] = tproxy
    ? [
        // Istio inserts these three at the head of mangle ISTIO_INBOUND after everything else.
        [M.tcp, M.mark(TPROXY_MARK)],
        [M.src(lo.passthrough), M.in("lo"), M.tcp],
        [M.in("lo"), M.tcp, M.mark(OUTBOUND_MARK, true)],
      ]
    : [];
  b.append("nat", C.inbound, tcpPort(o.inboundTunnelPort), A.ret);
  b.append("nat", C.redirect, [M.tcp], A.redirect(o.proxyPort));
  b.append("nat", C.inRedirect, [M.tcp], A.redirect(o.inboundCapturePort));

  // 6. Inbound capture.
  if (capturesInbound) {
    if (tproxy) {
      b.append("mangle", C.divert, [], A.mark(TPROXY_MARK));
      b.append("mangle", C.divert, [], A.accept);
      b.append("mangle", C.tproxy, [M.dst(lo.host, true), M.tcp], A.tproxy(o.inboundCapturePort, TPROXY_MARK));
    }
    b.append(inboundTable, "PREROUTING", [M.tcp], A.jump(C.inbound));
    for (const m of tproxyHead) b.append("mangle", C.inbound, m, A.ret);
    if (o.includeInboundPorts === "*") {
      for (const p of o.excludeInboundPorts) b.append(inboundTable, C.inbound, tcpPort(p), A.ret);
      if (tproxy) {
        b.append("mangle", C.inbound, [M.tcp, M.ctstate("RELATED", "ESTABLISHED")], A.jump(C.divert));
        b.append("mangle", C.inbound, [M.tcp], A.jump(C.tproxy));
      } else {
        b.append("nat", C.inbound, [M.tcp], A.jump(C.inRedirect));
      }
    } else {
      for (const p of o.includeInboundPorts) {
        if (tproxy) {
          b.append("mangle", C.inbound, [...tcpPort(p), M.ctstate("RELATED", "ESTABLISHED")], A.jump(C.divert));
          b.append("mangle", C.inbound, tcpPort(p), A.jump(C.tproxy));
        } else {
          b.append("nat", C.inbound, tcpPort(p), A.jump(C.inRedirect));
        }
      }
    }
  } else {
    for (const m of tproxyHead) b.append("mangle", C.inbound, m, A.ret);
  }

  // 7.-8. Outbound: every packet goes through ISTIO_OUTPUT; excluded ports leave first.
  b.append("nat", "OUTPUT", [], A.jump(C.output));
  for (const p of o.excludeOutboundPorts) {
    b.append("nat", C.output, tcpPort(p), A.ret);
    b.append("nat", C.output, udpPort(p), A.ret);
  }
  // 9. The inbound passthrough cluster connects from 127.0.0.6 (::6).
  b.append("nat", C.output, [M.src(lo.passthrough), M.out("lo")], A.ret);

  // 10.-11. The proxy's own traffic, by user then group.
  const keepLoopbackReturn = !includesLoopback(o.includeOutboundIPRanges);
  const dns = o.dnsCapture;
  for (const [owner, id] of [
    [M.uid, o.proxyUid],
    [M.gid, o.proxyGid],
  ] as const) {
    const notTunnel =
      dns && owner === M.uid
        ? [
            M.tcp,
            M.dports(
              "tcp",
              [
                { from: 53, to: 53 },
                { from: o.inboundTunnelPort, to: o.inboundTunnelPort },
              ],
              true,
            ),
          ]
        : [M.tcp, M.dport("tcp", o.inboundTunnelPort, true)];
    // The proxy calling a service VIP that lands on this pod goes back through inbound.
    b.append("nat", C.output, [M.dst(lo.host, true), M.out("lo"), ...notTunnel, owner(id)], A.jump(C.inRedirect));
    // Apps talking to themselves over lo are not captured (unless an include range is loopback).
    if (keepLoopbackReturn) {
      const notDns = dns ? [M.tcp, M.dport("tcp", 53, true)] : [];
      b.append("nat", C.output, [M.out("lo"), ...notDns, owner(id, true)], A.ret);
    }
    b.append("nat", C.output, [owner(id)], A.ret);
  }

  // 13. ISTIO_META_DNS_CAPTURE: all port-53 traffic to the agent's DNS proxy (CNI cannot read
  // the pod's resolv.conf, so Istio captures all), with conntrack zones keeping the two legs apart.
  if (dns) {
    b.append("raw", "OUTPUT", [], A.jump(C.outputDns));
    b.append("nat", C.output, [], A.jump(C.outputDns));
    b.append("nat", C.outputDns, tcpPort(53), A.redirect(DNS_PORT));
    b.append("nat", C.outputDns, udpPort(53), A.redirect(DNS_PORT));
    for (const [owner, id] of [
      [M.uid, o.proxyUid],
      [M.gid, o.proxyGid],
    ] as const) {
      b.append("raw", C.outputDns, [...udpPort(53), owner(id)], A.ctZone(1));
      b.append("raw", C.outputDns, [M.udp, M.sport("udp", DNS_PORT), owner(id)], A.ctZone(2));
    }
    b.append("raw", "PREROUTING", [], A.jump(C.inbound));
    b.append("raw", C.outputDns, udpPort(53), A.ctZone(2));
    b.append("raw", C.inbound, [M.udp, M.sport("udp", 53)], A.ctZone(1));
  }

  // 14.-17. Localhost stays local; excluded ranges leave; included ports and ranges are captured.
  b.append("nat", C.output, [M.dst(lo.host)], A.ret);
  const exclude = ofFamily(o.excludeOutboundIPRanges, family);
  for (const c of exclude === "*" ? [] : exclude) b.append("nat", C.output, [M.dst(c)], A.ret);
  for (const p of o.includeOutboundPorts) b.append("nat", C.output, tcpPort(p), A.jump(C.redirect));
  const include = ofFamily(o.includeOutboundIPRanges, family);
  if (include === "*") {
    b.append("nat", C.output, [], A.jump(C.redirect));
    for (const i of o.rerouteInterfaces) b.insert("nat", "PREROUTING", 1, [M.in(i)], A.jump(C.redirect));
  } else {
    for (const c of include) {
      for (const i of o.rerouteInterfaces) b.insert("nat", "PREROUTING", 1, [M.dst(c), M.in(i)], A.jump(C.redirect));
      b.append("nat", C.output, [M.dst(c)], A.jump(C.redirect));
    }
  }

  // 18. TPROXY: keep the proxy's marks on the connection and out of the capture.
  if (tproxy) {
    b.append("mangle", "PREROUTING", [M.tcp, M.mark(TPROXY_MARK)], A.saveMark);
    b.append("mangle", "OUTPUT", [M.out("lo"), M.tcp, M.mark(TPROXY_MARK)], A.ret);
    for (const [owner, id] of [
      [M.uid, o.proxyUid],
      [M.gid, o.proxyGid],
    ] as const) {
      b.append("mangle", "OUTPUT", [M.dst(lo.host, true), M.out("lo"), M.tcp, owner(id)], A.mark(OUTBOUND_MARK));
    }
    b.append("mangle", "OUTPUT", [M.tcp, M.connmark(TPROXY_MARK)], A.restoreMark);
  }
  return b.build();
}

/**
 * The `ip` commands after the rules: the ::6 source address for IPv6 pods, and TPROXY's policy
 * route (marked packets are local). Written so that a second ADD changes nothing: `replace`,
 * and an explicit rule priority, which makes a duplicate `rule add` fail with "File exists".
 */
export function buildIstioIpCommands(o: IstioOptions, families: readonly Family[]): IpCommand[] {
  const out: IpCommand[] = [];
  if (families.includes(6)) out.push(loopback6Address());
  const capturesInbound = o.includeInboundPorts === "*" || o.includeInboundPorts.length > 0;
  if (o.mode === "TPROXY" && capturesInbound) {
    for (const family of families) out.push(...tproxyRouting(family));
  }
  return out;
}

/** The ::6 source address on lo, for IPv6 pods. */
const loopback6Address = (): IpCommand => ({ family: 6, argv: ["addr", "replace", "::6/128", "dev", "lo"] });

/** TPROXY's policy rule and local route for one family. */
const tproxyRouting = (family: Family): IpCommand[] => [
  {
    family,
    argv: [
      "rule",
      "add",
      "fwmark",
      String(TPROXY_MARK),
      "lookup",
      String(TPROXY_TABLE),
      "pref",
      String(TPROXY_RULE_PREF),
    ],
  },
  { family, argv: ["route", "replace", "local", "default", "dev", "lo", "table", String(TPROXY_TABLE)] },
];

/**
 * What DEL runs in a live namespace to undo buildIstioIpCommands, whatever the pod's options
 * were: the undo of every command it can write. Failures are expected and ignored.
 */
export const ISTIO_CLEANUP_IP_COMMANDS: readonly IpCommand[] = ([4, 6] as const)
  .flatMap((family) => [...tproxyRouting(family), ...(family === 6 ? [loopback6Address()] : [])])
  .map((cmd) => undoIpCommand(cmd)!);

const IFACE = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}";
const MASKS = "--nfmask 0xffffffff --ctmask 0xffffffff";
/** Our rules in built-in chains that jump nowhere of ours, as iptables-save prints them. */
const BUILTIN_RULES: Record<string, Record<string, RegExp[]>> = {
  nat: {
    PREROUTING: [new RegExp(`^-i ${IFACE} -j RETURN$`)],
    OUTPUT: [new RegExp(`^-o ${IFACE} -j RETURN$`)],
  },
  mangle: {
    PREROUTING: [
      new RegExp(`^-i ${IFACE} -j RETURN$`),
      new RegExp(`^-p tcp -m mark --mark ${hex(TPROXY_MARK)} -j CONNMARK --save-mark ${MASKS}$`),
    ],
    OUTPUT: [
      new RegExp(`^-o ${IFACE} -j RETURN$`),
      new RegExp(`^-o lo -p tcp -m mark --mark ${hex(TPROXY_MARK)} -j RETURN$`),
      new RegExp(
        `^! -d (127\\.0\\.0\\.1/32|::1/128) -o lo -p tcp -m owner --[ug]id-owner ` +
          `[0-9]+ -j MARK --set-xmark ${hex(OUTBOUND_MARK)}/0xffffffff$`,
      ),
      new RegExp(`^-p tcp -m connmark --mark ${hex(TPROXY_MARK)} -j CONNMARK --restore-mark ${MASKS}$`),
    ],
  },
};

/**
 * For DEL, which has no pod: the rules Istio's capture adds to built-in chains without jumping
 * to an ISTIO_ chain (excluded and virtual interfaces, TPROXY's marks). An interface RETURN
 * another plugin added in the same pod namespace would go too; nothing else does that there.
 */
export function ownsIstioBuiltinRule(table: Stage, chain: string, args: string): boolean {
  return BUILTIN_RULES[table]?.[chain]?.some((re) => re.test(args)) ?? false;
}
