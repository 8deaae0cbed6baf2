// `meshcnictl check [--pre | --pods]` against the stand-in API server (test/support/apiserver.ts),
// run as the compiled binary: healthy, missing, not-ready and forbidden clusters; node by node
// through the pod proxy to canned /status documents (testdata/cli/check/status/): bypassing
// pods, an unreachable agent, an agent older than repair; the mesh's CNI mode; `--pods` before
// and after repair; `-o json`; pre-install checks with and without permissions and with another
// mesh's CNI plugin; and the user's kubeconfig as kubectl reads it.
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { readFileSync } from "node:fs";
import {
  type ApiServer,
  type Handler,
  type PodProxyTarget,
  podProxyHandler,
  startApiServer,
} from "../support/apiserver.ts";
import { expectGolden, repoPath } from "../support/golden.ts";
import { ensureCli, runCli, runCliAsync } from "./support.ts";

type Obj = Record<string, any>;
const TOKEN = "check-test-token";
let api: ApiServer;
let tmp: string;
let kubeconfig: string;
let installed: Obj[];
/** meshcnictl's own version: agents of the same build report it. */
let cliVersion: string;
/** The pod proxy's routes ("meshcni/POD" to a canned /status, a forward, or a failing dial). */
const proxy = new Map<string, PodProxyTarget>();
const readJson = (name: string): Obj => JSON.parse(readFileSync(repoPath("testdata/cli/check", name), "utf8"));
/** A /status document from testdata/cli/check/status/, from an agent of meshcnictl's build unless it says otherwise. */
function statusDoc(file: string, node?: string): Obj {
  const doc = readJson(`status/${file}`);
  if (doc.version === "0.1.0") doc.version = cliVersion;
  if (node) doc.node = node;
  return doc;
}

const PLURAL: Record<string, string> = {
  Namespace: "namespaces",
  ServiceAccount: "serviceaccounts",
  ConfigMap: "configmaps",
  ClusterRole: "clusterroles",
  ClusterRoleBinding: "clusterrolebindings",
  Role: "roles",
  RoleBinding: "rolebindings",
  DaemonSet: "daemonsets",
};

function pathOf(o: Obj): string {
  const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
  const base = group ? `/apis/${group}/${version}` : `/api/${version}`;
  return `${base}${o.metadata.namespace ? `/namespaces/${o.metadata.namespace}` : ""}/${PLURAL[o.kind]}/${o.metadata.name}`;
}

function pod(name: string, node: string, ready: boolean, waiting?: string): Obj {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: "meshcni",
      labels: { "app.kubernetes.io/name": "meshcni", "app.kubernetes.io/component": "node" },
    },
    spec: {
      nodeName: node,
      containers: [
        {
          name: "install-cni",
          image: "ghcr.io/meshcni/meshcni:0.1.0",
          ports: [{ name: "health", containerPort: 9813, protocol: "TCP" }],
        },
      ],
    },
    status: {
      phase: "Running",
      conditions: [{ type: "Ready", status: ready ? "True" : "False" }],
      containerStatuses: [
        {
          name: "install-cni",
          ready,
          ...(waiting
            ? { state: { waiting: { reason: waiting, message: "back-off 40s restarting failed container" } } }
            : { state: { running: {} } }),
        },
      ],
    },
  };
}

/** A cluster where install-cni's objects were applied and the DaemonSet rolled out. */
function installHealthy(): void {
  api.objects.clear();
  for (const o of installed) api.objects.set(pathOf(o), structuredClone(o));
  const ds = api.objects.get("/apis/apps/v1/namespaces/meshcni/daemonsets/meshcni-node") as Obj;
  ds.status = {
    desiredNumberScheduled: 2,
    currentNumberScheduled: 2,
    numberReady: 2,
    updatedNumberScheduled: 2,
    numberAvailable: 2,
  };
  api.objects.set("/api/v1/namespaces/meshcni/pods", {
    apiVersion: "v1",
    kind: "PodList",
    items: [pod("meshcni-node-4x7bq", "node-a", true), pod("meshcni-node-9kz2m", "node-b", true)],
  });
  proxy.clear();
  proxy.set("meshcni/meshcni-node-4x7bq", { body: statusDoc("node-a.json") });
  const b = statusDoc("node-b-bypassing.json");
  b.repair = { mode: "delete", active: true, bypassing: [], repaired: 0 };
  proxy.set("meshcni/meshcni-node-9kz2m", { body: b });
  linkerdConfig(true);
  // The cluster's pods as the nodes' records say: every meshed pod has its rules.
  api.objects.set("/api/v1/pods", {
    apiVersion: "v1",
    kind: "PodList",
    items: readJson("cluster-pods.json").items.filter(
      (p: Obj) =>
        ["node-a", "node-b"].includes(p.spec.nodeName) &&
        !["web-5b8b6f7c9d-n4v2k", "voting-7c9f8b6d4-mz5rw", "legacy-api-5d4c3b2a1-7tq9x"].includes(p.metadata.name),
    ),
  });
}

