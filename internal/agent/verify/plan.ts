// Verify: whether each meshed pod of this node still has its rules in its network namespace, and
// what the agent does when it does not. Pure: the node's pods (as the watch cache holds them), the
// plugin's records, the namespaces found by address and a CHECK's outcome go in; which pods to
// look at, the CHECK and ADD requests to run in the agent (the same code the socket's CHECK and
// ADD run), the verdict and the act come out. The shell (loop.ts) runs them on a timer, spread
// over the period.
//
// Missing or altered rules in a pod's namespace are positive evidence that its traffic bypasses
// the proxy. A namespace that is gone is evidence of nothing (the pod is going away), and neither
// is a CHECK the agent cannot run: both are skipped. Which pods are looked at follows repair's
// "never" list (../repair/plan.ts's judgePod): pods of another node, hostNetwork pods, unmeshed
// pods, excluded namespaces and meshcni's own pods are never looked at, let alone written to.
import { parseK8sArgs } from "../../cni/k8s-args.ts";
import { resultAddresses } from "../../cni/result.ts";
import type { PodRecord } from "../../wire/state.ts";
import type { AddRequest } from "../../wire/protocol.ts";
import { judgePod, type PodRef, type RepairConfig } from "../repair/plan.ts";
import { netnsName } from "../socket/netns.ts";
import type { CheckResult } from "../socket/check.ts";
import type { JsonObject } from "../install/conflist/chain.ts";

/** The CNI code of a CHECK that found the rules not in place (cni/spec.ts's RulesMissing). */
const RULES_MISSING = 103;

export const DEFAULT_VERIFY_SECONDS = 60;

/** A pod to verify, and where its namespace is. */
export interface VerifyTarget extends PodRef {
  /** The pod's addresses (status.podIPs), without prefix length. */
  ips: string[];
  /** The namespace's name in the netns folder: from the record, or found by the pod's addresses. */
  netns: string;
  /** How the namespace was found. */
  via: "record" | "address";
  /** The record's container ID (a pod found by address has none: a name for the CHECK stands in). */
  containerId: string;
  /** The backend the record names, if any. */
  backend?: string;
}

/** A meshed pod the agent cannot verify: no record with a namespace, and no one namespace holds its addresses. */
export interface UnreachablePod extends PodRef {
  why: string;
}

export interface Targets {
  targets: VerifyTarget[];
  unreachable: UnreachablePod[];
}

type Obj = Record<string, unknown>;
const obj = (x: unknown): Obj => (typeof x === "object" && x !== null && !Array.isArray(x) ? (x as Obj) : {});
const str = (x: unknown): string | undefined => (typeof x === "string" ? x : undefined);

/** status.podIPs (else status.podIP), without prefix lengths. */
export function podIps(raw: unknown): string[] {
  const status = obj(obj(raw).status);
  const list = Array.isArray(status.podIPs) ? status.podIPs.map((p) => str(obj(p).ip)) : [];
  const ips = list.filter((x): x is string => x !== undefined && x.length > 0);
  if (ips.length === 0 && str(status.podIP)) ips.push(str(status.podIP)!);
  return ips.map((ip) => ip.split("/")[0]!);
}

/** A stand-in container ID for a pod found by address (safe in a CNI container ID). */
export const addressContainerId = (uid: string) => `meshcni-verify-${uid.replace(/[^A-Za-z0-9_.-]/g, "")}`;

/**
 * Which namespace holds exactly these addresses: the one namespace of `byAddress` (address ->
 * namespace names holding it) that holds every one of them. Two or more (another pod's namespace
 * with the same address, on a test host or a misconfigured node), or none: undefined, and why.
 */
export function namespaceOf(
  ips: readonly string[],
  byAddress: ReadonlyMap<string, readonly string[]>,
): { netns: string } | { why: string } {
  if (ips.length === 0) return { why: "it has no address in its status (status.podIPs)" };
  let found: string[] | undefined;
  for (const ip of ips) {
    const holders = byAddress.get(ip) ?? [];
    found = found === undefined ? [...holders] : found.filter((n) => holders.includes(n));
  }
  if (!found || found.length === 0)
    return { why: `no namespace in the netns folder holds its address${ips.length > 1 ? "es" : ""} ${ips.join(", ")}` };
  if (found.length > 1)
    return { why: `${found.length} namespaces hold its address ${ips.join(", ")} (${found.sort().join(", ")})` };
  return { netns: found[0]! };
}

/** A meshed pod whose namespace is to be found by its addresses. */
export interface PendingPod extends PodRef {
  ips: string[];
}

/**
 * The pods to verify: every meshed pod of this node repair would judge (handled, unverified or
 * bypassing): with its namespace when its record names one in the netns folder (`targets`), else
 * to be found by its addresses (`pending`, resolveByAddress).
 */
