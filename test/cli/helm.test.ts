// The Helm chart in manifests/: `helm lint` is clean, and `helm template` renders the same
// objects as `meshcnictl install-cni` with the same settings (compared as parsed YAML), for the
// chart's defaults and two sets of non-default values (testdata/manifests/<case>.values.yaml
// beside the equivalent flags, <case>.args), and for a matrix of chart values given to both as
// the same --set and --values arguments, each object fitting Kubernetes' schemas. Helm comes
// from the npm registry (see support.ts); when it cannot be had these tests fail.
import { beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { parse, parseAllDocuments } from "yaml";
import pkg from "../../package.json" with { type: "json" };
import { parseValues } from "../../internal/cli/manifests/values.ts";
import { repoPath } from "../support/golden.ts";
import { validateObject } from "./k8s-schemas.ts";
import { ensureCli, ensureHelm, runCli } from "./support.ts";

type Obj = Record<string, any>;
let helm = "";

beforeAll(async () => {
  helm = ensureHelm();
  await ensureCli();
});

function runHelm(args: string[]): { code: number; stdout: string; stderr: string } {
  const r = Bun.spawnSync([helm, ...args], {
    cwd: repoPath(),
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      HELM_CACHE_HOME: repoPath(".cache/helm/home/cache"),
      HELM_CONFIG_HOME: repoPath(".cache/helm/home/config"),
      HELM_DATA_HOME: repoPath(".cache/helm/home/data"),
    },
    stdout: "pipe",
    stderr: "pipe",
  });
  return { code: r.exitCode ?? -1, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

function docs(text: string): Obj[] {
  return parseAllDocuments(text)
    .map((d) => {
      if (d.errors.length) throw new Error(d.errors[0]!.message);
      return d.toJS() as Obj;
    })
    .filter((d) => d !== null);
}

const CASES = [
  { name: "default", namespace: "meshcni" },
  { name: "linkerd-custom", namespace: "linkerd-cni" },
  { name: "istio-openshift", namespace: "istio-cni" },
  { name: "nftables", namespace: "meshcni" },
];

function caseFiles(name: string) {
  const values = `testdata/manifests/${name}.values.yaml`;
  const args = readFileSync(repoPath(`testdata/manifests/${name}.args`), "utf8")
    .split("\n")
    .filter((l) => l !== "");
  return { values, args };
}

const DIGEST = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const daemonSet = (objs: Obj[]) => objs.find((o) => o.kind === "DaemonSet")!;
const podSpec = (objs: Obj[]) => daemonSet(objs).spec.template.spec;

/**
 * Value sets given to both `helm template` and `install-cni` as the same arguments: each new
 * value at least once, alone and combined, --set's syntax and types, files layered. `check`
 * asserts the value reached the objects (so a value both ignore cannot pass).
 */
const MATRIX: { name: string; namespace: string; args: string[]; check: (objs: Obj[]) => void }[] = [
  {
    name: "tolerations and nodeSelector by --set",
    namespace: "meshcni",
    args: [
      "--set",
      "tolerations[0].key=node-role.kubernetes.io/control-plane,tolerations[0].operator=Exists,tolerations[0].effect=NoSchedule",
      "--set",
      "tolerations[1].key=dedicated",
      "--set",
      "tolerations[1].value=mesh",
      "--set",
      "tolerations[1].tolerationSeconds=60",
      "--set-string",
      "nodeSelector.meshcni\\.io/enabled=true",
    ],
    check: (objs) => {
      expect(podSpec(objs).tolerations).toEqual([
        { key: "node-role.kubernetes.io/control-plane", operator: "Exists", effect: "NoSchedule" },
        { key: "dedicated", value: "mesh", tolerationSeconds: 60 },
      ]);
      expect(podSpec(objs).nodeSelector).toEqual({ "kubernetes.io/os": "linux", "meshcni.io/enabled": "true" });
    },
  },
  {
    name: "affinity, imagePullSecrets, revisionHistoryLimit, no priority class",
    namespace: "mesh-system",
    args: [
      "--set",
      "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=kubernetes.io/arch",
      "--set",
      "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=In",
      "--set",
      "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values={amd64,arm64}",
      "--set",
      "imagePullSecrets[0].name=regcred,imagePullSecrets[1].name=mirror",
      "--set",
      "revisionHistoryLimit=0",
      "--set",
      "priorityClassName=",
    ],
    check: (objs) => {
      const pod = podSpec(objs);
      expect(
        pod.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]
          .matchExpressions[0].values,
      ).toEqual(["amd64", "arm64"]);
      expect(pod.imagePullSecrets).toEqual([{ name: "regcred" }, { name: "mirror" }]);
      expect(pod.priorityClassName).toBeUndefined();
      expect(daemonSet(objs).spec.revisionHistoryLimit).toBe(0);
    },
  },
  {
    name: "commonLabels and podLabels",
    namespace: "meshcni",
    args: [
      "--set",
      "createNamespace=true",
      "--set",
      "commonLabels.team=network,commonLabels.example\\.com/tier=infra",
      "--set",
      "podLabels.team=mesh-node",
      "--set-string",
      "podLabels.version=2",
    ],
    check: (objs) => {
      expect(objs.map((o) => o.kind)[0]).toBe("Namespace");
      for (const o of objs)
        expect(o.metadata.labels).toMatchObject({
          team: "network",
          "example.com/tier": "infra",
          "meshcni.io/cni-resource": "true",
        });
      const pod = daemonSet(objs).spec.template.metadata.labels;
      expect(pod).toMatchObject({
        team: "mesh-node",
        version: "2",
        "example.com/tier": "infra",
        "app.kubernetes.io/component": "node",
      });
      expect(daemonSet(objs).spec.selector.matchLabels).toEqual({
        "app.kubernetes.io/name": "meshcni",
        "app.kubernetes.io/component": "node",
      });
    },
  },
  {
    name: "resources and a percentage maxUnavailable",
    namespace: "meshcni",
    args: [
      "--set",
      "resources.limits.cpu=1,resources.limits.memory=128Mi",
      "--set",
      "resources.requests.cpu=250m",
      "--set",
      "updateStrategy.rollingUpdate.maxUnavailable=10%",
    ],
    check: (objs) => {
      expect(podSpec(objs).containers[0].resources).toEqual({
        requests: { cpu: "250m", memory: "40Mi" },
        limits: { cpu: 1, memory: "128Mi" },
      });
      expect(daemonSet(objs).spec.updateStrategy).toEqual({
        type: "RollingUpdate",
        rollingUpdate: { maxUnavailable: "10%" },
      });
    },
  },
  {
    name: "OnDelete, and null removing defaults",
    namespace: "meshcni",
    args: [
      "--set",
      "updateStrategy.type=OnDelete,updateStrategy.rollingUpdate=null",
      "--set",
      "tolerations=null",
      "--set",
      "nodeSelector=null",
      "--set",
      "resources=null",
    ],
    check: (objs) => {
      expect(daemonSet(objs).spec.updateStrategy).toEqual({ type: "OnDelete" });
      expect(podSpec(objs).tolerations).toBeUndefined();
      expect(podSpec(objs).nodeSelector).toBeUndefined();
      expect(podSpec(objs).containers[0].resources).toBeUndefined();
    },
  },
  {
    name: "repair delete: delete on pods instead of create on pods/eviction",
    namespace: "meshcni",
    args: ["--set", "repair=delete"],
    check: (objs) => {
      expect(podSpec(objs).containers[0].args.slice(-1)).toEqual(["--repair=delete"]);
      expect(objs.find((o) => o.kind === "ClusterRole")!.rules.slice(2)).toEqual([
        { apiGroups: [""], resources: ["pods"], verbs: ["delete"] },
        { apiGroups: [""], resources: ["events"], verbs: ["create"] },
      ]);
    },
  },
  {
    name: "repair off and a startup taint, its toleration kept when tolerations are removed",
    namespace: "meshcni",
    args: ["--set", "repair=off", "--set", "startupTaint=meshcni.io/agent-not-ready", "--set", "tolerations=null"],
    check: (objs) => {
      expect(podSpec(objs).tolerations).toEqual([{ key: "meshcni.io/agent-not-ready", operator: "Exists" }]);
      expect(podSpec(objs).containers[0].args.slice(-2)).toEqual([
        "--repair=off",
        "--startup-taint=meshcni.io/agent-not-ready",
      ]);
      expect(objs.find((o) => o.kind === "ClusterRole" && o.metadata.name === "meshcni")!.rules).toEqual([
        { apiGroups: [""], resources: ["pods", "namespaces"], verbs: ["get", "list", "watch"] },
        { apiGroups: [""], resources: ["nodes"], verbs: ["get", "patch"] },
      ]);
      // The plugin's role does not follow repair or the taint: it only ever reads.
      expect(objs.find((o) => o.kind === "ClusterRole" && o.metadata.name === "meshcni-plugin")!.rules).toEqual([
        { apiGroups: [""], resources: ["pods", "namespaces"], verbs: ["get"] },
        { apiGroups: [""], resources: ["services"], resourceNames: ["kubernetes"], verbs: ["get"] },
      ]);
    },
  },
  {
    name: "agentApplies false: the capability-free DaemonSet, the agent told so",
    namespace: "meshcni",
    args: ["--set", "agentApplies=false"],
    check: (objs) => {
      const c = podSpec(objs).containers[0];
      expect(c.securityContext.capabilities).toEqual({ drop: ["ALL"] });
      expect(c.args).toContain("--agent-applies=false");
    },
  },
  {
    name: "the host check's mounts without recursiveReadOnly (API servers before 1.30)",
    namespace: "meshcni",
    args: ["--set", "hostMounts.recursiveReadOnly="],
    check: (objs) => {
      const mounts = podSpec(objs).containers[0].volumeMounts.filter((m: Obj) => m.mountPath.startsWith("/host/root/"));
      expect(mounts.map((m: Obj) => m.mountPath)).toEqual([
        "/host/root/usr",
        "/host/root/lib",
        "/host/root/lib64",
        "/host/root/etc/ld.so.cache",
      ]);
      for (const m of mounts) expect(m).toEqual({ name: m.name, mountPath: m.mountPath, readOnly: true });
    },
  },
  {
    name: "recursiveReadOnly Enabled",
    namespace: "meshcni",
    args: ["--set", "hostMounts.recursiveReadOnly=Enabled"],
    check: (objs) => {
      const mounts = podSpec(objs).containers[0].volumeMounts.filter((m: Obj) => m.mountPath.startsWith("/host/root/"));
      expect(mounts.map((m: Obj) => m.recursiveReadOnly)).toEqual(["Enabled", "Enabled", "Enabled", "Enabled"]);
    },
  },
  {
    name: "image by digest",
    namespace: "meshcni",
    args: ["--set", `digest=${DIGEST}`, "--set", "hub=registry.example.com/mesh", "--set", "tag=ignored"],
    check: (objs) => expect(podSpec(objs).containers[0].image).toBe(`registry.example.com/mesh/meshcni@${DIGEST}`),
  },
  {
    name: "image wins over digest",
    namespace: "meshcni",
    args: ["--set", `digest=${DIGEST}`, "--set", "image=registry.example.com/meshcni:v2"],
    check: (objs) => expect(podSpec(objs).containers[0].image).toBe("registry.example.com/meshcni:v2"),
  },
  {
    name: "two values files and --set over them",
    namespace: "layers",
    args: [
      "-f",
      "testdata/manifests/layer-a.values.yaml",
      "--values",
      "testdata/manifests/layer-b.values.yaml",
      "--set",
      "commonLabels.layer=set",
      "--set",
      "revisionHistoryLimit=7",
    ],
    check: (objs) => {
      expect(objs[0]!.metadata.labels).toMatchObject({ team: "b", layer: "set" });
      expect(podSpec(objs).tolerations).toEqual([{ key: "b", operator: "Exists" }]);
      expect(podSpec(objs).nodeSelector).toEqual({ pool: "a" });
      expect(podSpec(objs).containers[0].resources).toEqual({ limits: { memory: "64Mi" } });
      expect(daemonSet(objs).spec.revisionHistoryLimit).toBe(7);
    },
  },
  {
    name: "every new value at once (the golden's values file)",
    namespace: "meshcni",
    args: ["--values", "testdata/manifests/rich.values.yaml"],
    check: (objs) => {
      const pod = podSpec(objs);
      expect(pod.containers[0].image).toBe(
        "registry.example.com/mesh/meshcni@sha256:4f1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8f9",
      );
      expect(pod.tolerations.length).toBe(2);
      expect(Object.keys(pod.affinity).sort()).toEqual(["nodeAffinity", "podAntiAffinity"]);
      expect(daemonSet(objs).spec.template.metadata.labels.team).toBe("mesh-node");
      expect(daemonSet(objs).metadata.labels.team).toBe("network");
    },
  },
  {
    name: "a plugin setting and a chart value together, istio",
    namespace: "istio-cni",
    args: [
      "--set",
      "mesh=istio",
      "--set",
      "excludeNamespaces={kube-system,istio-system,monitoring}",
      "--set",
      "inboundPort=15006",
      "--set",
      "commonLabels.mesh=istio",
    ],
    check: (objs) => {
      const entry = JSON.parse(objs.find((o) => o.kind === "ConfigMap")!.data["plugin-config.json"]);
      expect(entry.mesh).toBe("istio");
      expect(entry.kubernetes.exclude_namespaces).toEqual(["kube-system", "istio-system", "monitoring"]);
      expect(entry.istio["inbound-capture-port"]).toBe(15006);
    },
  },
];

describe("helm chart", () => {
  test("Chart.yaml's appVersion and values.yaml's defaults are meshcnictl's", () => {
    const chart = parse(readFileSync(repoPath("manifests/Chart.yaml"), "utf8"));
    expect(chart.appVersion).toBe(pkg.version);
    const values = parse(readFileSync(repoPath("manifests/values.yaml"), "utf8"));
    expect(parseValues(values)).toEqual(parseValues({}));
    expect(Object.keys(values).sort()).toEqual(
      Object.keys(parseValues({}))
        .filter((k) => k !== "namespace")
        .sort(),
    );
  });

  for (const c of CASES) {
    test(`helm lint --strict is clean (${c.name})`, () => {
      const r = runHelm(["lint", "--strict", "manifests", "-f", caseFiles(c.name).values, "--namespace", c.namespace]);
      expect(r.stderr).toBe("");
      expect(r.stdout).toContain("0 chart(s) failed");
      expect(r.stdout).not.toMatch(/\[(WARNING|ERROR)\]/);
      expect(r.code).toBe(0);
    });

    test(`helm template equals install-cni (${c.name})`, () => {
      const { values, args } = caseFiles(c.name);
      const h = runHelm(["template", "meshcni", "manifests", "--namespace", c.namespace, "-f", values]);
      expect(h.stderr).toBe("");
      expect(h.code).toBe(0);
      const cli = runCli(["install-cni", ...args]);
      expect(cli.code).toBe(0);
      const fromHelm = docs(h.stdout);
      let fromCli = docs(cli.stdout);
      if (c.name === "default") {
        // The chart leaves the namespace to `helm install --create-namespace`; meshcnictl renders it.
        expect(fromCli[0]!.kind).toBe("Namespace");
        fromCli = fromCli.slice(1);
      }
      expect(fromHelm).toEqual(fromCli);
      expect(fromHelm.length).toBe(c.name === "default" ? 10 : 11);
    });
  }

  for (const m of MATRIX) {
    test(`helm template equals install-cni for the same --set/--values (${m.name})`, () => {
      const h = runHelm(["template", "meshcni", "manifests", "--namespace", m.namespace, ...m.args]);
      expect(h.stderr).toBe("");
      expect(h.code).toBe(0);
      const cli = runCli(["install-cni", "--namespace", m.namespace, ...m.args]);
      expect(cli.stderr).toBe("");
      expect(cli.code).toBe(0);
      const fromHelm = docs(h.stdout);
      let fromCli = docs(cli.stdout);
      // meshcnictl renders the Namespace unless told not to; the chart only when told to.
      if (fromHelm[0]!.kind !== "Namespace" && fromCli[0]!.kind === "Namespace") fromCli = fromCli.slice(1);
      expect(fromHelm).toEqual(fromCli);
      for (const o of fromHelm) validateObject(o);
      m.check(fromHelm);
    });
  }

  test("values the CLI refuses, helm refuses too", () => {
    const bad: [string[], string][] = [
      [["--set", "inboundPort=70000"], "inboundPort"],
      [["--set", "mesh=consul"], "mesh"],
      [["--set", "cniConfDir=etc/cni"], "cniConfDir"],
      [["--set", "platform=eks"], "platform"],
      [["--set", "mesh=istio", "--set", "ipv6=true"], "linkerd only"],
      [["--set", "tolerations[0].operator=Sometimes"], "tolerations"],
      [["--set", "tolerations[0].keys=a"], "tolerations"],
      [["--set", "commonLabels.app\\.kubernetes\\.io/name=other"], "commonLabels"],
      [["--set", "podLabels.bad label=x"], "podLabels"],
      [["--set", "updateStrategy.type=OnDelete"], "updateStrategy"],
      [["--set", "updateStrategy.rollingUpdate.maxUnavailable=ten"], "updateStrategy"],
      [["--set", "resources.limits.cpu=lots"], "resources"],
      [["--set", "resources.claims[0].name=x"], "resources"],
      [["--set", "revisionHistoryLimit=-1"], "revisionHistoryLimit"],
      [["--set", "digest=sha256:abc"], "digest"],
      [["--set", "imagePullSecrets[0]=regcred"], "imagePullSecrets"],
      [["--set", "affinity.nodeAfinity.x=1"], "affinity"],
      [["--set", "nodeSelector.a=1"], "nodeSelector"],
      [["--set", "noSuchValue=1"], "noSuchValue"],
      [["--set", "repair=rewrite"], "repair"],
    ];
    for (const [set, word] of bad) {
      const r = runHelm(["template", "meshcni", "manifests", ...set]);
      expect([set, r.code]).not.toEqual([set, 0]);
      expect(r.stderr).toContain(word);
      const cli = runCli(["install-cni", ...set]);
      expect([set, cli.code]).toEqual([set, 2]);
      expect(cli.stdout).toBe("");
      expect(cli.stderr).toContain(word);
    }
  });
});
