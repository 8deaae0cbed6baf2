// The CNI protocol, end to end through the compiled plugin: for every command and every spec
// version, environment + stdin -> stdout + exit code, compared with testdata/cni/<case>.golden
// (each golden shows its input), and whether it wrote a payload (MESHCNI_DRY_RUN_FILE) for which
// families. The payloads themselves are rule goldens: testdata/linkerd/rules/pods/<case>.golden for
// the pods/ cases, and every other meshed ADD must write exactly the default pod's, so one rule
// change rewrites the rule goldens, not these.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { expectGolden, repoPath } from "../support/golden.ts";
import { cniEnv, runPlugin } from "../support/plugin-run.ts";

const VERSIONS = ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
const MESHED =
  "IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=web-5b8b6f7c9d-x2x7q;K8S_POD_INFRA_CONTAINER_ID=3f2a9c1d7e5b;K8S_POD_UID=6f1f0c2a-3f4e-4b8e-9d0e-2f5a1c7b8e90";
const podArgs = (ns: string, name: string) => `IgnoreUnknown=1;K8S_POD_NAMESPACE=${ns};K8S_POD_NAME=${name}`;

const fixture = (f: string) => JSON.parse(require("node:fs").readFileSync(repoPath(f), "utf8"));
const prev = (p: string) => fixture(`testdata/cni/prev-results/${p}.json`);

interface Case {
  name: string;
  env: Record<string, string>;
  /** The conflist entry (cniVersion and name as a runtime injects them); a string is sent raw. */
  stdin: Record<string, unknown> | string;
}

let kubeconfigPath = "";

function conf(version: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    cniVersion: version,
    name: "k8s-pod-network",
    type: "meshcni",
    log_level: "info",
    mesh: "linkerd",
    kubernetes: { kubeconfig: "__KUBECONFIG__", exclude_namespaces: ["kube-system"], pod_namespace: "meshcni" },
    linkerd: {
      "incoming-proxy-port": 4143,
      "outgoing-proxy-port": 4140,
      "proxy-uid": 2102,
      "inbound-ports-to-ignore": ["4191", "4190"],
      "iptables-mode": "auto",
    },
    ...extra,
  };
}

