// The boundary between the plugin's logic and the host: everything that touches the system is
// behind these interfaces, implemented in internal/plugin/io and replaced by fakes in tests.
import type { LookupSource } from "../wire/protocol.ts";
import type { PodRecord } from "../wire/state.ts";
import type { PluginConf } from "../config/plugin-config.ts";
import type { Namespace, Pod, Service } from "../kube/objects.ts";
import type { FirewallSettings } from "../firewall/registry.ts";
import type { Backend, ExecResult, Firewall as BackendFirewall } from "../firewall/backend.ts";
import type { Family } from "../plan/model.ts";

export type { ExecResult };

/**
 * Thrown by the node agent's PluginDeps when the agent cannot plan an ADD on its own (it needs
 * the pod's network namespace, a Service, or the pod is not answerable from the agent): the
 * plugin then runs the whole ADD itself, as without an agent (internal/agent/socket/plan-add.ts).
 */
export class NotPlannable extends Error {
  override name = "NotPlannable";
  /** The agent's own lookup of the pod failed: the plugin should not ask the agent for it again. */
  constructor(
    message: string,
    readonly lookupFailed = false,
  ) {
    super(message);
  }
}

/** Reads pods and namespaces; failures are thrown as CniErrors with their codes. */
export interface KubeClient {
  getPod(namespace: string, name: string, signal: AbortSignal): Promise<Pod>;
  getNamespace(name: string, signal: AbortSignal): Promise<Namespace>;
  getService(namespace: string, name: string, signal: AbortSignal): Promise<Service>;
  /** Where the pod came from once getPod answered, and why the agent was not used when it was not. */
  lookup?(): { source: LookupSource; fallback?: string } | undefined;
}

/** The plugin's records in its state folder (internal/wire/state.ts); absent in tests that keep none. */
export interface Records {
  read(stateDir: string, containerId: string): Promise<PodRecord | "unreadable" | undefined>;
  write(stateDir: string, record: PodRecord): Promise<void>;
  remove(stateDir: string, containerId: string): Promise<void>;
  /** Removes the records of containers not in `keep`; returns their IDs. */
  prune(stateDir: string, keep: ReadonlySet<string>): Promise<string[]>;
}

/** A backend's binaries and ip inside one pod network namespace, with the backend (driver). */
export interface Firewall extends BackendFirewall {
  readonly driver: Backend;
}

export interface PluginDeps {
  /** Reads the kubeconfig named in the config; throws CniError 107 when it cannot. */
  openKube(conf: PluginConf): Promise<KubeClient>;
  /** Picks the backend, resolves nsenter and its binaries; throws CniError 101 naming a missing one. */
  openFirewall(netns: string, settings: FirewallSettings, families: readonly Family[]): Promise<Firewall>;
  /** Problems that keep the plugin from serving ADD on this host (STATUS); empty when ready. */
  hostProblems(conf: PluginConf, settings: FirewallSettings, families: readonly Family[]): Promise<string[]>;
  netnsExists(path: string): Promise<boolean>;
  /** The addresses inside a network namespace, in the kernel's order (no prefix length). */
  podAddresses(netns: string, signal: AbortSignal): Promise<string[]>;
  /**
   * MESHCNI_DRY_RUN_FILE from the environment. Honoured only with `"dry_run": true` in the
   * conflist entry (run.ts, dryRunGate); then payloads are written here instead of applied.
   */
  dryRunFile?: string;
  writeFile(path: string, text: string): Promise<void>;
  records?: Records;
  /** Where log lines go (stderr in the binary). */
  logSink(line: string): void;
}
