// The plans both backends are tested with: every Istio golden case (testdata/istio/rules) and
// a set of Linkerd configurations and pods (testdata/pods).
import { readFileSync } from "node:fs";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import { istioProfile } from "../../internal/mesh/istio/profile.ts";
import { linkerdProfile } from "../../internal/mesh/linkerd/profile.ts";
import type { MeshProfile } from "../../internal/mesh/profile.ts";
import type { Plan } from "../../internal/plan/model.ts";
import { repoPath } from "../support/golden.ts";
import { listCases, readCase } from "../istio/cases.ts";

export interface PlanCase {
  name: string;
  profile: MeshProfile;
  conf: ReturnType<typeof parsePluginConf>;
  plan: Plan;
}

const json = (p: string) => JSON.parse(readFileSync(repoPath(p), "utf8"));

const LINKERD: { name: string; pod: string; namespace?: string; linkerd?: Record<string, unknown> }[] = [
  { name: "meshed", pod: "linkerd-meshed.json" },
  { name: "annotated", pod: "linkerd-annotated.json", namespace: "namespace-emojivoto-annotated.json" },
  { name: "control-plane", pod: "linkerd-control-plane.json" },
  {
    name: "ipv6",
    pod: "linkerd-annotated.json",
    namespace: "namespace-emojivoto-annotated.json",
    linkerd: { ipv6: true, "subnets-to-ignore": ["10.0.0.0/8", "fd00::/8"] },
  },
  {
    name: "ports-to-redirect",
    pod: "linkerd-meshed.json",
    linkerd: { "ports-to-redirect": [8080, "9090"], "proxy-gid": 2103, "outbound-ports-to-ignore": ["25-27", 3306] },
  },
];

export function linkerdCases(): PlanCase[] {
  return LINKERD.map((c) => {
    const conf = parsePluginConf(
      JSON.stringify({
        cniVersion: "1.0.0",
        name: "k8s-pod-network",
        type: "meshcni",
        linkerd: { "inbound-ports-to-ignore": ["4191", "4190"], ...c.linkerd },
      }),
    );
    const pod = json(`testdata/pods/${c.pod}`);
    const input = { conf, pod, podAddresses: [] as string[] };
    const plan = linkerdProfile.plan(
      c.namespace ? { ...input, namespace: json(`testdata/pods/${c.namespace}`) } : input,
    );
    return { name: `linkerd-${c.name}`, profile: linkerdProfile, conf, plan };
  });
}

export function istioCases(): PlanCase[] {
  const out: PlanCase[] = [];
  for (const name of listCases().filter((c) => !c.startsWith("bad-"))) {
    const { input, pod, conf } = readCase(name);
    if (!istioProfile.decide(pod, conf).redirect) continue;
    out.push({
      name: `istio-${name}`,
      profile: istioProfile,
      conf,
      plan: istioProfile.plan({ conf, pod, podAddresses: input.podAddresses }),
    });
  }
  return out;
}

export const allCases = () => [...linkerdCases(), ...istioCases()];