function cases(): Case[] {
  const out: Case[] = [];
  for (const v of VERSIONS) {
    out.push({
      name: `${v}/add-meshed`,
      env: cniEnv("ADD", { CNI_ARGS: MESHED }),
      stdin: conf(v, { prevResult: prev("flannel-bridge") }),
    });
    out.push({
      name: `${v}/add-not-meshed`,
      env: cniEnv("ADD", { CNI_ARGS: podArgs("default", "nginx-6d4cf56db6-abcde") }),
      stdin: conf(v, { prevResult: prev("calico") }),
    });
    out.push({ name: `${v}/add-not-kubernetes-no-prevresult`, env: cniEnv("ADD"), stdin: conf(v) });
    out.push({
      name: `${v}/check`,
      env: cniEnv("CHECK", { CNI_ARGS: MESHED }),
      stdin: conf(v, { prevResult: prev("flannel-bridge") }),
    });
    out.push({
      name: `${v}/del`,
      env: cniEnv("DEL", { CNI_ARGS: MESHED, CNI_NETNS: "" }),
      stdin: conf(v, { prevResult: prev("flannel-bridge") }),
    });
    out.push({ name: `${v}/status`, env: { CNI_COMMAND: "STATUS", CNI_PATH: "/opt/cni/bin" }, stdin: conf(v) });
    out.push({
      name: `${v}/gc`,
      env: { CNI_COMMAND: "GC", CNI_PATH: "/opt/cni/bin" },
      stdin: conf(v, {
        "cni.dev/valid-attachments": [{ containerID: "3f2a9c1d7e5b", ifname: "eth0" }],
        "cni.dev/attachments": [{ containerID: "3f2a9c1d7e5b", ifname: "eth0" }],
      }),
    });
    out.push({
      name: `${v}/version`,
      env: { CNI_COMMAND: "VERSION", CNI_NETNS: "dummy", CNI_IFNAME: "dummy", CNI_PATH: "dummy", CNI_CONTAINERID: "" },
      stdin: JSON.stringify({ cniVersion: v }),
    });
  }
  // The prevResult of each primary plugin, passed on in the list's version.
  for (const p of [
    "flannel-bridge",
    "calico",
    "cilium",
    "aws-vpc-cni",
    "gke-ptp",
    "kind-ptp-dualstack",
    "azure-vnet",
  ]) {
    for (const v of ["0.4.0", "1.0.0"]) {
      out.push({
        name: `prev-results/${p}-as-${v}`,
        env: cniEnv("ADD", { CNI_ARGS: MESHED }),
        stdin: conf(v, { prevResult: prev(p) }),
      });
    }
  }
  // Which pods, which rules.
  const pods: [string, string, string, Record<string, unknown>?][] = [
    ["native-sidecar", "emojivoto", "web-5b8b6f7c9d-n8s2k"],
    ["annotated-ipv6", "emojivoto", "web-5b8b6f7c9d-a1b2c", { ipv6: true }],
    ["control-plane", "linkerd", "linkerd-destination-7c8b9d5f6-qwert"],
    ["linkerd-init", "emojivoto", "web-5b8b6f7c9d-k9k9k"],
    ["bad-annotation", "emojivoto", "web-5b8b6f7c9d-evil1"],
    ["namespace-annotation", "emojivoto", "web-5b8b6f7c9d-x2x7q"],
    [
      "redirect-listed-ports",
      "emojivoto",
      "web-5b8b6f7c9d-x2x7q",
      { "ports-to-redirect": [8080, 9090], "outbound-ports-to-ignore": ["25", "587"], "proxy-gid": 2102 },
    ],
    [
      "many-ports",
      "emojivoto",
      "web-5b8b6f7c9d-x2x7q",
      {
        "inbound-ports-to-ignore": [
          "4191",
          "4190",
          "22-23",
          "25-27",
          "33-34",
          "35-35",
          "37-38",
          "50-54",
          "56",
          "58",
          "60",
          "63",
          "70-72",
          "80",
        ],
      },
    ],
    ["legacy-mode-wait", "emojivoto", "web-5b8b6f7c9d-x2x7q", { "iptables-mode": "legacy", "use-wait-flag": true }],
  ];
  for (const [name, ns, pod, linkerd] of pods) {
    const base = conf("1.0.0", { prevResult: prev("flannel-bridge") });
    if (linkerd) base.linkerd = { ...(base.linkerd as object), ...linkerd };
    out.push({ name: `pods/${name}`, env: cniEnv("ADD", { CNI_ARGS: podArgs(ns, pod) }), stdin: base });
  }
  out.push({
    name: "pods/excluded-namespace",
    env: cniEnv("ADD", { CNI_ARGS: podArgs("kube-system", "coredns-5d78c9869d-abcde") }),
    stdin: conf("1.0.0"),
  });
  out.push({
    name: "pods/own-daemonset-pod",
    env: cniEnv("ADD", { CNI_ARGS: podArgs("meshcni", "meshcni-node-x7k2p") }),
    stdin: conf("1.0.0"),
  });
  out.push({
    name: "pods/not-found",
    env: cniEnv("ADD", { CNI_ARGS: podArgs("emojivoto", "gone-7c9f8d6b5-zzzzz") }),
    stdin: conf("1.0.0"),
  });
  // Bad input: every one gets its code.
  out.push({ name: "errors/malformed-json", env: cniEnv("ADD"), stdin: '{"cniVersion":"1.0.0","name":' });
  out.push({ name: "errors/not-an-object", env: cniEnv("ADD"), stdin: "[1,2,3]" });
  out.push({ name: "errors/empty-stdin", env: cniEnv("ADD"), stdin: "" });
  out.push({ name: "errors/unknown-version", env: cniEnv("ADD"), stdin: conf("2.0.0") });
  out.push({ name: "errors/old-version", env: cniEnv("ADD"), stdin: conf("0.2.0") });
  out.push({ name: "errors/missing-version", env: cniEnv("ADD"), stdin: { name: "x", type: "meshcni" } });
  out.push({ name: "errors/missing-name", env: cniEnv("ADD"), stdin: { cniVersion: "1.0.0", type: "meshcni" } });
  out.push({
    name: "errors/wrong-types",
    env: cniEnv("ADD", { CNI_ARGS: MESHED }),
    stdin: conf("1.0.0", { linkerd: { "incoming-proxy-port": "4143", "proxy-uid": -7, ipv6: "yes" } }),
  });
  out.push({ name: "errors/unknown-mesh", env: cniEnv("ADD"), stdin: conf("1.0.0", { mesh: "consul" }) });
  out.push({
    name: "errors/invalid-config-ports",
    env: cniEnv("ADD", { CNI_ARGS: MESHED }),
    stdin: conf("1.0.0", { linkerd: { "inbound-ports-to-ignore": ["4191", "70000"] } }),
  });
  out.push({ name: "errors/missing-env", env: { CNI_COMMAND: "ADD", CNI_PATH: "/opt/cni/bin" }, stdin: conf("1.0.0") });
  out.push({ name: "errors/missing-command", env: { CNI_PATH: "/opt/cni/bin" }, stdin: conf("1.0.0") });
  out.push({ name: "errors/unknown-command", env: cniEnv("REPAIR"), stdin: conf("1.0.0") });
  out.push({ name: "errors/bad-container-id", env: cniEnv("ADD", { CNI_CONTAINERID: "-rf /" }), stdin: conf("1.0.0") });
  out.push({ name: "errors/bad-ifname", env: cniEnv("ADD", { CNI_IFNAME: "eth0/../x" }), stdin: conf("1.0.0") });
  out.push({ name: "errors/relative-netns", env: cniEnv("ADD", { CNI_NETNS: "netns/x" }), stdin: conf("1.0.0") });
  out.push({
    name: "errors/bad-cni-args",
    env: cniEnv("ADD", { CNI_ARGS: "IgnoreUnknown=1;K8S_POD_NAME" }),
    stdin: conf("1.0.0"),
  });
  out.push({
    name: "errors/bad-pod-name",
    env: cniEnv("ADD", { CNI_ARGS: podArgs("emojivoto", "../../secrets/x") }),
    stdin: conf("1.0.0"),
  });
  out.push({
    name: "errors/bad-prevresult",
    env: cniEnv("ADD", { CNI_ARGS: MESHED }),
    stdin: conf("1.0.0", { prevResult: { cniVersion: "1.0.0", ips: [{ gateway: "10.0.0.1" }] } }),
  });
  out.push({
    name: "errors/missing-kubeconfig",
    env: cniEnv("ADD", { CNI_ARGS: MESHED }),
    stdin: conf("1.0.0", { kubernetes: { kubeconfig: "/nonexistent/ZZZ-meshcni-kubeconfig" } }),
  });
  out.push({
    name: "errors/status-no-kubeconfig",
    env: { CNI_COMMAND: "STATUS" },
    stdin: conf("1.1.0", { kubernetes: { kubeconfig: "/nonexistent/ZZZ-meshcni-kubeconfig" } }),
  });
  return out;
}

