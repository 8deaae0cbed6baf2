// The Linkerd profile: which pods linkerd-cni would redirect, and proxy-init's rules for them.
import { CniError } from "../../cni/errors.ts";
import { Code } from "../../cni/spec.ts";
import type { PluginConf } from "../../config/plugin-config.ts";
import { allContainers, annotation, type Pod, type Service } from "../../kube/objects.ts";
import { type Cidr, parseCidrList } from "../../net/cidr.ts";
import { groupPorts, parsePortList, type PortRange, renderPortRange } from "../../net/ports.ts";
import { A, type Family, type FamilyPlan, M, type Plan, PlanBuilder } from "../../plan/model.ts";
import type { Decision, MeshProfile, PlanInput } from "../profile.ts";
import { quote } from "../../text/escape.ts";

export const LINKERD_PROXY = "linkerd-proxy";
export const LINKERD_INIT = "linkerd-init";
export const REDIRECT_CHAIN = "PROXY_INIT_REDIRECT";
export const OUTPUT_CHAIN = "PROXY_INIT_OUTPUT";

export const Annotations = {
  skipInboundPorts: "config.linkerd.io/skip-inbound-ports",
  skipOutboundPorts: "config.linkerd.io/skip-outbound-ports",
  skipSubnets: "config.linkerd.io/skip-subnets",
  proxyUid: "config.linkerd.io/proxy-uid",
  proxyGid: "config.linkerd.io/proxy-gid",
} as const;

const CONTROL_PLANE_LABEL = "linkerd.io/control-plane-component";
/** Control-plane pods talk to the API server directly; linkerd-cni's fallback ports for it. */
const API_SERVER_PORTS: PortRange[] = [
  { from: 443, to: 443 },
  { from: 6443, to: 6443 },
];

export function isControlPlane(pod: Pod): boolean {
  return Boolean(pod.metadata.labels?.[CONTROL_PLANE_LABEL]);
}

/**
 * The API server's ports as linkerd-cni skips them for control-plane pods: each `port` of the
 * `default/kubernetes` Service and its `targetPort` when a number (minikube: 443 and 8443).
 * 443 and 6443 when the Service could not be read or names no port.
 */
export function apiServerPorts(svc: Service | null | undefined): PortRange[] {
  const out: PortRange[] = [];
  const add = (p: unknown) => {
    if (typeof p === "number" && Number.isInteger(p) && p >= 1 && p <= 65535) out.push({ from: p, to: p });
  };
  for (const p of svc?.spec?.ports ?? []) {
    add(p.port);
    add(p.targetPort);
  }
  return out.length > 0 ? out : API_SERVER_PORTS;
}

/** Everything the Linkerd rules depend on, validated. */
export interface LinkerdOptions {
  incomingProxyPort: number;
  outgoingProxyPort: number;
  proxyUid: number;
  proxyGid: number;
  portsToRedirect: number[];
  inboundPortsToIgnore: PortRange[];
  outboundPortsToIgnore: PortRange[];
  subnetsToIgnore: Cidr[];
  ipv6: boolean;
}

/** An invalid setting or annotation: code 7, naming it, the value and the offending item. */
function invalid(what: string, value: string, bad: string, expected: string): CniError {
  const item = bad.trim() === value.trim() ? "" : `: ${quote(bad)}`;
  return new CniError(
    Code.InvalidConfig,
    `invalid ${what}`,
    `${quote(value)}${item} is not ${expected}; fix it and recreate the pod (nothing was applied)`,
  );
}

function ports(what: string, items: string | readonly (string | number)[], single = false): PortRange[] {
  const r = parsePortList(items, single);
  if (r.bad !== undefined) {
    throw invalid(
      what,
      typeof items === "string" ? items : r.bad,
      r.bad,
      single ? "a port (0-65535)" : "a port or a range LOW-HIGH (0-65535)",
    );
  }
  return r.ports;
}

function cidrs(what: string, items: string | readonly string[]): Cidr[] {
  const r = parseCidrList(items);
  if (r.bad !== undefined) {
    throw invalid(what, typeof items === "string" ? items : r.bad, r.bad, "a CIDR such as 10.0.0.0/8 or fd00::/8");
  }
  return r.cidrs;
}

