// `meshcnictl install-cni` and `uninstall-cni`, run as the compiled binary: goldens for the
// default, a fully configured set of flags, Istio and each --platform; every object checked
// against Kubernetes' schemas and for the properties meshcni promises; bad flags refused
// before anything reaches stdout.
import { beforeAll, describe, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { defaultPluginEntry, renderEntryJson } from "../../internal/config/entry.ts";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import { expectGolden, repoPath } from "../support/golden.ts";
import { validateObject } from "./k8s-schemas.ts";
import { ensureCli, runCli } from "./support.ts";

type Obj = Record<string, any>;
const DIR = "testdata/cli/install-cni";
const cases = readdirSync(repoPath(DIR))
  .filter((f) => f.endsWith(".args"))
  .map((f) => f.slice(0, -5))
  .sort();

function argsOf(name: string): string[] {
  return readFileSync(repoPath(DIR, `${name}.args`), "utf8")
    .split("\n")
    .filter((l) => l !== "");
}

function parseStream(text: string): Obj[] {
  return parseAllDocuments(text)
    .map((d) => {
      if (d.errors.length) throw new Error(d.errors[0]!.message);
      return d.toJS() as Obj;
    })
    .filter(Boolean);
}

function objectsOf(stdout: string, json: boolean): Obj[] {
  return json ? (JSON.parse(stdout) as Obj).items : parseStream(stdout);
}

const daemonSet = (objs: Obj[]) => objs.find((o) => o.kind === "DaemonSet")!;
const container = (objs: Obj[]) => daemonSet(objs).spec.template.spec.containers[0];
const entryOf = (objs: Obj[]) => JSON.parse(objs.find((o) => o.kind === "ConfigMap")!.data["plugin-config.json"]);

beforeAll(async () => {
  await ensureCli();
});

describe("install-cni goldens", () => {
  for (const name of cases) {
    test(name, () => {
      const args = argsOf(name);
      const json = args.includes("json");
      const r = runCli(["install-cni", ...args]);
      expect(r.stderr).toBe("");
      expect(r.code).toBe(0);
      expectGolden(`${DIR}/${name}.golden.${json ? "json" : "yaml"}`, r.stdout);
      const objs = objectsOf(r.stdout, json);
      // A namespace other than meshcni's own is someone else's unless --create-namespace says otherwise.
      const ownNamespace = !args.includes("--namespace") || args.includes("--create-namespace");
      expect(objs.map((o) => o.kind)).toEqual([
        ...(ownNamespace ? ["Namespace"] : []),
        "ServiceAccount",
        "ServiceAccount",
        "ConfigMap",
        "ClusterRole",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "DaemonSet",
      ]);
      for (const o of objs) {
        validateObject(o);
        expect(o.metadata.labels["meshcni.io/cni-resource"]).toBe("true");
        expect(o.metadata.labels["app.kubernetes.io/name"]).toBe("meshcni");
        expect(o.metadata.labels["app.kubernetes.io/part-of"]).toBe("meshcni");
        expect(typeof o.metadata.labels["app.kubernetes.io/version"]).toBe("string");
      }
      // The entry is one the plugin accepts, as a runtime would hand it over.
      const conf = parsePluginConf(JSON.stringify({ cniVersion: "1.0.0", ...entryOf(objs) }));
      expect(conf.type).toBe("meshcni");
    });
  }
});

describe("install-cni objects", () => {
  test("the default entry is the contract's", () => {
    const objs = parseStream(runCli(["install-cni"]).stdout);
    expect(objs.find((o) => o.kind === "ConfigMap")!.data["plugin-config.json"]).toBe(
      renderEntryJson(defaultPluginEntry()),
    );
    const istio = parseStream(runCli(["install-cni", "--mesh", "istio"]).stdout);
    expect(entryOf(istio)).toEqual(defaultPluginEntry("istio"));
  });

  test("--agent-applies=false: the capability-free DaemonSet, and the agent told so", () => {
    for (const flag of [["--agent-applies=false"], ["--agent-applies", "false"], ["--set", "agentApplies=false"]]) {
      const objs = parseStream(runCli(["install-cni", ...flag]).stdout);
      const c = container(objs);
      expect(c.securityContext.capabilities).toEqual({ drop: ["ALL"] });
      expect(c.securityContext.privileged).toBe(false);
      expect(c.args).toContain("--agent-applies=false");
    }
    const bad = runCli(["install-cni", "--agent-applies", "maybe"]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("agent-applies");
  });

  test("the DaemonSet runs the agent unprivileged on every Linux node, with exactly NET_ADMIN and SYS_ADMIN", () => {
    const objs = parseStream(runCli(["install-cni"]).stdout);
    const ds = daemonSet(objs);
    const pod = ds.spec.template.spec;
    const c = container(objs);
    expect(pod.tolerations).toEqual([{ operator: "Exists" }]);
    expect(pod.nodeSelector).toEqual({ "kubernetes.io/os": "linux" });
    expect(pod.priorityClassName).toBe("system-node-critical");
    expect(pod.securityContext.seccompProfile).toEqual({ type: "RuntimeDefault" });
    expect(pod.hostNetwork).toBeUndefined();
    expect(c.command).toEqual(["/opt/meshcni/meshcni-installer"]);
    expect(c.securityContext).toMatchObject({
      privileged: false,
      allowPrivilegeEscalation: false,
      readOnlyRootFilesystem: true,
      runAsUser: 0,
      capabilities: { drop: ["ALL"], add: ["NET_ADMIN", "SYS_ADMIN"] },
    });
    expect(c.args).not.toContain("--agent-applies=false");
    expect(c.livenessProbe.httpGet).toEqual({ path: "/healthz", port: "health" });
    expect(c.readinessProbe.httpGet).toEqual({ path: "/readyz", port: "health" });
    expect(c.ports).toEqual([{ name: "health", containerPort: 9813, protocol: "TCP" }]);
    expect(c.args).toEqual(
      expect.arrayContaining(["--health-port", "9813", "--plugin-config", "/etc/meshcni/plugin-config.json"]),
    );
    // No preStop: a restart leaves the node meshed; the agent decides on SIGTERM.
    expect(c.lifecycle).toBeUndefined();
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(30);
    expect(c.env).toContainEqual({
      name: "POD_NAMESPACE",
      valueFrom: { fieldRef: { fieldPath: "metadata.namespace" } },
    });
    expect(c.env).toContainEqual({ name: "NODE_NAME", valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } } });
    const mounts = Object.fromEntries(c.volumeMounts.map((m: Obj) => [m.name, m.mountPath]));
    const vols = Object.fromEntries(pod.volumes.map((v: Obj) => [v.name, v.hostPath?.path]));
    expect(mounts["cni-net-dir"]).toBe("/host/etc/cni/net.d");
    expect(mounts["cni-bin-dir"]).toBe("/host/opt/cni/bin");
    expect(vols["cni-net-dir"]).toBe("/etc/cni/net.d");
    expect(vols["cni-bin-dir"]).toBe("/opt/cni/bin");
    // The agent's folder: the host's /var/run/meshcni at the same path, named in the flags.
    expect(mounts["agent-state"]).toBe("/var/run/meshcni");
    expect(pod.volumes.find((v: Obj) => v.name === "agent-state").hostPath).toEqual({
      path: "/var/run/meshcni",
      type: "DirectoryOrCreate",
    });
    expect(c.args).toEqual(
      expect.arrayContaining(["--agent-socket", "/var/run/meshcni/agent.sock", "--state-dir", "/var/run/meshcni"]),
    );
    // The host's network namespaces, read-only at the same path (--netns-dir's default), new ones propagated.
    expect(c.volumeMounts).toContainEqual({
      name: "host-netns",
      mountPath: "/var/run/netns",
      readOnly: true,
      mountPropagation: "HostToContainer",
    });
    expect(pod.volumes).toContainEqual({
      name: "host-netns",
      hostPath: { path: "/var/run/netns", type: "DirectoryOrCreate" },
    });
    // For the host check, only the host paths it reads, each read-only under /host/root
    // (recursively where the runtime can); no hostPath of / and nothing else of /etc, /var or
    // /proc; and both plugin builds as candidates.
    const hostCheck = [
      ["host-usr", "/usr", "DirectoryOrCreate"],
      ["host-lib", "/lib", "DirectoryOrCreate"],
      ["host-lib64", "/lib64", "DirectoryOrCreate"],
      ["host-etc-ld-so-cache", "/etc/ld.so.cache", "FileOrCreate"],
    ];
    for (const [name, path, type] of hostCheck) {
      expect(c.volumeMounts).toContainEqual({
        name,
        mountPath: `/host/root${path}`,
        readOnly: true,
        recursiveReadOnly: "IfPossible",
      });
      expect(pod.volumes).toContainEqual({ name, hostPath: { path, type } });
    }
    const hostPaths = pod.volumes.filter((v: Obj) => v.hostPath).map((v: Obj) => v.hostPath.path);
    expect(hostPaths).toEqual([
      "/opt/cni/bin",
      "/etc/cni/net.d",
      "/var/run/meshcni",
      "/var/run/netns",
      "/usr",
      "/lib",
      "/lib64",
      "/etc/ld.so.cache",
    ]);
    // Read-write: the CNI folders and the agent's folder (and the container's own /tmp).
    const writable = c.volumeMounts.filter(
      (m: Obj) => !m.readOnly && pod.volumes.find((v: Obj) => v.name === m.name).hostPath,
    );
    expect(writable.map((m: Obj) => m.name)).toEqual(["cni-bin-dir", "cni-net-dir", "agent-state"]);
    expect(c.args).toEqual(expect.arrayContaining(["--plugin-binary", "/opt/meshcni/meshcni"]));
  });

  test("RBAC: the ClusterRole reads and watches pods and namespaces, reads nodes, and (repair in-place by default) evicts pods it cannot reach and creates events, never deletes; the Role reads the agent's own DaemonSet and creates tokens of the plugin's account alone", () => {
    const objs = parseStream(runCli(["install-cni", "--namespace", "mesh-system"]).stdout);
    const role = objs.find((o) => o.kind === "ClusterRole" && o.metadata.name === "meshcni")!;
    expect(role.rules).toEqual([
      { apiGroups: [""], resources: ["pods", "namespaces"], verbs: ["get", "list", "watch"] },
      { apiGroups: [""], resources: ["nodes"], verbs: ["get"] },
      { apiGroups: [""], resources: ["pods/eviction"], verbs: ["create"] },
      { apiGroups: [""], resources: ["events"], verbs: ["create"] },
    ]);
    const args = objs.find((o) => o.kind === "DaemonSet")!.spec.template.spec.containers[0].args;
    expect(args.slice(-1)).toEqual(["--repair=in-place"]);
    const own = objs.find((o) => o.kind === "Role")!;
    expect(own.metadata.namespace).toBe("mesh-system");
    expect(own.rules).toEqual([
      { apiGroups: ["apps"], resources: ["daemonsets"], resourceNames: ["meshcni-node"], verbs: ["get"] },
      { apiGroups: [""], resources: ["serviceaccounts/token"], resourceNames: ["meshcni-plugin"], verbs: ["create"] },
    ]);
    const binding = objs.find((o) => o.kind === "RoleBinding")!;
    expect(binding.roleRef).toEqual({ apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: own.metadata.name });
    expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: "meshcni", namespace: "mesh-system" }]);
    // Nothing else writes, nothing else is read.
    for (const r of [...role.rules.slice(0, 2), own.rules[0]])
      expect(r.verbs.every((v: string) => ["get", "list", "watch"].includes(v))).toBe(true);
  });

  test("RBAC: the plugin's own account reads a pod, a namespace and the Service kubernetes, and nothing else; no pod mounts its token", () => {
    for (const args of [
      ["--namespace", "mesh-system"],
      ["--namespace", "mesh-system", "--startup-taint", "meshcni.io/agent-not-ready"],
      ["--namespace", "mesh-system", "--repair", "off"],
    ]) {
      const objs = parseStream(runCli(["install-cni", ...args]).stdout);
      const sa = objs.find((o) => o.kind === "ServiceAccount" && o.metadata.name === "meshcni-plugin")!;
      expect(sa.metadata.namespace).toBe("mesh-system");
      expect(sa.automountServiceAccountToken).toBe(false);
      const role = objs.find((o) => o.kind === "ClusterRole" && o.metadata.name === "meshcni-plugin")!;
      expect(role.rules).toEqual([
        { apiGroups: [""], resources: ["pods", "namespaces"], verbs: ["get"] },
        { apiGroups: [""], resources: ["services"], resourceNames: ["kubernetes"], verbs: ["get"] },
      ]);
      const binding = objs.find((o) => o.kind === "ClusterRoleBinding" && o.metadata.name === "meshcni-plugin")!;
      expect(binding.roleRef).toEqual({
        apiGroup: "rbac.authorization.k8s.io",
        kind: "ClusterRole",
        name: "meshcni-plugin",
      });
      expect(binding.subjects).toEqual([{ kind: "ServiceAccount", name: "meshcni-plugin", namespace: "mesh-system" }]);
      // Bound to nothing else, and the DaemonSet runs as the agent's account.
      const bound = objs.filter(
        (o) => /Binding$/.test(o.kind) && o.subjects.some((s: Obj) => s.name === "meshcni-plugin"),
      );
      expect(bound.map((o) => o.metadata.name)).toEqual(["meshcni-plugin"]);
      expect(objs.find((o) => o.kind === "DaemonSet")!.spec.template.spec.serviceAccountName).toBe("meshcni");
    }
  });

  test("RBAC grows only by what repair and the startup taint need: --repair delete deletes pods (no eviction), --repair off reads only, in-place (the default) writes in place and evicts what it cannot reach; --startup-taint patches nodes and reaches the agent", () => {
    const del = parseStream(runCli(["install-cni", "--repair", "delete"]).stdout);
    expect(del.find((o) => o.kind === "ClusterRole")!.rules.slice(2)).toEqual([
      { apiGroups: [""], resources: ["pods"], verbs: ["delete"] },
      { apiGroups: [""], resources: ["events"], verbs: ["create"] },
    ]);
    expect(del.find((o) => o.kind === "DaemonSet")!.spec.template.spec.containers[0].args.slice(-1)).toEqual([
      "--repair=delete",
    ]);
    for (const args of [[], ["--repair", "in-place"]]) {
      const inPlace = parseStream(runCli(["install-cni", ...args]).stdout);
      expect(inPlace.find((o) => o.kind === "ClusterRole")!.rules.slice(2)).toEqual([
        { apiGroups: [""], resources: ["pods/eviction"], verbs: ["create"] },
        { apiGroups: [""], resources: ["events"], verbs: ["create"] },
      ]);
      expect(inPlace.find((o) => o.kind === "DaemonSet")!.spec.template.spec.containers[0].args).toContain(
        "--repair=in-place",
      );
    }
    const off = parseStream(runCli(["install-cni", "--repair", "off"]).stdout);
    expect(off.find((o) => o.kind === "ClusterRole")!.rules).toEqual([
      { apiGroups: [""], resources: ["pods", "namespaces"], verbs: ["get", "list", "watch"] },
      { apiGroups: [""], resources: ["nodes"], verbs: ["get"] },
    ]);
    const tainted = parseStream(
      runCli(["install-cni", "--repair", "off", "--startup-taint", "meshcni.io/agent-not-ready"]).stdout,
    );
    expect(tainted.find((o) => o.kind === "ClusterRole")!.rules[1]).toEqual({
      apiGroups: [""],
      resources: ["nodes"],
      verbs: ["get", "patch"],
    });
    const spec = tainted.find((o) => o.kind === "DaemonSet")!.spec.template.spec;
    expect(spec.containers[0].args.slice(-2)).toEqual(["--repair=off", "--startup-taint=meshcni.io/agent-not-ready"]);
    // The startup taint is tolerated by name too, so narrower tolerations never lock the agent out.
    expect(spec.tolerations).toEqual([
      { operator: "Exists" },
      { key: "meshcni.io/agent-not-ready", operator: "Exists" },
    ]);
    const narrow = parseStream(
      runCli([
        "install-cni",
        "--startup-taint",
        "meshcni.io/agent-not-ready",
        "--set",
        "tolerations[0].key=dedicated,tolerations[0].operator=Exists",
      ]).stdout,
    );
    expect(narrow.find((o) => o.kind === "DaemonSet")!.spec.template.spec.tolerations).toEqual([
      { key: "dedicated", operator: "Exists" },
      { key: "meshcni.io/agent-not-ready", operator: "Exists" },
    ]);
    const bad = runCli(["install-cni", "--startup-taint", "not a key"]);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toContain("--startup-taint");
  });

  test("strings YAML 1.1 reads as booleans or numbers (kubectl does) are quoted: an annotation of on, off, yes, no stays a string", () => {
    const r = runCli([
      "install-cni",
      "--pod-annotation",
      "a=on",
      "--pod-annotation",
      "b=off",
      "--pod-annotation",
      "c=yes",
      "--pod-annotation",
      "d=NO",
      "--pod-annotation",
      "e=1_000",
    ]);
    expect(r.code).toBe(0);
    for (const line of ['a: "on"', 'b: "off"', 'c: "yes"', 'd: "NO"', 'e: "1_000"']) expect(r.stdout).toContain(line);
    const ds = parseAllDocuments(r.stdout, { version: "1.1" })
      .map((d) => d.toJS())
      .find((o) => o?.kind === "DaemonSet");
    expect(ds.spec.template.metadata.annotations).toMatchObject({ a: "on", b: "off", c: "yes", d: "NO", e: "1_000" });
  });

  test("flags reach the entry and the DaemonSet", () => {
    const objs = parseStream(runCli(["install-cni", ...argsOf("fully-configured")]).stdout);
    const e = entryOf(objs);
    expect(e.log_level).toBe("debug");
    expect(e.kubernetes).toEqual({
      kubeconfig: "/etc/kubernetes/cni/net.d/ZZZ-meshcni-kubeconfig",
      exclude_namespaces: ["kube-system", "monitoring"],
    });
    expect(e.linkerd).toEqual({
      "incoming-proxy-port": 5143,
      "outgoing-proxy-port": 5140,
      "proxy-uid": 12102,
      "proxy-gid": 12102,
      "ports-to-redirect": [8080, 9090],
      "inbound-ports-to-ignore": ["4191", "4190", "80", "8080", "9000-9100"],
      "outbound-ports-to-ignore": ["443", "1000"],
      "use-wait-flag": true,
      "iptables-mode": "nft",
      ipv6: true,
    });
    const c = container(objs);
    expect(c.image).toBe("my-docker-registry.io/awesome/meshcni:v1.4.0");
    expect(c.imagePullPolicy).toBe("Always");
    expect(c.args).toEqual(
      expect.arrayContaining(["--conf-name", "10-calico.conflist", "--dest-net-dir", "/etc/kubernetes/cni/net.d"]),
    );
    expect(daemonSet(objs).metadata.namespace).toBe("linkerd-cni");
    expect(daemonSet(objs).spec.template.metadata.annotations["example.com/team"]).toBe("network");
  });

  test("--iptables-mode nftables reaches the mesh section of either mesh", () => {
    expect(
      entryOf(parseStream(runCli(["install-cni", "--iptables-mode", "nftables"]).stdout)).linkerd["iptables-mode"],
    ).toBe("nftables");
    expect(
      entryOf(parseStream(runCli(["install-cni", "--mesh", "istio", "--iptables-mode", "nftables"]).stdout)).istio[
        "iptables-mode"
      ],
    ).toBe("nftables");
  });

  test("platform presets choose the host folders", () => {
    const dirs = (platform: string) => {
      const pod = daemonSet(parseStream(runCli(["install-cni", "--platform", platform]).stdout)).spec.template.spec;
      return Object.fromEntries(
        pod.volumes.filter((v: Obj) => v.name.startsWith("cni-")).map((v: Obj) => [v.name, v.hostPath.path]),
      );
    };
    expect(dirs("gke")).toEqual({ "cni-bin-dir": "/home/kubernetes/bin", "cni-net-dir": "/etc/cni/net.d" });
    expect(dirs("openshift")).toEqual({
      "cni-bin-dir": "/var/lib/cni/bin",
      "cni-net-dir": "/var/run/multus/cni/net.d",
    });
    expect(dirs("k3s")).toEqual({
      "cni-bin-dir": "/var/lib/rancher/k3s/data/cni",
      "cni-net-dir": "/var/lib/rancher/k3s/agent/etc/cni/net.d",
    });
    // An explicit folder wins over the preset.
    const pod = daemonSet(
      parseStream(runCli(["install-cni", "--platform", "gke", "--dest-cni-bin-dir", "/opt/x/bin/"]).stdout),
    ).spec.template.spec;
    expect(pod.volumes.find((v: Obj) => v.name === "cni-bin-dir").hostPath.path).toBe("/opt/x/bin");
  });

  test("rendering is deterministic", () => {
    const a = runCli(["install-cni", ...argsOf("fully-configured")]).stdout;
    expect(runCli(["install-cni", ...argsOf("fully-configured")]).stdout).toBe(a);
  });
});

