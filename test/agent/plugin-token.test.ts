// The plugin's own identity, with the compiled dist/meshcni-installer and dist/meshcni against a
// stand-in API server that knows who each token is and authorizes it with the RBAC objects
// `meshcnictl install-cni` renders (test/support/rbac.ts): the kubeconfig on the host holds a
// TokenRequest token of meshcni-plugin (asked for a day, bound to no object), never the agent's
// own; that token can get a pod, a namespace and the Service kubernetes and nothing else; it is
// renewed at 80 % of the lifetime the server grants (here shortened to a few seconds), retried
// with back-off while renewing fails, and an expired one is not ready; the plugin's fallback
// reads pods with it and fails closed (code 104) once it has expired; --once asks for one and
// says it expires; a kubeconfig of the older scheme (the agent's token) is rewritten at once; a
// restarted agent keeps the token on disk while the API server is away.
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { objectPath } from "../../internal/cli/check/check.ts";
import { readWrittenToken } from "../../internal/agent/install/kubeconfig.ts";
import { buildManifests, type K8sObject } from "../../internal/cli/manifests/objects.ts";
import { parseValues } from "../../internal/cli/manifests/values.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { addWriteRoutes } from "../support/apiserver-writes.ts";
import { repoPath } from "../support/golden.ts";
import { Netns, uniq } from "../support/netns.ts";
import { cniEnv, runPlugin } from "../support/plugin-run.ts";
import {
  DAEMONSET_PATH,
  daemonSet,
  ensureBuilt,
  freePort,
  HostDirs,
  INSTALLER_ENV,
  type InstallerProcess,
  isChainedIn,
  NODE_PATH,
  readyz,
  startInstaller,
  until,
} from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");
const POD = JSON.parse(readFileSync(repoPath("testdata/pods/linkerd-meshed.json"), "utf8"));
const NS = JSON.parse(readFileSync(repoPath("testdata/pods/namespace-emojivoto.json"), "utf8"));
const POD_PATH = `/api/v1/namespaces/emojivoto/pods/${POD.metadata.name}`;
const AGENT = "system:serviceaccount:meshcni:meshcni";
const PLUGIN_USER = "system:serviceaccount:meshcni:meshcni-plugin";
const TOKEN_REQUEST = { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: {} };

/** One pattern from several, for the log's long lines. */
const re = (...parts: RegExp[]) => new RegExp(parts.map((p) => p.source).join(""));

let api: ApiServer;
let rbac: K8sObject[];
let dirs: HostDirs;
let running: InstallerProcess[] = [];

beforeAll(() => ensureBuilt(), 120_000);
afterEach(async () => {
  for (const p of running) await p.stop("SIGKILL");
  running = [];
  dirs?.cleanup();
  await api?.close();
});

/**
 * A cluster where meshcni is installed as install-cni renders it: the agent's token ("token-one",
 * the service account folder's) is meshcni/meshcni's, and every request is authorized by the
 * rendered RBAC. `maxTokenSeconds` shortens what TokenRequest grants.
 */
async function cluster(maxTokenSeconds?: number): Promise<Record<string, string>> {
  rbac = buildManifests(parseValues({ namespace: "meshcni", createNamespace: true }));
  const cap = maxTokenSeconds ? { maxTokenSeconds } : {};
  api = await startApiServer({ identities: { "token-one": AGENT }, rbac, ...cap });
  api.addNamespace({ metadata: { name: "meshcni" } });
  api.addNamespace(NS);
  api.addPod(POD);
  for (const o of rbac) if (o.kind === "ServiceAccount") api.objects.set(objectPath(o), o);
  const nodeMeta = { name: "node-a", labels: { "kubernetes.io/os": "linux" } };
  api.objects.set(NODE_PATH, { apiVersion: "v1", kind: "Node", metadata: nodeMeta, spec: {} });
  api.objects.set(DAEMONSET_PATH, daemonSet());
  const service = (name: string) => ({ apiVersion: "v1", kind: "Service", metadata: { name, namespace: "default" } });
  api.objects.set("/api/v1/namespaces/default/services/kubernetes", {
    ...service("kubernetes"),
    spec: { ports: [{ name: "https", port: 443, targetPort: 6443 }] },
  });
  api.objects.set("/api/v1/namespaces/default/services/other", service("other"));
  dirs = new HostDirs("token-one", api.caPem);
  writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
  return { ...INSTALLER_ENV, KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: new URL(api.url).port };
}

function start(env: Record<string, string>, extra: string[] = []): InstallerProcess {
  const p = startInstaller(dirs, extra, env);
  running.push(p);
  return p;
}

