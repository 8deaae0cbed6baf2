// The Istio profile: which pods istio-cni would redirect (sidecar mode), and istio-iptables'
// rules for them.
import type { PluginConf } from "../../config/plugin-config.ts";
import { allContainers, type Pod } from "../../kube/objects.ts";
import type { Family, Plan } from "../../plan/model.ts";
import {
  envOf,
  ISTIO_INIT,
  ISTIO_PROXY,
  IstioAnnotations,
  istioProxy,
  parseGoBool,
  parseIstioOptions,
} from "./options.ts";
import {
  buildIstioIpCommands,
  buildIstioRules,
  ISTIO_CLEANUP_IP_COMMANDS,
  ISTIO_OWNED_CHAINS,
  ownsIstioBuiltinRule,
} from "./rules.ts";
import type { Decision, MeshProfile, PlanInput } from "../profile.ts";
import { quote } from "../../text/escape.ts";

const skip = (reason: string): Decision => ({ redirect: false, reason });

/** istio-cni's exclusions, in its order; the namespace and own-pod checks come before (plugin/run.ts). */
export function decideIstio(pod: Pod): Decision {
  if (allContainers(pod).some((c) => c.name === ISTIO_INIT)) {
    return skip(`the pod has the ${ISTIO_INIT} init container, which sets up its own rules`);
  }
  const proxy = istioProxy(pod);
  if (!proxy) return skip(`the pod has no ${ISTIO_PROXY} container`);
  const disable = envOf(proxy, "DISABLE_ENVOY");
  if (parseGoBool(disable) === true) return skip(`${ISTIO_PROXY} has DISABLE_ENVOY=${quote(disable!)}`);
  const args = proxy.args ?? [];
  if (args[0] === "proxy" && args[1] !== undefined && args[1] !== "sidecar") {
    return skip(`${ISTIO_PROXY} runs as ${quote(`proxy ${args[1]}`)} (a gateway), not as a sidecar`);
  }
  // The label wins over the annotation; a value that is not a boolean is ignored, as in Istio.
  const label = pod.metadata.labels?.[IstioAnnotations.inject];
  const annotation = pod.metadata.annotations?.[IstioAnnotations.inject];
  const [from, value] = label !== undefined ? ["label", label] : ["annotation", annotation];
  if (parseGoBool(value) === false) return skip(`the ${from} ${IstioAnnotations.inject} is ${quote(String(value))}`);
  if (pod.metadata.annotations?.[IstioAnnotations.status] === undefined) {
    return skip(`the pod has no ${IstioAnnotations.status} annotation (the sidecar injector did not inject it)`);
  }
  const native = (pod.spec.initContainers ?? []).some((c) => c.name === ISTIO_PROXY);
  return { redirect: true, reason: `the pod runs ${ISTIO_PROXY} as a ${native ? "native sidecar" : "sidecar"}` };
}

export const istioProfile: MeshProfile = {
  mesh: "istio",
  ownedChains: ISTIO_OWNED_CHAINS,
  // istio-cni reads the pod's annotations only (the injector copies mesh defaults onto the
  // pod), so the namespace is never fetched.
  annotationKeys: [],
  cleanupIpCommands: ISTIO_CLEANUP_IP_COMMANDS,
  ownsBuiltinRule: ownsIstioBuiltinRule,
  decide: decideIstio,
  // IPv6 rules or not depends on the pod's addresses (wantsIPv6).
  readsPodAddresses: true,
  plan(input: PlanInput): Plan {
    const o = parseIstioOptions(input.conf, input.pod, input.podAddresses);
    const families: Family[] = o.ipv6 ? [4, 6] : [4];
    return { families: families.map((f) => buildIstioRules(o, f)), ipCommands: buildIstioIpCommands(o, families) };
  },
  firewall(conf: PluginConf) {
    const s = conf.istio;
    return { mode: s["iptables-mode"] || "auto", wait: s["use-wait-flag"], simulate: s.simulate };
  },
  // Whether a pod got IPv6 rules depends on its addresses, which DEL does not have: look at both.
  families() {
    return [4, 6];
  },
};
