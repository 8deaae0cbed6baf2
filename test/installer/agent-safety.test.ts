// The compiled node agent against requests a caller other than the plugin could send on its
// socket (issue "safety", point 5): forged POST /v1/add for a network namespace that does not
// exist, or for another node's pod, never writes a record; the stand-in API server counts every
// request, so a pod of another node is shown never fetched. Real network namespaces.
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ADD_PATH } from "../../internal/agent/protocol.ts";
import { repoPath } from "../support/golden.ts";
import { isRoot, Netns, uniq } from "../support/netns.ts";
import { type Cluster, ensureBuilt, freePort, type HostDirs, type InstallerProcess, isChainedIn, startCluster, startInstaller, until } from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");
const NOT_INJECTED = JSON.parse(readFileSync(repoPath("testdata/pods/not-injected.json"), "utf8"));

let cluster: Cluster;
let dirs: HostDirs;
let running: InstallerProcess[] = [];
const spaces: Netns[] = [];

beforeAll(async () => {
  ensureBuilt();
  cluster = await startCluster();
  cluster.api.addNamespace({ metadata: { name: "default" } });
}, 60_000);
afterAll(async () => {
  for (const n of spaces) n.delete();
  await cluster?.close();
});
afterEach(async () => {
  for (const p of running) await p.stop("SIGKILL");
  running = [];
  dirs?.cleanup();
});

/** An agent up and answering, its health port, its version (a forged request names it, as the plugin does). */
async function startAgent(extra: string[] = []) {
  dirs = cluster.dirs();
  Bun.write(join(dirs.net, "10-calico.conflist"), CALICO);
  const port = freePort();
  const p = startInstaller(dirs, ["--plugin-binary", repoPath("dist/meshcni"), "--health-port", String(port), ...extra], cluster.env);
  running.push(p);
  await until(() => isChainedIn(dirs, "10-calico.conflist") && existsSync(dirs.socket), 10_000, "the agent up").catch((e) => {
    throw new Error(`${e.message}\n${p.log()}`);
  });
  const status = async () => (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
  await until(async () => (await status()).cache?.pods?.synced, 10_000, "the cache in sync");
  const version: string = (await status()).version;
  // The entry the runtime passes the plugin: the one the agent chained, as it wrote it.
  const entry = { cniVersion: "1.0.0", name: "k8s-pod-network", ...JSON.parse(dirs.file("10-calico.conflist")!).plugins.at(-1) };
  const ask = (path: string, init: RequestInit = {}) => fetch(`http://localhost${path}`, { ...init, unix: dirs.socket } as RequestInit);
  /** POST /v1/add as anyone who reaches the socket can send it. */
  const forgeAdd = async (pod: { namespace: string; name: string; uid?: string }, containerId: string, netnsPath: string) => {
    const res = await ask(ADD_PATH, {
      method: "POST",
      body: JSON.stringify({
        v: 1, version, stdin: JSON.stringify(entry),
        env: {
          CNI_COMMAND: "ADD", CNI_CONTAINERID: containerId, CNI_NETNS: netnsPath, CNI_IFNAME: "eth0", CNI_PATH: "/opt/cni/bin",
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod.namespace};K8S_POD_NAME=${pod.name}${pod.uid ? `;K8S_POD_UID=${pod.uid}` : ""}`,
        },
      }),
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const record = (id: string) => join(dirs.state, "containers", `${id}.json`);
  return { p, port, status, ask, forgeAdd, record };
}

/** A pod of `node` that no mesh redirects (its ADD writes a `skipped` record), in the API and so in the agent's cache when on node-a. */
function plainPod(name: string, node: string) {
  const pod = structuredClone(NOT_INJECTED);
  Object.assign(pod.metadata, { name, namespace: "default", uid: crypto.randomUUID() });
  pod.spec.nodeName = node;
  cluster.api.addPod(pod);
  return { namespace: "default", name, uid: pod.metadata.uid as string };
}

function netns(): Netns {
  const n = Netns.create(`mcsf-${uniq()}`);
  spaces.push(n);
  return n;
}

describe.if(isRoot())("a forged ADD writes no record", () => {
  test("for a network namespace that does not exist (or is not in the host's netns folder): declined (409), no record; a real one is planned", async () => {
    const a = await startAgent();
    const pod = plainPod(`plain-${uniq()}`, "node-a");
    await until(async () => (await a.ask(`/v1/pods/default/${pod.name}`)).status === 200, 5000, "the pod cached");
    for (const [id, path, why] of [
      ["forged01", `/var/run/netns/meshcni-nothing-${uniq()}`, "does not exist"],
      ["forged02", `/proc/${a.p.proc.pid}/ns/net`, "is not in /var/run/netns or /run/netns"],
      ["forged03", "/etc/hostname", "is not in /var/run/netns or /run/netns"],
    ] as const) {
      const r = await a.forgeAdd(pod, id, path);
      expect(r.status).toBe(409);
      expect(r.body.details).toContain(why);
    }
    // The plugin's own ADD for the pod, in its real namespace: planned, and recorded.
    const n = netns();
    const ok = await a.forgeAdd(pod, "real0001", n.path);
    expect(ok.status).toBe(200);
    expect(ok.body.summary.outcome).toBe("skipped");
    await until(() => existsSync(a.record("real0001")), 3000, "the record");
    await Bun.sleep(100);
    for (const id of ["forged01", "forged02", "forged03"]) expect(existsSync(a.record(id))).toBe(false);
    cluster.api.deletePod("default", pod.name);
  }, 30_000);

  test("for another node's pod: not planned (its lookup is 404, code 106), no record, and the pod never fetched", async () => {
    const a = await startAgent();
    const pod = plainPod(`far-${uniq()}`, "node-b");
    const n = netns();
    const seen = cluster.api.requests.length;
    const r = await a.forgeAdd(pod, "far00001", n.path);
    expect(r.status).toBe(200);
    expect(r.body.exitCode).toBe(1);
    expect(JSON.parse(r.body.stdout)).toMatchObject({ code: 106 });
    expect(r.body.record).toBe(false);
    expect(r.body.stdout).not.toContain(pod.uid);
    await Bun.sleep(200);
    expect(existsSync(a.record("far00001"))).toBe(false);
    // The agent asked for this node's pod of that name only, and never GET it by name.
    const asked = cluster.api.requests.slice(seen).filter((q) => q.path.startsWith("/api/v1/namespaces/default/pods"));
    expect(asked.map((q) => `${q.path}?${decodeURIComponent(q.query)}`)).toEqual([`/api/v1/namespaces/default/pods?fieldSelector=metadata.name=${pod.name},spec.nodeName=node-a`]);
    cluster.api.deletePod("default", pod.name);
  }, 30_000);
});
