// `meshcnictl check [--pre]` against the stand-in API server (test/support/apiserver.ts), run
// as the compiled binary: healthy, missing, not-ready and forbidden clusters, pre-install
// checks with and without permissions and with another mesh's CNI plugin, and the user's
// kubeconfig as kubectl reads it (KUBECONFIG lists, --context, client certificates).
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { type ApiServer, type Handler, startApiServer } from "../support/apiserver.ts";
import { expectGolden } from "../support/golden.ts";
import { ensureCli, runCli, runCliAsync } from "./support.ts";

type Obj = Record<string, any>;
const TOKEN = "check-test-token";
let api: ApiServer;
let tmp: string;
let kubeconfig: string;
let installed: Obj[];

const PLURAL: Record<string, string> = {
  Namespace: "namespaces", ServiceAccount: "serviceaccounts", ConfigMap: "configmaps",
  ClusterRole: "clusterroles", ClusterRoleBinding: "clusterrolebindings", Role: "roles", RoleBinding: "rolebindings", DaemonSet: "daemonsets",
};

function pathOf(o: Obj): string {
  const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : ["", o.apiVersion];
  const base = group ? `/apis/${group}/${version}` : `/api/${version}`;
  return `${base}${o.metadata.namespace ? `/namespaces/${o.metadata.namespace}` : ""}/${PLURAL[o.kind]}/${o.metadata.name}`;
}

function pod(name: string, node: string, ready: boolean, waiting?: string): Obj {
  return {
    apiVersion: "v1", kind: "Pod",
    metadata: { name, namespace: "meshcni", labels: { "app.kubernetes.io/name": "meshcni", "app.kubernetes.io/component": "node" } },
    spec: { nodeName: node, containers: [{ name: "install-cni", image: "ghcr.io/meshcni/meshcni:0.1.0" }] },
    status: {
      phase: "Running",
      conditions: [{ type: "Ready", status: ready ? "True" : "False" }],
      containerStatuses: [{ name: "install-cni", ready, ...(waiting ? { state: { waiting: { reason: waiting, message: "back-off 40s restarting failed container" } } } : { state: { running: {} } }) }],
    },
  };
}

/** A cluster where install-cni's objects were applied and the DaemonSet rolled out. */
function installHealthy(): void {
  api.objects.clear();
  for (const o of installed) api.objects.set(pathOf(o), structuredClone(o));
  const ds = api.objects.get("/apis/apps/v1/namespaces/meshcni/daemonsets/meshcni-node") as Obj;
  ds.status = { desiredNumberScheduled: 2, currentNumberScheduled: 2, numberReady: 2, updatedNumberScheduled: 2, numberAvailable: 2 };
  api.objects.set("/api/v1/namespaces/meshcni/pods", { apiVersion: "v1", kind: "PodList", items: [pod("meshcni-node-4x7bq", "node-a", true), pod("meshcni-node-9kz2m", "node-b", true)] });
}

const version: Handler = (req) => (req.path === "/version" ? { status: 200, body: { major: "1", minor: "31", gitVersion: "v1.31.4" } } : undefined);

/** SelfSubjectAccessReview: allowed unless the resource is in `denied`. */
function accessReviews(denied: string[]): Handler {
  return (req, body) => {
    if (req.method !== "POST" || req.path !== "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews") return undefined;
    const review = JSON.parse(body);
    const attrs = review.spec.resourceAttributes;
    const allowed = !denied.includes(attrs.resource);
    return { status: 201, body: { ...review, status: { allowed, ...(allowed ? {} : { reason: `user "dev" cannot ${attrs.verb} ${attrs.resource}` }) } } };
  };
}