/** What the protocol golden says of a payload: which families, and where its rules are kept. */
function payloadSummary(c: Case, payload: string): string {
  const parts = [...payload.matchAll(/^# (.*)$/gm)].map((m) => m[1]);
  const where = c.name.startsWith("pods/")
    ? `testdata/linkerd/rules/pods/${c.name.slice(5)}.golden`
    : "the same as pods/namespace-annotation's";
  return `(written: ${parts.join("; ")}; the rules: ${where})`;
}

function render(c: Case, r: { code: number; stdout: string; payload?: string }, url: string): string {
  const envText = Object.entries(c.env)
    .map(([k, v]) => `${k}=${v}`)
    .join(" ");
  const stdin = typeof c.stdin === "string" ? c.stdin : JSON.stringify(c.stdin, null, 2);
  const scrub = (s: string) => s.split(url).join("https://APISERVER").split(kubeconfigPath).join("__KUBECONFIG__");
  return [
    `$ ${envText} meshcni`,
    "--- stdin",
    stdin,
    `--- exit ${r.code}`,
    "--- stdout",
    scrub(r.stdout).trimEnd(),
    "--- payload (MESHCNI_DRY_RUN_FILE)",
    r.payload === undefined ? "(not written)" : r.payload === "" ? "(empty: no rules)" : payloadSummary(c, r.payload),
    "",
  ].join("\n");
}

describe("CNI protocol goldens (dist/meshcni)", () => {
  let api: ApiServer;
  let dir: string;
  beforeAll(async () => {
    api = await startApiServer({ token: "golden-token" });
    for (const f of readdirSync(repoPath("testdata/pods"))) {
      const obj = fixture(`testdata/pods/${f}`);
      if (obj.kind === "Pod") api.addPod(obj);
    }
    api.addNamespace(fixture("testdata/pods/namespace-emojivoto-annotated.json"));
    api.addNamespace({ metadata: { name: "linkerd", annotations: {} } });
    api.addNamespace({ metadata: { name: "default" } });
    dir = mkdtempSync(join(tmpdir(), "meshcni-golden-"));
    kubeconfigPath = join(dir, "ZZZ-meshcni-kubeconfig");
    writeFileSync(kubeconfigPath, api.kubeconfig());
  });
  afterAll(async () => {
    await api?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** The payloads of the meshed ADDs outside pods/: spec version and prevResult change none of them. */
  const payloads = new Map<string, string>();

  for (const c of cases()) {
    test(c.name, async () => {
      const stdin =
        typeof c.stdin === "string" ? c.stdin : JSON.stringify(c.stdin).split("__KUBECONFIG__").join(kubeconfigPath);
      const r = await runPlugin(c.env, stdin, { dryRun: true });
      expectGolden(`testdata/cni/${c.name}.golden`, render(c, r, api.url));
      // Whatever happened, stdout is one JSON document (or empty) and stderr lines carry the prefix.
      if (r.stdout.trim()) JSON.parse(r.stdout);
      for (const line of r.stderr.split("\n").filter(Boolean)) expect(line.startsWith("meshcni")).toBe(true);
      // A failed invocation never leaves a payload behind.
      if (r.code !== 0) expect(r.payload).toBeUndefined();
      if (r.payload) {
        if (c.name.startsWith("pods/"))
          expectGolden(`testdata/linkerd/rules/pods/${c.name.slice(5)}.golden`, r.payload);
        else payloads.set(c.name, r.payload);
      }
    });
  }

  test("every meshed ADD outside pods/ (each spec version, each prevResult) writes the default pod's payload", () => {
    expect(payloads.size).toBe(VERSIONS.length + 14);
    const reference = require("node:fs").readFileSync(
      repoPath("testdata/linkerd/rules/pods/namespace-annotation.golden"),
      "utf8",
    );
    for (const [name, payload] of payloads) expect({ name, payload }).toEqual({ name, payload: reference });
  });
});