describe("install-cni --set and --values", () => {
  test("--values files merge in order, --set goes over them, both over the flags", () => {
    const objs = parseStream(
      runCli([
        "install-cni",
        "--inbound-port",
        "5000",
        "--outbound-port",
        "5001",
        "--image",
        "example.com/flag:1",
        "-f",
        "testdata/manifests/layer-a.values.yaml",
        "-f",
        "testdata/manifests/layer-b.values.yaml",
        "--set",
        "inboundPort=6000",
        "--set",
        "revisionHistoryLimit=9",
        "--set-string",
        "commonLabels.layer=1",
        "--set",
        "commonLabels.layer=ignored",
      ]).stdout,
    );
    const entry = entryOf(objs);
    expect([entry.linkerd["incoming-proxy-port"], entry.linkerd["outgoing-proxy-port"]]).toEqual([6000, 5001]);
    expect(container(objs).image).toBe("example.com/flag:1");
    expect(daemonSet(objs).spec.revisionHistoryLimit).toBe(9);
    // --set-string comes after every --set, as in Helm.
    expect(objs[0]!.metadata.labels).toMatchObject({ team: "b", layer: "1" });
    expect(daemonSet(objs).spec.template.spec.nodeSelector).toEqual({ pool: "a" });
  });

  test("--set createNamespace=false leaves the Namespace out; --values - reads stdin", () => {
    expect(parseStream(runCli(["install-cni", "--set", "createNamespace=false"]).stdout)[0]!.kind).toBe(
      "ServiceAccount",
    );
    const r = runCli(["install-cni", "--values", "-"], { stdin: "podLabels:\n  from: stdin\n" });
    expect(r.stderr).toBe("");
    expect(daemonSet(parseStream(r.stdout)).spec.template.metadata.labels.from).toBe("stdin");
  });
});

