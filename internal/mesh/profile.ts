// What a mesh profile provides: which pods it redirects, and the rules it gives them. The
// plugin's ADD/CHECK/DEL and `meshcnictl explain` all go through these functions.
import type { PluginConf } from "../config/plugin-config.ts";
import type { Namespace, Pod, Service } from "../kube/objects.ts";
import type { FirewallSettings } from "../firewall/registry.ts";
import type { Family, IpCommand, Plan, Stage } from "../plan/model.ts";

export type Decision = { redirect: false; reason: string } | { redirect: true; reason: string };

export type { IpCommand, Plan };
/** What a profile gives a redirected pod: the backend-neutral plan (internal/plan/model.ts). */
export type Redirect = Plan;

export interface PlanInput {
  conf: PluginConf;
  pod: Pod;
  namespace?: Namespace;
  /** The pod's addresses from prevResult (no prefix length), when the runtime gave them. */
  podAddresses: readonly string[];
  /**
   * The `default/kubernetes` Service, for a profile whose needsKubernetesService said so; null
   * when it could not be read.
   */
  kubernetesService?: Service | null;
}

export interface MeshProfile {
  readonly mesh: "linkerd" | "istio";
  /** Every chain this profile can create, so DEL can remove them without the pod. */
  readonly ownedChains: readonly { stage: Stage; name: string }[];
  /** Annotations read from the pod, or else from its namespace. */
  readonly annotationKeys: readonly string[];
  /** `ip` commands DEL runs in a live namespace to undo `ipCommands` (failures are ignored). */
  readonly cleanupIpCommands?: readonly IpCommand[];
  /**
   * For the iptables backend's DEL: whether a rule in a built-in chain (args as iptables-save
   * prints them) is one of ours that jumps to none of our chains (those are found by their
   * jump). Never claims a jump. Backends that own whole tables need nothing like it.
   */
  readonly ownsBuiltinRule?: (table: Stage, chain: string, args: string) => boolean;
  decide(pod: Pod, conf: PluginConf): Decision;
  /**
   * Whether plan() depends on the pod's addresses: without any in the previous result they are
   * then read inside the pod's network namespace.
   */
  readonly readsPodAddresses?: boolean;
  /** Whether plan() wants the `default/kubernetes` Service for this pod (one more API call). */
  needsKubernetesService?(pod: Pod): boolean;
  /** Builds the plan; throws CniError code 7 naming an invalid annotation or setting. */
  plan(input: PlanInput): Plan;
  firewall(conf: PluginConf): FirewallSettings;
  /** Address families DEL should look at. */
  families(conf: PluginConf): Family[];
}

/** Whether any annotation the profile reads is missing on the pod (so the namespace is needed). */
export function needsNamespace(profile: MeshProfile, pod: Pod): boolean {
  const a = pod.metadata.annotations ?? {};
  return profile.annotationKeys.some((k) => a[k] === undefined || a[k] === "");
}
