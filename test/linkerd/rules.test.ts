// The Linkerd profile, pure: every case under testdata/linkerd/rules gives exactly its golden
// (the payloads MESHCNI_DRY_RUN_FILE would receive, or the CNI error for bad input).
import { describe, expect, test } from "bun:test";
import { CniError } from "../../internal/cni/errors.ts";
import { linkerdProfile } from "../../internal/mesh/linkerd/profile.ts";
import type { PlanInput } from "../../internal/mesh/profile.ts";
import { parseService } from "../../internal/kube/objects.ts";
import { iptablesBackend } from "../../internal/firewall/iptables/index.ts";
import { expectGolden } from "../support/golden.ts";
import { listCases, readCase, RULES_DIR } from "./cases.ts";

function planInput(name: string): {
  input: PlanInput;
  about?: string;
  decision: ReturnType<typeof linkerdProfile.decide>;
  asks: boolean;
  has: boolean;
} {
  const { input, pod, namespace, conf } = readCase(name);
  const plan: PlanInput = { conf, pod, podAddresses: input.podAddresses ?? ["10.244.1.12"] };
  if (namespace) plan.namespace = namespace;
  if ("kubernetesService" in input) plan.kubernetesService = parseService(input.kubernetesService) ?? null;
  return {
    input: plan,
    about: input.about,
    decision: linkerdProfile.decide(pod, conf),
    asks: linkerdProfile.needsKubernetesService!(pod),
    has: "kubernetesService" in input,
  };
}

function renderCase(name: string): string {
  const { input, about, decision } = planInput(name);
  const head = `# ${name}${about ? `: ${about}` : ""}\n`;
  if (!decision.redirect) return `${head}# no rules: ${decision.reason}\n`;
  try {
    return `${head}# ${decision.reason}\n${iptablesBackend.render(linkerdProfile.plan(input))}`;
  } catch (e) {
    if (!(e instanceof CniError)) throw e;
    return (
      `${head}# ADD fails, nothing applied\n` +
      `${JSON.stringify({ code: e.code, msg: e.msg, details: e.details }, null, 2)}\n`
    );
  }
}

describe("linkerd rules goldens", () => {
  const cases = listCases();
  test("there are cases", () => {
    expect(cases.length).toBeGreaterThan(3);
  });
  for (const name of cases) {
    test(name, () => {
      expectGolden(`${RULES_DIR}/${name}.golden`, renderCase(name));
    });
  }

  test("the kubernetes Service is asked for exactly for control-plane pods (the cases that give one)", () => {
    for (const name of cases) {
      const { asks, has } = planInput(name);
      expect(asks, name).toBe(has);
    }
  });
});