const kubeconfigPath = () => join(dirs.net, "ZZZ-meshcni-kubeconfig");
const written = () =>
  existsSync(kubeconfigPath()) ? readWrittenToken(readFileSync(kubeconfigPath(), "utf8")) : undefined;
const pluginTokens = () => api.issued.filter((t) => t.user === PLUGIN_USER);

type Answer = { status: number; body: any };

/** A request with a bearer token, answered as status and parsed body. */
async function call(token: string, method: string, path: string, body?: unknown): Promise<Answer> {
  const type = method === "PATCH" ? "application/json-patch+json" : "application/json";
  const res = await fetch(`${api.url}${path}`, {
    method,
    headers: {
      Authorization: `Bearer ${token}`,
      Accept: "application/json",
      ...(body !== undefined ? { "Content-Type": type } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    tls: { ca: api.caPem },
  } as RequestInit);
  const text = await res.text();
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    parsed = text;
  }
  return { status: res.status, body: parsed };
}

async function status(port: number): Promise<any> {
  return (await fetch(`http://127.0.0.1:${port}/status`)).json();
}

describe("the plugin's own identity", () => {
  test("the kubeconfig holds a TokenRequest token of meshcni-plugin (a day asked, no bound object), asked with the " +
    "agent's credentials; never the agent's own", async () => {
    const env = await cluster();
    const port = freePort();
    const p = start(env, ["--health-port", String(port)]);
    await until(() => written(), 10_000, "the kubeconfig");
    await until(async () => (await readyz(port)).status === 200, 10_000, "/readyz 200");
    const text = readFileSync(kubeconfigPath(), "utf8");
    expect(text).not.toContain("token-one");
    const [issued] = pluginTokens();
    expect(pluginTokens()).toHaveLength(1);
    expect(issued).toMatchObject({
      user: PLUGIN_USER,
      by: AGENT,
      requestedSeconds: 86400,
      grantedSeconds: 86400,
      boundObjectRef: null,
    });
    const account = { namespace: "meshcni", name: "meshcni-plugin" };
    expect(written()).toEqual({ token: issued!.token, account, expiresAt: expect.any(Number) });
    expect(Math.abs(written()!.expiresAt - (Date.now() + 86_400_000))).toBeLessThan(60_000);
    // /status shows whose token it is and when it expires, never the token.
    const s = await status(port);
    expect(s.kubeconfig).toMatchObject({
      current: true,
      token: {
        account: "meshcni/meshcni-plugin",
        expired: false,
        grantedSeconds: 86400,
        requestedSeconds: 86400,
        obtained: 1,
        failures: 0,
      },
    });
    expect(Math.abs(Date.parse(s.kubeconfig.token.expiresAt) - written()!.expiresAt)).toBeLessThan(1000);
    const renewal = Date.now() + 0.8 * 86_400_000;
    expect(Math.abs(Date.parse(s.kubeconfig.token.nextRequestAt) - renewal)).toBeLessThan(60_000);
    expect(JSON.stringify(s)).not.toContain(issued!.token);
    await p.waitForLog(
      re(
        /got the plugin's token: service account meshcni\/meshcni-plugin, /,
        /valid until \S+Z; renewing it after 691(19|20) s/,
      ),
    );
    expect(p.log()).not.toContain(issued!.token);
    // The agent did its own work with its own token, and the rendered RBAC let it.
    expect(api.requests.filter((q) => q.user === AGENT).length).toBeGreaterThan(2);
    expect(p.log()).not.toMatch(/\b403\b/);
  }, 60_000);

  test("the plugin's token may get a pod, a namespace and the Service kubernetes; everything else is 403", async () => {
    const env = await cluster();
    addWriteRoutes(api);
    start(env);
    await until(() => written(), 10_000, "the kubeconfig");
    const token = written()!.token;
    const allowed = [
      ["GET", POD_PATH],
      ["GET", "/api/v1/namespaces/emojivoto"],
      ["GET", "/api/v1/namespaces/default/services/kubernetes"],
    ] as const;
    for (const [method, path] of allowed) {
      expect([method, path, (await call(token, method, path)).status]).toEqual([method, path, 200]);
    }
    const refused: [string, string, unknown?][] = [
      ["DELETE", POD_PATH, { preconditions: { uid: POD.metadata.uid } }],
      [
        "POST",
        `${POD_PATH}/eviction`,
        {
          apiVersion: "policy/v1",
          kind: "Eviction",
          metadata: { name: POD.metadata.name, namespace: "emojivoto" },
        },
      ],
      [
        "POST",
        "/api/v1/namespaces/emojivoto/events",
        {
          kind: "Event",
          metadata: { namespace: "emojivoto", generateName: "x-" },
          involvedObject: { name: POD.metadata.name },
        },
      ],
      ["PATCH", NODE_PATH, [{ op: "replace", path: "/spec/unschedulable", value: true }]],
      ["GET", NODE_PATH],
      ["GET", "/api/v1/pods"],
      ["GET", "/api/v1/pods?watch=1"],
      ["GET", "/api/v1/namespaces/emojivoto/pods"],
      ["GET", "/api/v1/namespaces/emojivoto/pods?watch=true"],
      ["GET", "/api/v1/namespaces"],
      ["GET", "/api/v1/secrets"],
      ["GET", "/api/v1/namespaces/meshcni/secrets/anything"],
      ["GET", "/api/v1/namespaces/default/services/other"],
      ["GET", DAEMONSET_PATH],
      ["POST", "/api/v1/namespaces/meshcni/serviceaccounts/meshcni-plugin/token", TOKEN_REQUEST],
      ["POST", "/api/v1/namespaces/meshcni/serviceaccounts/meshcni/token", TOKEN_REQUEST],
    ];
    for (const [method, path, body] of refused) {
      const r = await call(token, method, path, body);
      expect([method, path, r.status, r.body.kind, r.body.reason]).toEqual([method, path, 403, "Status", "Forbidden"]);
      expect(r.body.message).toContain(`User "${PLUGIN_USER}" cannot`);
    }
    // The refusals are the identity's: the agent's own token may evict the pod (repair's default).
    expect(api.objects.has(POD_PATH)).toBe(true);
    const evicted = await call("token-one", "POST", `${POD_PATH}/eviction`, {
      apiVersion: "policy/v1",
      kind: "Eviction",
      metadata: { name: POD.metadata.name, namespace: "emojivoto" },
      deleteOptions: { preconditions: { uid: POD.metadata.uid } },
    });
    expect(evicted.status).toBe(201);
  }, 60_000);

  test("renewed at 80 % of the lifetime the server granted (shortened to 5 s): the kubeconfig never holds an " +
    "expired token", async () => {
    const env = await cluster(5);
    const p = start(env);
    await until(() => written(), 10_000, "the kubeconfig");
    await p.waitForLog(
      re(
        /got the plugin's token: service account meshcni\/meshcni-plugin, valid until \S+ /,
        /\(asked for 86400 s; the API server granted [45] s\); renewing it after [34] s/,
      ),
    );
    // Every 250 ms for 11 s, the plugin's token on disk reads the pod.
    const t0 = performance.now();
    const answers: number[] = [];
    while (performance.now() - t0 < 11_000) {
      answers.push((await call(written()!.token, "GET", POD_PATH)).status);
      await Bun.sleep(250);
    }
    expect(answers.filter((s) => s !== 200)).toEqual([]);
    const tokens = pluginTokens();
    expect(tokens.length).toBeGreaterThanOrEqual(3);
    for (const t of tokens) {
      expect([t.grantedSeconds, t.requestedSeconds, t.boundObjectRef]).toEqual([5, 86400, null]);
    }
    // 80 % of 4-5 s (the expiry is said in whole seconds): between 3.2 and 4 s, plus scheduling.
    const issuedAt = tokens.map((t) => t.expiresAt - 5000);
    const gaps = issuedAt.slice(1).map((t, i) => t - issuedAt[i]!);
    for (const g of gaps) expect(g).toBeGreaterThan(3000);
    for (const g of gaps) expect(g).toBeLessThan(4800);
    await p.waitForLog(/renewed the plugin's token: service account meshcni\/meshcni-plugin/);
    await p.waitForLog(/rewrote the plugin's kubeconfig with a new token/);
    // The old tokens expire on schedule: the server refuses them.
    await until(() => Date.now() > tokens[0]!.expiresAt, 6000, "the first token's expiry");
    expect((await call(tokens[0]!.token, "GET", POD_PATH)).status).toBe(401);
  }, 60_000);

  test("a renewal that fails is retried with back-off and logged; once the token expires the agent is not ready; " +
    "a new token makes it ready again", async () => {
    const env = await cluster(5);
    const port = freePort();
    const p = start(env, ["--health-port", String(port)]);
    await until(async () => (await readyz(port).catch(() => ({ status: 0 }))).status === 200, 10_000, "/readyz 200");
    const first = written()!;
    // The agent's Role loses create on serviceaccounts/token (an RBAC edit, a botched upgrade).
    const withoutTokens = (o: K8sObject) =>
      (o.rules as { resources: string[] }[]).filter((r) => !r.resources.includes("serviceaccounts/token"));
    api.rbac = structuredClone(rbac).map((o) => (o.kind === "Role" ? { ...o, rules: withoutTokens(o) } : o));
    const warned = await p.waitForLog(
      re(
        /cannot get a token of meshcni\/meshcni-plugin from \S+: /,
        /the agent may not create tokens for meshcni\/meshcni-plugin /,
        /\(403\)[^\n]*; trying again in [\d.]+ s \(the current token stays valid until \S+Z\)/,
      ),
      10_000,
    );
    expect(warned).toContain("its Role needs create on serviceaccounts/token for meshcni-plugin");
    // Past the expiry: not ready, and /status says why; the plugin's fallback would get 401.
    const r = await until(
      async () => {
        const x = await readyz(port);
        return x.status === 503 ? x : undefined;
      },
      10_000,
      "/readyz 503",
    );
    expect(r.body).toMatch(
      re(
        /the plugin's token in \S+ZZZ-meshcni-kubeconfig \(meshcni\/meshcni-plugin\) expired at \S+Z: /,
        /cannot get a token of meshcni\/meshcni-plugin from \S+: the agent may not create tokens/,
      ),
    );
    // The agent counts from the expiry the server said, in whole seconds: never after the server.
    expect(Date.now()).toBeLessThan(pluginTokens()[0]!.expiresAt + 500);
    await until(() => Date.now() > pluginTokens()[0]!.expiresAt, 2000, "the server's expiry");
    expect((await call(first.token, "GET", POD_PATH)).status).toBe(401);
    const s = await status(port);
    expect(s.ready).toBe(false);
    expect(s.kubeconfig.token).toMatchObject({
      account: "meshcni/meshcni-plugin",
      expired: true,
      lastError: expect.stringContaining("(403)"),
    });
    expect(s.kubeconfig.token.failures).toBeGreaterThanOrEqual(2);
    await p.waitForLog(/the current token expired at \S+Z: the plugin's fallback fails closed \(401\)/, 10_000);
    // Back-off: the failed tries spread out (1 s doubling, jittered), not a busy loop.
    const tries = api.requests.filter((q) => q.path.endsWith("/meshcni-plugin/token")).length;
    expect(tries).toBeLessThan(10);
    // RBAC put back: the next try brings a token, and the agent is ready again.
    api.rbac = rbac;
    await until(async () => (await readyz(port)).status === 200, 40_000, "/readyz 200 again");
    expect(written()!.token).not.toBe(first.token);
    expect((await call(written()!.token, "GET", POD_PATH)).status).toBe(200);
  }, 90_000);

  test("--once asks for one token, writes it and says that it expires with nothing to renew it", async () => {
    const env = await cluster();
    const p = start(env, ["--once"]);
    expect(await p.proc.exited).toBe(0);
    await p.stop();
    expect(isChainedIn(dirs, "10-calico.conflist")).toBe(true);
    expect(pluginTokens()).toHaveLength(1);
    expect(written()!.token).toBe(pluginTokens()[0]!.token);
    expect(p.log()).toMatch(
      re(
        /installed; exiting \(--once\); the plugin's token \(meshcni\/meshcni-plugin\) is valid until \S+Z and nothing /,
        /renews it without an agent: after that the plugin's fallback to its kubeconfig fails closed/,
      ),
    );
  }, 60_000);

  test("--once with no token to be had waits, saying why, and a stop before one arrives exits 1", async () => {
    const env = await cluster();
    api.objects.delete("/api/v1/namespaces/meshcni/serviceaccounts/meshcni-plugin");
    const p = start(env, ["--once"]);
    await p.waitForLog(
      re(
        /no ServiceAccount meshcni\/meshcni-plugin \(404\)[^\n]*; /,
        /meshcnictl install-cni renders it; trying again in/,
      ),
    );
    expect(existsSync(kubeconfigPath())).toBe(false);
    expect(await p.stop("SIGTERM")).toBe(1);
    expect(p.log()).toContain("stopped before the plugin's kubeconfig had a token (--once)");
  }, 60_000);

  test("a kubeconfig an older meshcni wrote (the agent's own token) is rewritten on the first run", async () => {
    const env = await cluster();
    const old = readFileSync(repoPath("testdata/installer/kubeconfig-agent-token.old"), "utf8");
    writeFileSync(kubeconfigPath(), old, { mode: 0o600 });
    expect(readFileSync(kubeconfigPath(), "utf8")).toContain('token: "token-one"');
    const p = start(env);
    await until(() => written(), 10_000, "the kubeconfig rewritten");
    expect(readFileSync(kubeconfigPath(), "utf8")).not.toContain("token-one");
    await p.waitForLog(
      re(
        /ZZZ-meshcni-kubeconfig holds no token of the plugin's own account /,
        /\(an older meshcni wrote the agent's token there\): it is rewritten/,
      ),
    );
    await p.waitForLog(/rewrote the plugin's kubeconfig, which held no token of the plugin's own account/);
  }, 60_000);

  test("an agent restarted while the API server is away keeps the token on disk (ready until it expires), and " +
    "renews it once the server is back", async () => {
    const env = await cluster();
    const port = freePort();
    const first = start(env);
    await until(() => written(), 10_000, "the kubeconfig");
    const before = readFileSync(kubeconfigPath(), "utf8");
    // The DaemonSet is there: SIGTERM keeps everything.
    expect(await first.stop("SIGTERM")).toBe(0);
    expect(readFileSync(kubeconfigPath(), "utf8")).toBe(before);
    api.setOutage("refuse");
    const second = start(env, ["--health-port", String(port)]);
    await second.waitForLog(
      re(
        /the plugin's kubeconfig holds a token of meshcni\/meshcni-plugin, /,
        /valid until \S+Z; asking for a new one/,
      ),
    );
    await second.waitForLog(
      re(
        /cannot get a token of meshcni\/meshcni-plugin from \S+: the API server did not answer/,
        /[^\n]*\(the current token stays valid until/,
      ),
    );
    const ready = async () => (await readyz(port).catch(() => ({ status: 0 }))).status === 200;
    await until(ready, 10_000, "/readyz 200 on the kept token");
    expect(readFileSync(kubeconfigPath(), "utf8")).toBe(before);
    api.setOutage(undefined);
    await until(() => written()!.token !== readWrittenToken(before)!.token, 40_000, "a new token");
    expect(pluginTokens()).toHaveLength(2);
  }, 90_000);
});

describe.skipIf(process.getuid?.() !== 0)("the plugin's fallback with its own token", () => {
  let netns: Netns;
  beforeAll(() => {
    netns = Netns.create(`mpt-${uniq()}`);
  });
  afterAll(() => netns?.delete());

  test("with the agent down, an ADD reads the pod through the kubeconfig's token and applies its rules; once that " +
    "token has expired the ADD fails closed (104), nothing applied", async () => {
    const env = await cluster(5);
    const agent = start(env);
    await until(() => isChainedIn(dirs, "10-calico.conflist") && written(), 10_000, "the chain and the kubeconfig");
    // The DaemonSet is there: SIGTERM keeps the chain and the kubeconfig, and the socket goes.
    expect(await agent.stop("SIGTERM")).toBe(0);
    const token = written()!.token;
    const entry = JSON.parse(dirs.file("10-calico.conflist")!).plugins.at(-1);
    const stdin = JSON.stringify({
      cniVersion: "1.0.0",
      name: "k8s-pod-network",
      ...entry,
      kubernetes: { ...entry.kubernetes, kubeconfig: kubeconfigPath() },
      linkerd: { ...entry.linkerd, "iptables-mode": "nft" },
    });
    const args = `IgnoreUnknown=1;K8S_POD_NAMESPACE=emojivoto;K8S_POD_NAME=${POD.metadata.name}`;
    api.requests.length = 0;
    const addEnv = (id: string) => cniEnv("ADD", { CNI_ARGS: args, CNI_NETNS: netns.path, CNI_CONTAINERID: id });
    const ok = await runPlugin(addEnv("c0ffee01"), stdin);
    expect(ok.stderr).toContain("applied");
    expect(ok.code).toBe(0);
    expect(netns.save("nft")).toContain("PROXY_INIT_OUTPUT");
    const asked = api.requests.filter((q) => q.path === POD_PATH);
    expect(asked.length).toBeGreaterThan(0);
    expect(asked.every((q) => q.user === PLUGIN_USER && q.authorization === `Bearer ${token}`)).toBe(true);
    netns.exec(["sh", "-c", "iptables-nft -t nat -F; iptables-nft -t nat -X; true"]);
    // No agent renews it: past its expiry the API server refuses it, and the pod fails closed.
    await until(() => Date.now() > pluginTokens().at(-1)!.expiresAt + 100, 8000, "the token's expiry");
    const refused = await runPlugin(addEnv("c0ffee02"), stdin);
    expect(refused.code).toBe(1);
    const err = JSON.parse(refused.stdout);
    expect(err.code).toBe(104);
    expect(err.details).toContain("the token in the plugin's kubeconfig has expired or was revoked");
    expect(netns.save("nft")).not.toContain("PROXY_INIT");
  }, 60_000);
});