/** Linkerd's linkerd-config, as `linkerd install` writes it (its values key, YAML). */
function linkerdConfig(cniEnabled: boolean | undefined): void {
  const values = [
    "clusterDomain: cluster.local",
    "clusterNetworks: 10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16",
    ...(cniEnabled === undefined ? [] : [`cniEnabled: ${cniEnabled}`]),
    "controllerLogLevel: info",
    "identityTrustDomain: cluster.local",
    "",
  ].join("\n");
  api.objects.set("/api/v1/namespaces/linkerd/configmaps/linkerd-config", {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: "linkerd-config", namespace: "linkerd" },
    data: { values },
  });
}

const version: Handler = (req) =>
  req.path === "/version" ? { status: 200, body: { major: "1", minor: "31", gitVersion: "v1.31.4" } } : undefined;

/** The resource attributes of every access review asked since the last accessReviews(). */
let reviewed: Record<string, string>[] = [];

/** SelfSubjectAccessReview: allowed unless the resource ("pods/eviction" for a subresource) is in `denied`. */
function accessReviews(denied: string[]): Handler {
  reviewed = [];
  return (req, body) => {
    if (req.method !== "POST" || req.path !== "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews")
      return undefined;
    const review = JSON.parse(body);
    const attrs = review.spec.resourceAttributes;
    reviewed.push(attrs);
    const resource = attrs.subresource ? `${attrs.resource}/${attrs.subresource}` : attrs.resource;
    const allowed = !denied.includes(resource);
    return {
      status: 201,
      body: {
        ...review,
        status: { allowed, ...(allowed ? {} : { reason: `user "dev" cannot ${attrs.verb} ${resource}` }) },
      },
    };
  };
}

const normalize = (text: string) => text.replaceAll(api.url, "https://API").replaceAll(cliVersion, "CLI_VERSION");

async function check(args: string[], env: Record<string, string> = {}) {
  return runCliAsync(["check", ...args], { env: { KUBECONFIG: kubeconfig, ...env } });
}

beforeAll(async () => {
  await ensureCli();
  api = await startApiServer({ token: TOKEN, acceptClientCert: true });
  tmp = mkdtempSync(join(tmpdir(), "meshcnictl-check-"));
  kubeconfig = join(tmp, "config");
  writeFileSync(kubeconfig, api.kubeconfig());
  installed = parseAllDocuments(runCli(["install-cni"]).stdout).map((d) => d.toJS() as Obj);
  cliVersion = runCli(["version"]).stdout.trim().split(" ").pop()!;
});
afterEach(() => {
  api.handlers.length = 0;
  api.requests.length = 0;
  api.faults.clear();
  api.setGlobalFault(undefined);
});
afterAll(async () => {
  await api?.close();
  rmSync(tmp, { recursive: true, force: true });
});