/**
 * A proxy-uid/proxy-gid annotation, taken as written: " 2103" is not trimmed. Linkerd's
 * injector ignores such a value (the proxy then runs as the configured default) and linkerd-cni
 * fails the pod on it; meshcni fails the pod too, saying why.
 */
function id(what: string, raw: string): number {
  if (!/^[0-9]{1,10}$/.test(raw) || Number(raw) > 4294967294) {
    throw invalid(
      what,
      raw,
      raw,
      "a user or group id (digits only, no spaces or sign; " +
        "Linkerd's injector ignores such a value and runs the proxy as its default)",
    );
  }
  return Number(raw);
}

/** A securityContext id the proxy runs as, when set (0, root, counts as unset: it is never exempted). */
function runAs(what: string, n: number | null | undefined): number | undefined {
  if (n === undefined || n === null || n === 0) return undefined;
  if (!Number.isInteger(n) || n < 0 || n > 4294967294) {
    throw new CniError(
      Code.InvalidConfig,
      `invalid ${LINKERD_PROXY} securityContext.${what}`,
      `${n} is not a user or group id; nothing was applied`,
    );
  }
  return n;
}

/** Options from the conflist entry alone (no pod): the settings `install-cni` wrote. */
export function linkerdDefaults(conf: PluginConf): LinkerdOptions {
  const l = conf.linkerd;
  return {
    incomingProxyPort: l["incoming-proxy-port"],
    outgoingProxyPort: l["outgoing-proxy-port"],
    proxyUid: l["proxy-uid"],
    proxyGid: l["proxy-gid"],
    portsToRedirect: ports("linkerd.ports-to-redirect", l["ports-to-redirect"], true).map((p) => p.from),
    inboundPortsToIgnore: ports("linkerd.inbound-ports-to-ignore", l["inbound-ports-to-ignore"]),
    outboundPortsToIgnore: ports("linkerd.outbound-ports-to-ignore", l["outbound-ports-to-ignore"]),
    subnetsToIgnore: cidrs("linkerd.subnets-to-ignore", l["subnets-to-ignore"]),
    ipv6: l.ipv6,
  };
}

/**
 * Applies the pod's (else its namespace's) annotations with linkerd-cni's meaning:
 * skip-inbound-ports adds to the configured list, the others replace. Invalid values throw.
 */
export function linkerdOptions(input: PlanInput): LinkerdOptions {
  const { pod, namespace } = input;
  const o = linkerdDefaults(input.conf);
  const get = (key: string) => annotation(pod, namespace, key);
  const outbound = get(Annotations.skipOutboundPorts);
  if (outbound !== undefined) o.outboundPortsToIgnore = ports(`annotation ${Annotations.skipOutboundPorts}`, outbound);
  const inbound = get(Annotations.skipInboundPorts);
  if (inbound !== undefined) {
    o.inboundPortsToIgnore = [
      ...o.inboundPortsToIgnore,
      ...ports(`annotation ${Annotations.skipInboundPorts}`, inbound),
    ];
  }
  const subnets = get(Annotations.skipSubnets);
  if (subnets !== undefined) o.subnetsToIgnore = cidrs(`annotation ${Annotations.skipSubnets}`, subnets);
  // The ids exempted are the ones the proxy runs as: linkerd-proxy's securityContext when set
  // (the injector writes runAsUser always, runAsGroup when a proxy GID is configured), else the
  // annotation, else the config. An annotation is validated even when the container overrides it.
  const uid = get(Annotations.proxyUid);
  if (uid !== undefined) o.proxyUid = id(`annotation ${Annotations.proxyUid}`, uid);
  const gid = get(Annotations.proxyGid);
  if (gid !== undefined) o.proxyGid = id(`annotation ${Annotations.proxyGid}`, gid);
  const sc = allContainers(pod).find((c) => c.name === LINKERD_PROXY)?.securityContext;
  o.proxyUid = runAs("runAsUser", sc?.runAsUser) ?? o.proxyUid;
  o.proxyGid = runAs("runAsGroup", sc?.runAsGroup) ?? o.proxyGid;
  if (isControlPlane(pod)) {
    o.outboundPortsToIgnore = [...o.outboundPortsToIgnore, ...apiServerPorts(input.kubernetesService)];
  }
  return o;
}