const normalize = (text: string) => text.replaceAll(api.url, "https://API");

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
});
afterEach(() => {
  api.handlers.length = 0;
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
    api.handlers.push(version);
    const r = await check([]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expectGolden("testdata/cli/check/healthy.golden", normalize(r.stdout));
    expect(api.requests.every((q) => q.authorization === `Bearer ${TOKEN}`)).toBe(true);
  });

  test("missing objects", async () => {
    installHealthy();
    api.handlers.push(version);
    api.objects.delete("/api/v1/namespaces/meshcni/configmaps/meshcni-config");
    api.objects.delete("/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/meshcni");
    const r = await check([]);
    expect(r.code).toBe(1);
    expectGolden("testdata/cli/check/missing.golden", normalize(r.stdout));
  });

  test("nothing installed", async () => {
    api.objects.clear();
    api.handlers.push(version);
    const r = await check([]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("× DaemonSet meshcni-node exists\n    missing DaemonSet meshcni/meshcni-node");
    expect(r.stdout).toContain("Status check results are × (8 of 10 checks failed)");
  });

  test("not ready", async () => {
    installHealthy();
    api.handlers.push(version);
    (api.objects.get("/apis/apps/v1/namespaces/meshcni/daemonsets/meshcni-node") as Obj).status.numberReady = 1;
    api.objects.set("/api/v1/namespaces/meshcni/pods", { kind: "PodList", items: [pod("meshcni-node-4x7bq", "node-a", true), pod("meshcni-node-9kz2m", "node-b", false, "CrashLoopBackOff")] });
    const r = await check([]);
    expect(r.code).toBe(1);
    expectGolden("testdata/cli/check/not-ready.golden", normalize(r.stdout));
  });

  test("an invalid configuration in the ConfigMap", async () => {
    installHealthy();
    api.handlers.push(version);
    const cm = api.objects.get("/api/v1/namespaces/meshcni/configmaps/meshcni-config") as Obj;
    cm.data["plugin-config.json"] = JSON.stringify({ type: "meshcni", name: "meshcni", mesh: "consul" });
    const r = await check([]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("× the ConfigMap holds a configuration the plugin accepts\n    invalid meshcni configuration: mesh:");
  });

  test("forbidden", async () => {
    installHealthy();
    api.handlers.push(version);
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

describe("check --pre", () => {
  const daemonSets = (items: Obj[]): Handler => (req) => (req.path === "/apis/apps/v1/daemonsets" ? { status: 200, body: { kind: "DaemonSetList", items } } : undefined);

  test("a cluster that can take meshcni", async () => {
    api.objects.clear();
    api.handlers.push(version, accessReviews([]), daemonSets([{ metadata: { name: "kube-proxy", namespace: "kube-system" } }]));
    const r = await check(["--pre"]);
    expect(r.code).toBe(0);
    expectGolden("testdata/cli/check/pre-ok.golden", normalize(r.stdout));
    // One review per object to create, then one per verb the roles grant (pods and namespaces:
    // get, list, watch; nodes: get; the DaemonSet: get).
    const reviews = api.requests.filter((q) => q.method === "POST");
    expect(reviews.length).toBe(8 + 3 + 3 + 1 + 1);
  });

  test("no permission to create RBAC objects, and linkerd-cni installed", async () => {
    api.objects.clear();
    api.handlers.push(version, accessReviews(["clusterroles", "clusterrolebindings"]), daemonSets([
      { metadata: { name: "linkerd-cni", namespace: "linkerd-cni", labels: { "linkerd.io/cni-resource": "true" } } },
      { metadata: { name: "istio-cni-node", namespace: "istio-system", labels: { "k8s-app": "istio-cni-node" } } },
    ]));
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
    api.handlers.push(version);
    const first = join(tmp, "first");
    const second = join(tmp, "second");
    // The first file only says which context; the second defines it, plus a broken one.
    writeFileSync(first, "apiVersion: v1\nkind: Config\ncurrent-context: meshcni-context\n");
    writeFileSync(second, api.kubeconfig() + "");
    const broken = join(tmp, "broken-context");
    writeFileSync(broken, [
      "apiVersion: v1", "kind: Config",
      "clusters: [{name: elsewhere, cluster: {server: 'https://127.0.0.1:1'}}]",
      "users: [{name: nobody, user: {token: x}}]",
      "contexts: [{name: elsewhere, context: {cluster: elsewhere, user: nobody}}]", "",
    ].join("\n"));
    const ok = await check([], { KUBECONFIG: `${first}:${join(tmp, "does-not-exist")}:${second}:${broken}` });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain("✓ can read the kubeconfig (context meshcni-context)");
    const picked = await check(["--context", "elsewhere", "--timeout", "2"], { KUBECONFIG: `${first}:${second}:${broken}` });
    expect(picked.code).toBe(1);
    expect(picked.stdout).toContain("✓ can read the kubeconfig (context elsewhere)");
    expect(picked.stdout).toContain("× can reach the Kubernetes API\n    https://127.0.0.1:1");
    const unknown = await check(["--context", "nope"], { KUBECONFIG: second });
    expect(unknown.code).toBe(1);
    expect(unknown.stdout).toContain('× can read the kubeconfig\n    context "nope" is not in');
  });

  test("a client certificate instead of a token", async () => {
    installHealthy();
    api.handlers.push(version);
    const certs = join(tmp, "cert-config");
    writeFileSync(certs, api.kubeconfig({ clientCert: true }).replace(/^ {4}token: .*\n/m, ""));
    const r = await check(["--kubeconfig", certs]);
    expect(r.code).toBe(0);
    expect(api.requests.at(-1)?.clientCertCN).toBeDefined();
    expect(api.requests.at(-1)?.authorization).toBeUndefined();
  });

  test("exec credential plugins are named, not run", async () => {
    const execConfig = join(tmp, "exec-config");
    writeFileSync(execConfig, api.kubeconfig().replace(/^ {4}token: .*$/m, "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: gke-gcloud-auth-plugin"));
    const r = await check(["--kubeconfig", execConfig]);
    expect(r.code).toBe(1);
    expect(r.stdout).toContain("gets credentials from an exec plugin, which meshcnictl does not run");
  });

  test("bad flags are refused before anything is printed", async () => {
    for (const [args, message] of [[["--timeout", "soon"], '--timeout "soon"'], [["-n", "Bad"], '--namespace "Bad"'], [["extra"], "check takes no arguments"]] as const) {
      const r = await check([...args]);
      expect([r.code, r.stdout]).toEqual([2, ""]);
      expect(r.stderr).toContain(message);
    }
  });
});