describe("check (installed)", () => {
  test("healthy", async () => {
    installHealthy();
    api.handlers.push(version, podProxyHandler(proxy));
    const r = await check([]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expectGolden("testdata/cli/check/healthy.golden", normalize(r.stdout));
    expect(api.requests.every((q) => q.authorization === `Bearer ${TOKEN}`)).toBe(true);
  });

  test("missing objects", async () => {
    installHealthy();
    api.handlers.push(version, podProxyHandler(proxy));
    api.objects.delete("/api/v1/namespaces/meshcni/configmaps/meshcni-config");
    api.objects.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/meshcni");
    const r = await check([]);
    expect(r.code).toBe(1);
    expectGolden("testdata/cli/check/missing.golden", normalize(r.stdout));
  });

  test("nothing installed", async () => {
    api.objects.clear();
    api.handlers.push(version, podProxyHandler(proxy));
    const r = await check([]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("× DaemonSet meshcni-node exists\n    missing DaemonSet meshcni/meshcni-node");
    expect(r.stdout).toContain("Status check results are × (11 of 13 checks failed)");
  });

  test("not ready", async () => {
    installHealthy();
    api.handlers.push(version, podProxyHandler(proxy));
    (api.objects.get("/apis/apps/v1/namespaces/meshcni/daemonsets/meshcni-node") as Obj).status.numberReady = 1;
    api.objects.set("/api/v1/namespaces/meshcni/pods", {
      kind: "PodList",
      items: [
        pod("meshcni-node-4x7bq", "node-a", true),
        pod("meshcni-node-9kz2m", "node-b", false, "CrashLoopBackOff"),
      ],
    });
    proxy.set("meshcni/meshcni-node-9kz2m", { unreachable: "connect: connection refused" });
    const r = await check([]);
    expect(r.code).toBe(1);
    expectGolden("testdata/cli/check/not-ready.golden", normalize(r.stdout));
  });

  test("an invalid configuration in the ConfigMap", async () => {
    installHealthy();
    api.handlers.push(version, podProxyHandler(proxy));
    const cm = api.objects.get("/api/v1/namespaces/meshcni/configmaps/meshcni-config") as Obj;
    cm.data["plugin-config.json"] = JSON.stringify({ type: "meshcni", name: "meshcni", mesh: "consul" });
    const r = await check([]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      "× the ConfigMap holds a configuration the plugin accepts\n    invalid meshcni configuration: mesh:",
    );
  });

  test("forbidden", async () => {
    installHealthy();
    api.handlers.push(version, podProxyHandler(proxy));
    api.faults.set("/apis/rbac.authorization.k8s.io/v1/clusterroles/meshcni", { kind: "status", code: 403 });
    api.faults.set("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/meshcni", { kind: "status", code: 403 });
    const r = await check([]);
    expect(r.code).toBe(1);
    expectGolden("testdata/cli/check/forbidden.golden", normalize(r.stdout));
  });

  test("rejected credentials stop after the API check", async () => {
    installHealthy();
    const bad = join(tmp, "bad-token");
    writeFileSync(bad, api.kubeconfig({ token: "stale" }));
    const r = await check(["--kubeconfig", bad]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("× can reach the Kubernetes API\n    401 Unauthorized: Unauthorized");
    expect(r.stdout).not.toContain("meshcni-node");
  });

  test("an API server that does not answer", async () => {
    const dead = join(tmp, "dead");
    writeFileSync(dead, api.kubeconfig().replace(api.url, "https://127.0.0.1:1"));
    const r = await check(["--kubeconfig", dead, "--timeout", "2"]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("× can reach the Kubernetes API\n    https://127.0.0.1:1: ");
  });

  test("a slow API server runs into --timeout", async () => {
    installHealthy();
    api.setGlobalFault({ kind: "slow", ms: 1500 });
    const r = await check(["--timeout", "0.3"]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("no answer within 0.3 s");
  });
});

/** Four nodes: node-a healthy, node-b with a pod bypassing the mesh (repair off), node-c an agent
 * older than the watch cache and repair (and its binary stale), node-d's agent not answering. */
function installFourNodes(): void {
  installHealthy();
  const ds = api.objects.get("/apis/apps/v1/namespaces/meshcni/daemonsets/meshcni-node") as Obj;
  ds.status = {
    desiredNumberScheduled: 4,
    currentNumberScheduled: 4,
    numberReady: 4,
    updatedNumberScheduled: 4,
    numberAvailable: 4,
  };
  api.objects.set("/api/v1/namespaces/meshcni/pods", {
    kind: "PodList",
    items: [
      pod("meshcni-node-4x7bq", "node-a", true),
      pod("meshcni-node-9kz2m", "node-b", true),
      pod("meshcni-node-c8v5n", "node-c", true),
      pod("meshcni-node-tq2jd", "node-d", true),
    ],
  });
  proxy.set("meshcni/meshcni-node-9kz2m", { body: statusDoc("node-b-bypassing.json") });
  proxy.set("meshcni/meshcni-node-c8v5n", { body: statusDoc("node-c-old-agent.json") });
  proxy.set("meshcni/meshcni-node-tq2jd", { unreachable: "connect: connection refused" });
}

describe("check, node by node", () => {
  test("bypassing pods, an agent older than repair, an unreachable agent; text and -o json", async () => {
    installFourNodes();
    api.handlers.push(version, podProxyHandler(proxy));
    const r = await check([]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(1);
    expectGolden("testdata/cli/check/nodes.golden", normalize(r.stdout));
    // Each agent was asked through the pod proxy, at its health port.
    const asked = api.requests
      .filter((q) => q.path.includes("/proxy/"))
      .map((q) => q.path)
      .sort();
    expect(asked).toEqual(
      ["meshcni-node-4x7bq", "meshcni-node-9kz2m", "meshcni-node-c8v5n", "meshcni-node-tq2jd"].map(
        (p) => `/api/v1/namespaces/meshcni/pods/${p}:9813/proxy/status`,
      ),
    );
    const j = await check(["-o", "json"]);
    expect(j.code).toBe(1);
    expectGolden("testdata/cli/check/nodes.json.golden", normalize(j.stdout));
    const doc = JSON.parse(j.stdout);
    expect(doc.summary).toEqual({ checks: doc.checks.length, failed: 3, warnings: 4 });
    expect(doc.checks.filter((c: Obj) => c.node === "node-d").map((c: Obj) => c.result)).toEqual(["error"]);
  });

  test("an agent older than /status answers 404, and a garbled /status", async () => {
    installHealthy();
    proxy.set("meshcni/meshcni-node-4x7bq", { status: 404, text: "404 page not found\n" });
    proxy.set("meshcni/meshcni-node-9kz2m", { text: "<html>oops</html>" });
    api.handlers.push(version, podProxyHandler(proxy));
    const r = await check([]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      "× the agent answers /status\n    meshcni-node-4x7bq: " +
        "the agent answers 404 for /status (an agent older than /status)",
    );
    expect(r.stdout).toContain(
      "× the agent answers /status\n    meshcni-node-9kz2m: /status is not JSON: <html>oops</html>",
    );
  });
});

describe("check, the mesh's side", () => {
  test("linkerd-config with cniEnabled false, and a pod still carrying linkerd-init", async () => {
    installHealthy();
    linkerdConfig(false);
    const pods = readJson("cluster-pods.json").items.filter((p: Obj) =>
      ["web-5b8b6f7c9d-x2x7q", "legacy-api-5d4c3b2a1-7tq9x"].includes(p.metadata.name),
    );
    api.objects.set("/api/v1/pods", { kind: "PodList", items: pods });
    api.handlers.push(version, podProxyHandler(proxy));
    const r = await check([]);
    expect(r.code).toBe(1);
    expectGolden("testdata/cli/check/mesh-cni-off.golden", normalize(r.stdout));
  });

  test("no Linkerd in the cluster is a warning, not a failure", async () => {
    installHealthy();
    api.objects.delete("/api/v1/namespaces/linkerd/configmaps/linkerd-config");
    api.handlers.push(version, podProxyHandler(proxy));
    const r = await check([]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(
      "‼ Linkerd injects pods for CNI mode\n    no ConfigMap linkerd/linkerd-config: " +
        "Linkerd's control plane is not installed here (or not in namespace linkerd)",
    );
    expect(r.stdout).toContain("Status check results are ✓ (35 checks, 1 warning)");
  });

  test("Istio: the sidecar injector's istio_cni.enabled, and pods with istio-init", async () => {
    installHealthy();
    const cm = api.objects.get("/api/v1/namespaces/meshcni/configmaps/meshcni-config") as Obj;
    cm.data["plugin-config.json"] = JSON.stringify({ ...JSON.parse(cm.data["plugin-config.json"]), mesh: "istio" });
    const injector = (enabled: boolean) =>
      api.objects.set("/api/v1/namespaces/istio-system/configmaps/istio-sidecar-injector", {
        apiVersion: "v1",
        kind: "ConfigMap",
        metadata: { name: "istio-sidecar-injector", namespace: "istio-system" },
        data: {
          config: "policy: enabled\n",
          values: JSON.stringify({
            global: { hub: "docker.io/istio" },
            istio_cni: { enabled, chained: true },
            sidecarInjectorWebhook: {},
          }),
        },
      });
    const istioPod = {
      metadata: { name: "reviews-v1-7d8f9c6b5-kq2xw", namespace: "bookinfo" },
      spec: {
        nodeName: "node-a",
        initContainers: [{ name: "istio-init" }],
        containers: [{ name: "reviews" }, { name: "istio-proxy" }],
      },
      status: { phase: "Running" },
    };
    api.objects.set("/api/v1/pods", { kind: "PodList", items: [istioPod] });
    api.handlers.push(version, podProxyHandler(proxy));
    injector(true);
    const on = await check([]);
    expect(on.code).toBe(0);
    expect(on.stdout).toContain(
      "✓ Istio injects pods for CNI mode (istio_cni.enabled: true in ConfigMap istio-system/istio-sidecar-injector)",
    );
    expect(on.stdout).toContain("‼ pod bookinfo/reviews-v1-7d8f9c6b5-kq2xw still carries istio-init");
    injector(false);
    const off = await check([]);
    expect(off.code).toBe(1);
    expect(off.stdout).toContain(
      "× Istio injects pods for CNI mode\n    istio_cni.enabled is false in ConfigMap " +
        "istio-system/istio-sidecar-injector: Istio still injects istio-init into every meshed pod",
    );
  });
});

describe("check --pods", () => {
  /** The cluster of testdata/cli/check/cluster-pods.json on the four nodes, Linkerd in CNI mode. */
  function installPods(): void {
    installFourNodes();
    api.objects.set("/api/v1/pods", readJson("cluster-pods.json"));
    api.objects.set("/api/v1/namespaces/emojivoto/pods", {
      kind: "PodList",
      items: readJson("cluster-pods.json").items.filter((p: Obj) => p.metadata.namespace === "emojivoto"),
    });
    api.handlers.push(version, podProxyHandler(proxy));
  }

  test("before repair: the pod whose validator failed, with the reason, and the unverified pod (a warning); after: none", async () => {
    installPods();
    const before = await check(["--pods"]);
    expect(before.stderr).toBe("");
    expect(before.code).toBe(1);
    expectGolden("testdata/cli/check/pods-before.golden", normalize(before.stdout));
    const json = await check(["--pods", "-o", "json"]);
    expectGolden("testdata/cli/check/pods-before.json.golden", normalize(json.stdout));
    const pods = (result: string) =>
      JSON.parse(json.stdout)
        .checks.filter((c: Obj) => c.category === "pods" && c.result === result && c.pod)
        .map((c: Obj) => `${c.pod.namespace}/${c.pod.name}`);
    expect(pods("error")).toEqual(["emojivoto/voting-7c9f8b6d4-mz5rw"]);
    expect(pods("warning")).toEqual(["emojivoto/web-5b8b6f7c9d-n4v2k", "emojivoto/legacy-api-5d4c3b2a1-7tq9x"]);

    // The repair: both pods deleted and recreated by their controllers, now with records.
    const list = readJson("cluster-pods.json");
    const template = list.items.find((p: Obj) => p.metadata.name === "web-5b8b6f7c9d-x2x7q");
    list.items = list.items.filter(
      (p: Obj) => !["web-5b8b6f7c9d-n4v2k", "voting-7c9f8b6d4-mz5rw"].includes(p.metadata.name),
    );
    const a = statusDoc("node-a.json");
    const b = statusDoc("node-b-bypassing.json");
    b.repair = { mode: "off", active: true, bypassing: [], unverified: [], repaired: 0, refusals: 0 };
    for (const [name, uid, node, doc] of [
      ["web-5b8b6f7c9d-r7w2m", "0d1e2f3a-4b5c-4d6e-8f7a-8b9c0d1e2f3a", "node-a", a],
      ["voting-7c9f8b6d4-h6k3d", "1e2f3a4b-5c6d-4e7f-9a8b-9c0d1e2f3a4b", "node-b", b],
    ] as const) {
      list.items.push({
        ...structuredClone(template),
        metadata: { name, namespace: "emojivoto", uid },
        spec: { ...structuredClone(template.spec), nodeName: node },
      });
      doc.pods.containers.push({
        namespace: "emojivoto",
        name,
        uid,
        containerId: `${uid.slice(0, 8)}aa`,
        decision: "meshed",
        reason: "the pod runs linkerd-proxy",
        time: "2026-11-24T10:06:00.000Z",
      });
    }
    api.objects.set("/api/v1/pods", list);
    proxy.set("meshcni/meshcni-node-4x7bq", { body: a });
    proxy.set("meshcni/meshcni-node-9kz2m", { body: b });
    const after = await check(["--pods"]);
    expect(after.code).toBe(0);
    expectGolden("testdata/cli/check/pods-after.golden", normalize(after.stdout));
  });

  test("--pods-namespace looks at one namespace's pods", async () => {
    installPods();
    const r = await check(["--pods", "--pods-namespace", "emojivoto"]);
    expect(r.code).toBe(1);
    expect(api.requests.some((q) => q.path === "/api/v1/namespaces/emojivoto/pods")).toBe(true);
    expect(api.requests.some((q) => q.path === "/api/v1/pods")).toBe(false);
    expect(r.stdout).toContain("× pod emojivoto/voting-7c9f8b6d4-mz5rw on node-b runs with meshcni's rules");
  });

  test("meshcni not installed: says so and stops", async () => {
    api.objects.clear();
    api.handlers.push(version);
    const r = await check(["--pods"]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain(
      "× the ConfigMap holds a configuration the plugin accepts\n    missing ConfigMap meshcni/meshcni-config",
    );
  });
});

describe("check --pre", () => {
  const daemonSets =
    (items: Obj[]): Handler =>
    (req) =>
      req.path === "/apis/apps/v1/daemonsets" ? { status: 200, body: { kind: "DaemonSetList", items } } : undefined;

  test("a cluster that can take meshcni", async () => {
    api.objects.clear();
    api.handlers.push(
      version,
      accessReviews([]),
      daemonSets([{ metadata: { name: "kube-proxy", namespace: "kube-system" } }]),
    );
    const r = await check(["--pre"]);
    expect(r.code).toBe(0);
    expectGolden("testdata/cli/check/pre-ok.golden", normalize(r.stdout));
    const j = await check(["--pre", "-o", "json"]);
    expect(j.code).toBe(0);
    expectGolden("testdata/cli/check/pre-ok.json.golden", normalize(j.stdout));
    // One review per object to create, then one per verb the roles grant (the agent's pods and
    // namespaces: get, list, watch; nodes: get; repair's pods/eviction: create, events: create;
    // the plugin's pods, namespaces and kubernetes Service: get; the DaemonSet: get; the
    // plugin's tokens: create).
    const reviews = api.requests.filter((q) => q.method === "POST");
    expect(reviews.length).toBe(2 * (11 + 3 + 3 + 1 + 2 + 3 + 1 + 1)); // two runs
    // A subresource is asked as kube-apiserver knows it: the eviction, and the tokens of the one account.
    expect(reviewed).toContainEqual({ verb: "create", group: "", resource: "pods", subresource: "eviction" });
    const token = {
      verb: "create",
      group: "",
      resource: "serviceaccounts",
      subresource: "token",
      namespace: "meshcni",
      name: "meshcni-plugin",
    };
    expect(reviewed).toContainEqual(token);
  });

  test("no permission to create RBAC objects, and linkerd-cni installed", async () => {
    api.objects.clear();
    api.handlers.push(
      version,
      accessReviews(["clusterroles", "clusterrolebindings"]),
      daemonSets([
        { metadata: { name: "linkerd-cni", namespace: "linkerd-cni", labels: { "linkerd.io/cni-resource": "true" } } },
        { metadata: { name: "istio-cni-node", namespace: "istio-system", labels: { "k8s-app": "istio-cni-node" } } },
      ]),
    );
    const r = await check(["--pre"]);
    expect(r.code).toBe(1);
    expectGolden("testdata/cli/check/pre-forbidden-other-mesh.golden", normalize(r.stdout));
  });

  test("access reviews refused outright", async () => {
    api.objects.clear();
    api.handlers.push(version, daemonSets([]));
    api.faults.set("/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", { kind: "status", code: 403 });
    const r = await check(["--pre"]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("× can create DaemonSet meshcni-node\n    access review failed: 403 Forbidden");
  });
});

describe("check reads the kubeconfig as kubectl does", () => {
  test("KUBECONFIG lists files; the first current-context and definitions win; --context picks", async () => {
    installHealthy();
    api.handlers.push(version, podProxyHandler(proxy));
    const first = join(tmp, "first");
    const second = join(tmp, "second");
    // The first file only says which context; the second defines it, plus a broken one.
    writeFileSync(first, "apiVersion: v1\nkind: Config\ncurrent-context: meshcni-context\n");
    writeFileSync(second, `${api.kubeconfig()}`);
    const broken = join(tmp, "broken-context");
    writeFileSync(
      broken,
      [
        "apiVersion: v1",
        "kind: Config",
        "clusters: [{name: elsewhere, cluster: {server: 'https://127.0.0.1:1'}}]",
        "users: [{name: nobody, user: {token: x}}]",
        "contexts: [{name: elsewhere, context: {cluster: elsewhere, user: nobody}}]",
        "",
      ].join("\n"),
    );
    const ok = await check([], { KUBECONFIG: `${first}:${join(tmp, "does-not-exist")}:${second}:${broken}` });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain("✓ can read the kubeconfig (context meshcni-context)");
    const picked = await check(["--context", "elsewhere", "--timeout", "2"], {
      KUBECONFIG: `${first}:${second}:${broken}`,
    });
    expect(picked.code).toBe(1);
    expect(picked.stdout).toContain("✓ can read the kubeconfig (context elsewhere)");
    expect(picked.stdout).toContain("× can reach the Kubernetes API\n    https://127.0.0.1:1");
    const unknown = await check(["--context", "nope"], { KUBECONFIG: second });
    expect(unknown.code).toBe(1);
    expect(unknown.stdout).toContain('× can read the kubeconfig\n    context "nope" is not in');
  });

  test("a client certificate instead of a token", async () => {
    installHealthy();
    api.handlers.push(version, podProxyHandler(proxy));
    const certs = join(tmp, "cert-config");
    writeFileSync(certs, api.kubeconfig({ clientCert: true }).replace(/^ {4}token: .*\n/m, ""));
    const r = await check(["--kubeconfig", certs]);
    expect(r.code).toBe(0);
    expect(api.requests.at(-1)?.clientCertCN).toBeDefined();
    expect(api.requests.at(-1)?.authorization).toBeUndefined();
  });

  test("exec credential plugins are named, not run", async () => {
    const execConfig = join(tmp, "exec-config");
    writeFileSync(
      execConfig,
      api
        .kubeconfig()
        .replace(
          /^ {4}token: .*$/m,
          "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: gke-gcloud-auth-plugin",
        ),
    );
    const r = await check(["--kubeconfig", execConfig]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("gets credentials from an exec plugin, which meshcnictl does not run");
  });

  test("bad flags are refused before anything is printed", async () => {
    for (const [args, message] of [
      [["--timeout", "soon"], '--timeout "soon"'],
      [["-n", "Bad"], '--namespace "Bad"'],
      [["extra"], "check takes no arguments"],
      [["-o", "yaml"], '--output "yaml": must be text or json'],
      [["--pre", "--pods"], "--pre and --pods exclude each other"],
      [["--pods-namespace", "demo"], "--pods-namespace goes with --pods"],
      [["--pods", "--pods-namespace", "Demo"], '--pods-namespace "Demo"'],
    ] as const) {
      const r = await check([...args]);
      expect([r.code, r.stdout]).toEqual([2, ""]);
      expect(r.stderr).toContain(message);
    }
  });
});
