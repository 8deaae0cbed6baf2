// /status on the health port: one JSON document saying what the agent knows about its node:
// the chain, the plugin binary and its kubeconfig, the watch cache, the pods the plugin handled
// (its records in STATE_DIR/containers), and the agent itself. Pure.
import type { Counters } from "./metrics.ts";
import type { PodRecord, RecordsRead } from "../../wire/state.ts";
import type { CacheStatus, RepairStatus, VerifyStatus } from "../types.ts";

/** One part of the installation: where it is and, when it is not current, why. */
export interface PartStatus {
  path: string;
  current: boolean;
  problem?: string;
}

export interface InstallStatus {
  /** The config the runtime reads first (the one meshcni chains into), when there is one. */
  chain: PartStatus & { file?: string };
  /**
   * hostCheck: what C library the host has, which the plugin (its own loader and C library
   * beside it) does not load; for a binary without a loader of its own, whether the host can run
   * it (internal/agent/install/hostcheck).
   */
  binary: PartStatus & { hostCheck?: string };
  /** With the plugin's token: its service account and expiry (never the token). */
  kubeconfig: PartStatus & { token?: TokenView };
}

/** The plugin's token as /status shows it (internal/agent/install/io/token.ts); never the token itself. */
export interface TokenView {
  /** NAMESPACE/NAME of the plugin's service account. */
  account: string;
  /** As the API server said it; absent while there is none. */
  expiresAt?: string;
  expired?: boolean;
  grantedSeconds?: number;
  requestedSeconds?: number;
  /** When the agent asks next (renewal, or a retry after a failure). */
  nextRequestAt?: string;
  /** The last request's failure, while requests fail. */
  lastError?: string;
  obtained?: number;
  failures?: number;
}

export interface StatusInput {
  version: string;
  node?: string;
  namespace?: string;
  daemonSet: string;
  install: InstallStatus;
  cache?: CacheStatus;
  records: RecordsRead;
  counters: Counters;
  /** Undefined when the agent runs no repair (no node name). */
  repair?: RepairStatus;
  /** Undefined when the agent does not verify (it does not apply rules, or no node name). */
  verify?: VerifyStatus;
  agent: {
    socket: string;
    stateDir: string;
    startedAt: string;
    uptimeSeconds: number;
    /** Whether the agent applies pods' rules itself, and why (internal/agent/apply/ability.ts). */
    applies?: { applies: boolean; reason: string; missingCapabilities: string[]; nftInProcess: boolean };
  };
}

/**
 * The `pods` member, built once per RecordsRead: the agent's record index hands out the same
 * object until a record changes, so a /status of thousands of records does not map them all again.
 */
const podsBuilt = new WeakMap<RecordsRead, Record<string, unknown>>();

function buildPods(records: RecordsRead): Record<string, unknown> {
  const built = podsBuilt.get(records);
  if (built) return built;
  const count = (d: PodRecord["decision"]) => records.records.filter((r) => r.decision === d).length;
  const pods = {
    handled: records.records.length,
    meshed: count("meshed"),
    skipped: count("skipped"),
    unreadableRecords: records.unreadable,
    containers: records.records.map((r) => ({
      namespace: r.namespace,
      name: r.name,
      ...(r.uid !== undefined ? { uid: r.uid } : {}),
      containerId: r.containerId,
      decision: r.decision,
      reason: r.reason,
      ...(r.backend !== undefined ? { backend: r.backend } : {}),
      time: r.time,
    })),
  };
  podsBuilt.set(records, pods);
  return pods;
}

export function buildStatus(s: StatusInput): Record<string, unknown> {
  const { install, records } = s;
  const problems = [install.chain, install.binary, install.kubeconfig].flatMap((p) => (p.problem ? [p.problem] : []));
  const reports = Object.values(s.counters.requests).reduce((a, b) => a + b, 0);
  return {
    version: s.version,
    node: s.node ?? null,
    namespace: s.namespace ?? null,
    daemonSet: s.daemonSet,
    ready: problems.length === 0,
    problems,
    chain: install.chain,
    binary: install.binary,
    kubeconfig: install.kubeconfig,
    cache: s.cache ?? {
      running: false,
      note: "no watch cache (no node name): the agent answers no pod lookup; the plugin uses its kubeconfig",
    },
    pods: buildPods(records),
    plugin: {
      reports,
      apiFallbacks: s.counters.pluginLookups.kubeconfig ?? 0,
      badRequests: s.counters.badRequests,
    },
    repair: s.repair ?? null,
    verify: s.verify ?? null,
    agent: s.agent,
  };
}
