// The Istio profile, pure: every case under testdata/istio/rules gives exactly its golden
// (the payloads MESHCNI_DRY_RUN_FILE would receive, or the CNI error for bad input), and the
// pod fixtures get istio-cni's decisions.
import { describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { CniError } from "../../internal/cni/errors.ts";
import { profileFor } from "../../internal/mesh/index.ts";
import { decideIstio, istioProfile } from "../../internal/mesh/istio/profile.ts";
import { parseInterfaceName } from "../../internal/mesh/istio/options.ts";
import { iptablesBackend } from "../../internal/firewall/iptables/index.ts";
import { parsePod } from "../../internal/kube/objects.ts";
import { expectGolden, repoPath } from "../support/golden.ts";
import { buildCasePod, confFor, listCases, readCase, RULES_DIR } from "./cases.ts";

function renderCase(name: string): string {
  const { input, pod, conf } = readCase(name);
  const head = `# ${name}${input.about ? `: ${input.about}` : ""}\n`;
  const decision = istioProfile.decide(pod, conf);
  if (!decision.redirect) return `${head}# no rules: ${decision.reason}\n`;
  try {
    const redirect = istioProfile.plan({ conf, pod, podAddresses: input.podAddresses });
    return `${head}# ${decision.reason}\n${iptablesBackend.render(redirect)}`;
  } catch (e) {
    if (!(e instanceof CniError)) throw e;
    return (
      `${head}# ADD fails, nothing applied\n` +
      `${JSON.stringify({ code: e.code, msg: e.msg, details: e.details }, null, 2)}\n`
    );
  }
}

describe("istio rules goldens", () => {
  const cases = listCases();
  test("there are cases", () => {
    expect(cases.length).toBeGreaterThan(30);
  });
  for (const name of cases) {
    test(name, () => {
      expectGolden(`${RULES_DIR}/${name}.golden`, renderCase(name));
    });
  }

  test("the profile is registered for mesh istio", () => {
    expect(profileFor(confFor())).toBe(istioProfile);
  });

  test("bad annotations fail with code 7 naming the annotation and the value", () => {
    for (const name of cases.filter((c) => c.startsWith("bad-"))) {
      const { input, pod, conf } = readCase(name);
      let err: unknown;
      try {
        istioProfile.plan({ conf, pod, podAddresses: input.podAddresses });
      } catch (e) {
        err = e;
      }
      expect(err, name).toBeInstanceOf(CniError);
      const e = err as CniError;
      expect(e.code).toBe(7);
      const [key, value] =
        Object.entries(input.annotations ?? {}).find(([k]) => e.msg === `invalid annotation ${k}`) ?? [];
      expect(key, `${name}: ${e.msg}`).toBeDefined();
      expect(e.details).toContain(JSON.stringify(value));
    }
  });

  test("the default pod and the pod without traffic annotations get the same rules", () => {
    const a = readFileSync(repoPath(RULES_DIR, "default.golden"), "utf8").split("\n").slice(2).join("\n");
    const b = readFileSync(repoPath(RULES_DIR, "annotations-absent.golden"), "utf8").split("\n").slice(2).join("\n");
    expect(a).toBe(b);
  });

  test("interface names are strict", () => {
    for (const ok of ["eth0", "net1", "k6t-eth0", "veth_a.1", "a"]) expect(parseInterfaceName(ok)).toBe(ok);
    for (const bad of [
      "",
      "-j",
      ".",
      "..",
      "eth 0",
      "eth0/1",
      "eth0:1",
      "eth+",
      "abcdefghijklmnop",
      "eth0\nx",
      "ét0",
      "$(id)",
    ]) {
      expect(parseInterfaceName(bad), JSON.stringify(bad)).toBeUndefined();
    }
  });
});

describe("istio decisions", () => {
  const table: {
    pod: string;
    about: string;
    labels?: Record<string, string | null>;
    annotations?: Record<string, string | null>;
    proxyEnv?: Record<string, string>;
  }[] = [
    { pod: "sidecar.json", about: "injected with the CNI plugin on" },
    { pod: "native-sidecar.json", about: "istio-proxy as a native sidecar" },
    { pod: "openshift-uid.json", about: "OpenShift UID range" },
    { pod: "istio-init.json", about: "injected for istio-init (CNI off)" },
    { pod: "gateway.json", about: "an ingress gateway" },
    { pod: "not-injected.json", about: "not injected" },
    { pod: "sidecar.json", about: "label inject=false", labels: { "sidecar.istio.io/inject": "false" } },
    { pod: "sidecar.json", about: "annotation inject=false", annotations: { "sidecar.istio.io/inject": "false" } },
    { pod: "sidecar.json", about: "annotation inject=0", annotations: { "sidecar.istio.io/inject": "0" } },
    {
      pod: "sidecar.json",
      about: "label true wins over annotation false",
      labels: { "sidecar.istio.io/inject": "true" },
      annotations: { "sidecar.istio.io/inject": "false" },
    },
    {
      pod: "sidecar.json",
      about: "annotation inject=no (not a boolean: ignored)",
      annotations: { "sidecar.istio.io/inject": "no" },
    },
    { pod: "sidecar.json", about: "no sidecar.istio.io/status", annotations: { "sidecar.istio.io/status": null } },
    { pod: "sidecar.json", about: "DISABLE_ENVOY=true", proxyEnv: { DISABLE_ENVOY: "true" } },
    { pod: "sidecar.json", about: "DISABLE_ENVOY=false", proxyEnv: { DISABLE_ENVOY: "false" } },
  ];
  test("each pod gets istio-cni's decision", () => {
    const lines = table.map((c) => {
      const pod = parsePod(buildCasePod(c));
      if (!pod) throw new Error(`${c.pod} does not parse`);
      const d = decideIstio(pod);
      return `${c.pod} (${c.about}): ${d.redirect ? "redirect" : "skip"}: ${d.reason}`;
    });
    expectGolden("testdata/istio/decisions.golden", `${lines.join("\n")}\n`);
  });
});