export function planTargets(
  cfg: RepairConfig,
  pods: readonly unknown[],
  records: readonly PodRecord[],
): { targets: VerifyTarget[]; pending: PendingPod[] } {
  const byPod = new Map<string, PodRecord[]>();
  for (const r of records) {
    const k = `${r.namespace}/${r.name}`;
    const list = byPod.get(k);
    if (list) list.push(r);
    else byPod.set(k, [r]);
  }
  const targets: VerifyTarget[] = [];
  const pending: PendingPod[] = [];
  for (const raw of pods) {
    const meta = obj(obj(raw).metadata);
    const j = judgePod(cfg, raw, byPod.get(`${str(meta.namespace)}/${str(meta.name)}`) ?? []);
    if (j.kind === "ignore") continue;
    const ref: PodRef = { namespace: str(meta.namespace)!, name: str(meta.name)!, uid: str(meta.uid)! };
    const ips = podIps(raw);
    // A record that says "skipped" is of a pod that got no rules then (a mesh decision since
    // changed): its namespace is found by address, as for a pod with no record.
    const name = j.kind === "handled" && j.record.decision === "meshed" ? netnsName(j.record.netns) : undefined;
    if (j.kind === "handled" && name !== undefined) {
      targets.push({
        ...ref,
        ips,
        netns: name,
        via: "record",
        containerId: j.record.containerId,
        ...(j.record.backend ? { backend: j.record.backend } : {}),
      });
    } else pending.push({ ...ref, ips });
  }
  return { targets, pending };
}

/** Pods found by address: in the one namespace that holds all their addresses, else unreachable (and why). */
export function resolveByAddress(
  pending: readonly PendingPod[],
  byAddress: ReadonlyMap<string, readonly string[]>,
): Targets {
  const targets: VerifyTarget[] = [];
  const unreachable: UnreachablePod[] = [];
  for (const p of pending) {
    const found = namespaceOf(p.ips, byAddress);
    const ref: PodRef = { namespace: p.namespace, name: p.name, uid: p.uid };
    if ("why" in found) unreachable.push({ ...ref, why: found.why });
    else
      targets.push({ ...ref, ips: p.ips, netns: found.netns, via: "address", containerId: addressContainerId(p.uid) });
  }
  return { targets, unreachable };
}

/**
 * The request the agent runs for a pod (CHECK to verify, ADD to write its rules again): what a
 * runtime would send, with the plugin's entry as the agent wrote it and the pod's addresses as
 * the previous result.
 */