const comment = (text: string) => M.comment(`proxy-init/${text}`);

/** proxy-init's nat rules for one address family, in proxy-init's order. */
export function buildLinkerdRules(o: LinkerdOptions, family: Family): FamilyPlan {
  const b = new PlanBuilder(family);
  const R = REDIRECT_CHAIN;
  const O = OUTPUT_CHAIN;
  b.chain("nat", R);
  for (const g of groupPorts(o.inboundPortsToIgnore)) {
    const list = g.map(renderPortRange).join(",");
    b.append("nat", R, [M.tcp, M.dports("tcp", g), comment(`ignore-port-${list}`)], A.ret);
  }
  for (const c of o.subnetsToIgnore) {
    if (c.family === family) b.append("nat", R, [M.src(c.text), comment(`ignore-subnet-${c.text}`)], A.ret);
  }
  const to = A.redirect(o.incomingProxyPort);
  if (o.portsToRedirect.length === 0) {
    b.append("nat", R, [M.tcp, comment("redirect-all-incoming-to-proxy-port")], to);
  } else {
    for (const p of [...new Set(o.portsToRedirect)]) {
      b.append("nat", R, [M.tcp, M.dport("tcp", p), comment(`redirect-port-${p}-to-proxy-port`)], to);
    }
  }
  b.append("nat", "PREROUTING", [comment("install-proxy-init-prerouting")], A.jump(R));

  b.chain("nat", O);
  if (o.proxyUid > 0) b.append("nat", O, [M.uid(o.proxyUid), comment("ignore-proxy-user-id")], A.ret);
  if (o.proxyGid > 0) b.append("nat", O, [M.gid(o.proxyGid), comment("ignore-proxy-group-id")], A.ret);
  b.append("nat", O, [M.out("lo"), comment("ignore-loopback")], A.ret);
  for (const g of groupPorts(o.outboundPortsToIgnore)) {
    const list = g.map(renderPortRange).join(",");
    b.append("nat", O, [M.tcp, M.dports("tcp", g), comment(`ignore-port-${list}`)], A.ret);
  }
  b.append("nat", O, [M.tcp, comment("redirect-all-outgoing-to-proxy-port")], A.redirect(o.outgoingProxyPort));
  b.append("nat", "OUTPUT", [comment("install-proxy-init-output")], A.jump(O));
  return b.build();
}

function decideLinkerd(pod: Pod): Decision {
  if ((pod.spec.initContainers ?? []).some((c) => c.name === LINKERD_INIT)) {
    return { redirect: false, reason: `the pod has the ${LINKERD_INIT} init container, which sets up its own rules` };
  }
  if (!allContainers(pod).some((c) => c.name === LINKERD_PROXY)) {
    return { redirect: false, reason: `the pod has no ${LINKERD_PROXY} container` };
  }
  const sidecar = (pod.spec.initContainers ?? []).some((c) => c.name === LINKERD_PROXY);
  return { redirect: true, reason: `the pod runs ${LINKERD_PROXY}${sidecar ? " as a native sidecar" : ""}` };
}

export const linkerdProfile: MeshProfile = {
  mesh: "linkerd",
  ownedChains: [
    { stage: "nat", name: REDIRECT_CHAIN },
    { stage: "nat", name: OUTPUT_CHAIN },
  ],
  annotationKeys: Object.values(Annotations),
  decide: decideLinkerd,
  needsKubernetesService: isControlPlane,
  plan(input: PlanInput): Plan {
    const o = linkerdOptions(input);
    const families = [buildLinkerdRules(o, 4)];
    if (o.ipv6) families.push(buildLinkerdRules(o, 6));
    return { families, ipCommands: [] };
  },
  firewall(conf) {
    const l = conf.linkerd;
    return { mode: l["iptables-mode"] || "auto", wait: l["use-wait-flag"], simulate: l.simulate };
  },
  families(conf) {
    return conf.linkerd.ipv6 ? [4, 6] : [4];
  },
};