describe("install-cni refuses bad input before printing anything", () => {
  const bad: [string[], string][] = [
    [["--inbound-port", "70000"], '--inbound-port "70000": is not a TCP port (1-65535)'],
    [["--outbound-port", "http"], '--outbound-port "http": is not a TCP port'],
    [["--mesh", "consul"], '--mesh "consul": must be one of linkerd, istio'],
    [["--dest-cni-net-dir", "etc/cni/net.d"], '--dest-cni-net-dir "etc/cni/net.d": must be an absolute path'],
    [["--dest-cni-bin-dir", "../bin"], "--dest-cni-bin-dir"],
    [["--platform", "eks"], '--platform "eks": must be one of gke, openshift, k3s'],
    [["--cni-log-level", "loud"], '--cni-log-level "loud": must be one of debug, info, warn, error'],
    [["--iptables-mode", "ebpf"], '--iptables-mode "ebpf": must be one of auto, legacy, nft, plain, nftables'],
    [["--skip-inbound-ports", "80,http"], '--skip-inbound-ports "http": is not a port'],
    [["--skip-outbound-ports", "90-80"], '--skip-outbound-ports "90-80"'],
    [["--redirect-ports", "0"], '--redirect-ports "0": is not a TCP port'],
    [["--proxy-uid=-5"], '--proxy-uid "-5"'],
    [["--proxy-gid", "-1"], "--proxy-gid needs a value (write --proxy-gid=VALUE when the value starts with -)"],
    [["--ipv6=yes"], "--ipv6 takes no value"],
    [["--mesh", "istio", "--proxy-uid", "0"], '--proxy-uid "0": must be a user/group id (1-4294967294)'],
    [["--mesh", "istio", "--redirect-ports", "80"], "--redirect-ports applies to --mesh linkerd only"],
    [["--mesh", "istio", "--ipv6"], "--ipv6 applies to --mesh linkerd only"],
    [["--exclude-namespaces", "Kube_System"], '--exclude-namespaces "Kube_System": is not a namespace name'],
    [["--namespace", "My NS"], '--namespace "My NS"'],
    [["--image", "bad image"], '--image "bad image"'],
    [["--image-pull-policy", "Sometimes"], "--image-pull-policy"],
    [["--pod-annotation", "novalue"], '--pod-annotation "novalue": must be KEY=VALUE'],
    [["--health-port", "99999"], '--health-port "99999"'],
    [["-o", "xml"], '--output "xml": must be yaml or json'],
    [["--inbound-port"], "--inbound-port needs a value"],
    [["--no-such-flag"], "unknown flag --no-such-flag"],
    [["extra"], "install-cni takes no arguments"],
    [["--set", "nodeselector.a=b"], 'unknown value "nodeselector" (did you mean nodeSelector?)'],
    [["--set", "namespace=x"], "namespace is not a chart value; use --namespace"],
    [["--set", "tolerations[0].keys=a"], "tolerations.0.keys: unknown key"],
    [["--set", "podAnnotations.prometheus\\.io/scrape=true"], "use --set-string"],
    [["--set", "hub=null"], "hub: null would leave it without a value"],
    [["--set", "a[0"], '--set "a[0": a list index is not closed'],
    [["--set-string", "ipv6"], '--set-string "ipv6": key "ipv6" has no value'],
    [["--set", "mesh=istio", "--set", "redirectPorts={80}"], "redirectPorts: apply to mesh linkerd only"],
    [["--values", "testdata/manifests/no-such.values.yaml"], "--values testdata/manifests/no-such.values.yaml: ENOENT"],
    [
      ["--values", "testdata/manifests/linkerd-custom.args"],
      "--values testdata/manifests/linkerd-custom.args: must be a map of chart values",
    ],
  ];
  for (const [args, message] of bad) {
    test(args.join(" "), () => {
      const r = runCli(["install-cni", ...args]);
      expect(r.stdout).toBe("");
      expect(r.code).toBe(2);
      expect(r.stderr).toContain(message);
    });
  }
});