export function podRequest(
  command: "CHECK" | "ADD",
  t: VerifyTarget,
  entry: JsonObject,
  version: string,
  netnsFolder = "/var/run/netns",
): AddRequest {
  const netns = `${netnsFolder}/${t.netns}`;
  const prevResult = {
    cniVersion: "1.0.0",
    interfaces: [{ name: "eth0", sandbox: netns }],
    ips: t.ips.map((ip) => ({ address: ip.includes(":") ? `${ip}/128` : `${ip}/32`, interface: 0 })),
  };
  return {
    v: 1,
    version,
    env: {
      CNI_COMMAND: command,
      CNI_CONTAINERID: t.containerId,
      CNI_NETNS: netns,
      CNI_IFNAME: "eth0",
      CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${t.namespace};K8S_POD_NAME=${t.name};K8S_POD_UID=${t.uid}`,
      CNI_PATH: "/opt/cni/bin",
    },
    stdin: JSON.stringify({ cniVersion: "1.0.0", name: "meshcni-verify", ...entry, prevResult }),
  };
}

export type Verdict =
  | { kind: "ok" }
  /** Positive evidence: the backend's CHECK found the pod's rules missing or altered. */
  | { kind: "missing"; why: string }
  /** The namespace is gone: the pod is going away; nothing to say. */
  | { kind: "gone" }
  /** The agent could not tell (it declined the CHECK, the pod is not meshed now, another error). */
  | { kind: "unknown"; why: string };

/** A CHECK's outcome judged; `netnsThere`: the namespace was still there after the CHECK. */
export function judgeCheck(r: CheckResult, netnsThere: boolean): Verdict {
  if (!netnsThere) return { kind: "gone" };
  if (!r.ok) return { kind: "unknown", why: `the agent did not run the CHECK: ${r.why}` };
  const s = r.answer.summary as { outcome?: string; reason?: string; code?: number };
  if (r.answer.exitCode === 0)
    return s.outcome === "meshed"
      ? { kind: "ok" }
      : { kind: "unknown", why: `the pod gets no rules now: ${s.reason ?? "no reason given"}` };
  if (s.code === RULES_MISSING) return { kind: "missing", why: s.reason ?? "the CHECK found the rules not in place" };
  return { kind: "unknown", why: `the CHECK failed (code ${s.code ?? "?"}): ${s.reason ?? "no reason given"}` };
}

/**
 * Whether a CHECK's problems (the backends' diff: firewall/iptables/save.ts,
 * firewall/nftables/listing.ts) say the redirect cannot be in place: a table or chain of meshcni's
 * is gone, or a jump into it is absent. Rules that merely differ inside meshcni's chains (as a
 * change of meshcni's own config makes them for pods set up before it) are not: they are written
 * back in place, but no pod is evicted or deleted for them.
 */
export const redirectGone = (why: string): boolean => /\bis missing\b|, found 0\b/.test(why);

export type VerifyMode = "in-place" | "report";

/** What to do with a verdict: write the rules back (in-place), report, or nothing. */
export function actOn(v: Verdict, mode: VerifyMode): "write" | "report" | "none" {
  if (v.kind !== "missing") return "none";
  return mode === "in-place" ? "write" : "report";
}

/** Where in the period a pod's verification falls (ms from the period's start): spread by its UID. */
export function slotOf(uid: string, periodMs: number): number {
  let h = 2166136261;
  for (let i = 0; i < uid.length; i++) h = Math.imul(h ^ uid.charCodeAt(i), 16777619);
  return (h >>> 0) % Math.max(1, periodMs);
}

/**
 * The pods due in (from, to]: those whose slot in the period falls in that span of time (ms since
 * the epoch). A span of a whole period or more takes every pod.
 */
export function dueIn<T extends { uid: string }>(pods: readonly T[], periodMs: number, from: number, to: number): T[] {
  if (to - from >= periodMs) return [...pods];
  const a = from % periodMs;
  const b = to % periodMs;
  return pods.filter((p) => {
    const s = slotOf(p.uid, periodMs);
    return a < b ? s > a && s <= b : s > a || s <= b;
  });
}

/** The Event's message for rules written back in place. */
export function inPlaceMessage(node: string, why: string): string {
  return (
    `meshcni found this pod's rules missing or altered in its network namespace on node ${node} ` +
    `(${why}) and wrote them back; connections opened before keep their path until they close`
  );
}

/**
 * The addresses a namespace holds, from its /proc/net/fib_trie (IPv4: the "/32 host LOCAL" leaves)
 * and /proc/net/if_inet6 (IPv6, global scope), without loopback's.
 */
export function parseLocalAddresses(fibTrie: string, ifInet6: string): string[] {
  const out = new Set<string>();
  let last: string | undefined;
  for (const line of fibTrie.split("\n")) {
    const leaf = /^\s*\|--\s+(\d+\.\d+\.\d+\.\d+)\s*$/.exec(line);
    if (leaf) {
      last = leaf[1];
      continue;
    }
    if (last && /^\s*\/32 host LOCAL/.test(line) && !last.startsWith("127.")) out.add(last);
  }
  for (const line of ifInet6.split("\n")) {
    const f = line.trim().split(/\s+/);
    // address, ifindex, prefix length, scope (00: global), flags, name
    if (f.length < 6 || f[3] !== "00" || f[5] === "lo" || !/^[0-9a-f]{32}$/.test(f[0]!)) continue;
    const groups = f[0]!.match(/.{4}/g)!.map((g) => g.replace(/^0{1,3}/, ""));
    out.add(compressV6(groups));
  }
  return [...out];
}

/** The canonical text of an IPv6 address from its eight groups (RFC 5952: the longest run of zeros as ::). */
function compressV6(groups: string[]): string {
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== "0") {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === "0") j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (best < 0) return groups.join(":");
  return `${groups.slice(0, best).join(":")}::${groups.slice(best + bestLen).join(":")}`;
}

/** The pod of an ADD the agent applied, as a target to verify right after; undefined when it names none. */
export function targetFromAdd(req: AddRequest): VerifyTarget | undefined {
  const netns = netnsName(req.env.CNI_NETNS);
  const containerId = req.env.CNI_CONTAINERID;
  let k;
  try {
    k = parseK8sArgs(req.env.CNI_ARGS);
  } catch {
    return undefined;
  }
  if (!netns || !containerId || !k.podNamespace || !k.podName || !k.podUid) return undefined;
  let prev: unknown;
  try {
    prev = obj(JSON.parse(req.stdin)).prevResult;
  } catch {
    prev = undefined;
  }
  const ips = resultAddresses(prev as Parameters<typeof resultAddresses>[0]);
  return { namespace: k.podNamespace, name: k.podName, uid: k.podUid, ips, netns, via: "record", containerId };
}