describe("uninstall-cni", () => {
  test("names every object install-cni creates, DaemonSet first", () => {
    const r = runCli(["uninstall-cni", "-n", "linkerd-cni", "--delete-namespace"]);
    expect(r.code).toBe(0);
    expectGolden(`${DIR}/../uninstall-cni/linkerd-cni.golden.yaml`, r.stdout);
    const gone = parseStream(r.stdout).map((o) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`);
    const made = parseStream(runCli(["install-cni", "-n", "linkerd-cni", "--create-namespace"]).stdout).map(
      (o) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`,
    );
    expect([...gone].sort()).toEqual([...made].sort());
    expect(gone[0]).toBe("DaemonSet/linkerd-cni/meshcni-node");
    expect(gone.at(-1)).toBe("Namespace//linkerd-cni");
  });
  test("a namespace meshcni did not create is never relabelled or deleted", () => {
    const ids = (stdout: string) =>
      parseStream(stdout).map((o) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`);
    // Someone else's namespace: install-cni renders no Namespace (no privileged Pod Security label,
    // no istio-injection: disabled) and uninstall-cni does not name it for deletion.
    const install = runCli(["install-cni", "-n", "team-a"]);
    expect(install.code).toBe(0);
    expect(ids(install.stdout).filter((id) => id.startsWith("Namespace/"))).toEqual([]);
    expect(install.stdout).not.toContain("pod-security.kubernetes.io/enforce");
    expect(install.stdout).not.toContain("istio-injection");
    const uninstall = runCli(["uninstall-cni", "-n", "team-a"]);
    expect(uninstall.code).toBe(0);
    expect(ids(uninstall.stdout).filter((id) => id.startsWith("Namespace/"))).toEqual([]);
    expect([...ids(uninstall.stdout)].sort()).toEqual([...ids(install.stdout)].sort());
    // meshcni's own namespace is created and removed with it.
    expect(ids(runCli(["install-cni"]).stdout)[0]).toBe("Namespace//meshcni");
    expect(ids(runCli(["uninstall-cni"]).stdout).at(-1)).toBe("Namespace//meshcni");
  });
  test("refuses a bad namespace", () => {
    const r = runCli(["uninstall-cni", "-n", "Bad_NS"]);
    expect([r.code, r.stdout]).toEqual([2, ""]);
    expect(r.stderr).toContain('--namespace "Bad_NS"');
  });
});
