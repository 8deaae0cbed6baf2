// The compiled node agent against requests a caller other than the plugin could send on its
// socket: forged POST /v1/add for a network namespace that does not
// exist, or for another node's pod, never writes a record; the stand-in API server counts every
// request, so a pod of another node is shown never fetched. Real network namespaces.
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { ADD_PATH } from "../../internal/wire/protocol.ts";
import { repoPath } from "../support/golden.ts";
import { isRoot, Netns, uniq } from "../support/netns.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  type InstallerProcess,
  isChainedIn,
  startCluster,
  startInstaller,
  until,
} from "./harness.ts";

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
  const args = ["--plugin-binary", repoPath("dist/meshcni"), "--health-port", String(port), ...extra];
  const p = startInstaller(dirs, args, cluster.env);
  running.push(p);
  const up = () => isChainedIn(dirs, "10-calico.conflist") && existsSync(dirs.socket);
  await until(up, 10_000, "the agent up").catch((e) => {
    throw new Error(`${e.message}\n${p.log()}`);
  });
  const status = async () => (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
  await until(async () => (await status()).cache?.pods?.synced, 10_000, "the cache in sync");
  const version: string = (await status()).version;
  // The entry the runtime passes the plugin: the one the agent chained, as it wrote it.
  const chained = JSON.parse(dirs.file("10-calico.conflist")!).plugins.at(-1);
  const entry = { cniVersion: "1.0.0", name: "k8s-pod-network", ...chained };
  const ask = (path: string, init: RequestInit = {}) =>
    fetch(`http://localhost${path}`, { ...init, unix: dirs.socket } as RequestInit);
  /** POST /v1/add as anyone who reaches the socket can send it. */
  type PodRef = { namespace: string; name: string; uid?: string };
  const forgeAdd = async (pod: PodRef, containerId: string, netnsPath: string) => {
    const uid = pod.uid ? `;K8S_POD_UID=${pod.uid}` : "";
    const res = await ask(ADD_PATH, {
      method: "POST",
      body: JSON.stringify({
        v: 1,
        version,
        stdin: JSON.stringify(entry),
        env: {
          CNI_COMMAND: "ADD",
          CNI_CONTAINERID: containerId,
          CNI_NETNS: netnsPath,
          CNI_IFNAME: "eth0",
          CNI_PATH: "/opt/cni/bin",
          CNI_ARGS: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${pod.namespace};K8S_POD_NAME=${pod.name}${uid}`,
        },
      }),
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  const record = (id: string) => join(dirs.state, "containers", `${id}.json`);
  return { p, port, status, ask, forgeAdd, record };
}

/** A pod of `node` no mesh redirects (its ADD writes a `skipped` record), in the API (in the cache on node-a). */
function plainPod(name: string, node: string) {
  const pod = structuredClone(NOT_INJECTED);
  Object.assign(pod.metadata, { name, namespace: "default", uid: crypto.randomUUID() });
  pod.spec.nodeName = node;
  cluster.api.addPod(pod);
  return { namespace: "default", name, uid: pod.metadata.uid as string };
}

/** A record as the plugin writes it. */
const recordText = (containerId: string, name: string, decision: "meshed" | "skipped") =>
  JSON.stringify({ v: 1, containerId, namespace: "default", name, decision, reason: "r", time: "2026-01-01T10:00Z" });

function netns(): Netns {
  const n = Netns.create(`mcsf-${uniq()}`);
  spaces.push(n);
  return n;
}

describe.if(isRoot())("a forged ADD writes no record", () => {
  test("for a namespace not there or not in the netns folder: 409, no record; a real one is planned", async () => {
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

  test("for another node's pod: not planned (its lookup 404, code 106), no record, the pod never fetched", async () => {
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
    expect(asked.map((q) => `${q.path}?${decodeURIComponent(q.query)}`)).toEqual([
      `/api/v1/namespaces/default/pods?fieldSelector=metadata.name=${pod.name},spec.nodeName=node-a`,
    ]);
    cluster.api.deletePod("default", pod.name);
  }, 30_000);
});

describe.if(isRoot())("the records are bounded", () => {
  test("past --max-records the agent plans no ADD (409, logged once, counted); below it again, it plans", async () => {
    const a = await startAgent(["--max-records", "3"]);
    const pod = plainPod(`bound-${uniq()}`, "node-a");
    await until(async () => (await a.ask(`/v1/pods/default/${pod.name}`)).status === 200, 5000, "the pod cached");
    const n = netns();
    for (const id of ["bound001", "bound002", "bound003"]) {
      expect((await a.forgeAdd(pod, id, n.path)).status).toBe(200);
      await until(() => existsSync(a.record(id)), 3000, `record ${id}`);
    }
    for (const id of ["bound004", "bound005"]) {
      const r = await a.forgeAdd(pod, id, n.path);
      expect(r.status).toBe(409);
      expect(r.body.details).toContain("the state folder holds 3 records, the agent's bound (--max-records 3)");
    }
    await Bun.sleep(100);
    expect(existsSync(a.record("bound004")) || existsSync(a.record("bound005"))).toBe(false);
    expect(a.p.log().match(/the plugin runs ADDs itself: the state folder holds 3 records/g)?.length).toBe(1);
    const metrics = await (await fetch(`http://127.0.0.1:${a.port}/metrics`)).text();
    expect(metrics).toContain("\nmeshcni_agent_records_full_total 2\n");
    expect(metrics).toContain("\nmeshcni_agent_records 3\n");
    // A DEL (the plugin removes the record, then reports): room for one more.
    await Bun.file(a.record("bound001")).delete();
    await until(async () => (await a.forgeAdd(pod, "bound006", n.path)).status === 200, 3000, "planned again");
    cluster.api.deletePod("default", pod.name);
  }, 30_000);
});

describe("the plugin's DEL reports", () => {
  const del = (containerId: string) => ({
    v: 1,
    command: "DEL",
    containerId,
    pod: { namespace: "default", name: "web-1" },
    outcome: "removed",
    reason: "rules removed",
    durationMs: 3,
    lines: [`meshcni: info container=${containerId}: removed the rules`],
    time: new Date().toISOString(),
    version: "0.1.0",
  });

  test("printed only for a container the agent held a record of; others counted, not printed", async () => {
    const a = await startAgent();
    // A record the plugin wrote, then removed by its DEL just before the report.
    const id = "held0001";
    Bun.write(a.record(id), recordText(id, "web-1", "meshed"));
    await until(async () => (await a.status()).pods.handled === 1, 3000, "the record held");
    await Bun.file(a.record(id)).delete();
    // The same forged report twice: the first leaves no trace that would make the second "known".
    for (const c of ["forged99", "forged99", id]) {
      expect((await a.ask("/v1/reports", { method: "POST", body: JSON.stringify(del(c)) })).status).toBe(204);
    }
    await a.p.waitForLog(/plugin DEL pod=default\/web-1 outcome=removed .*container=held0001/);
    await Bun.sleep(100);
    expect(a.p.log()).not.toContain("forged99");
    const metrics = await (await fetch(`http://127.0.0.1:${a.port}/metrics`)).text();
    expect(metrics).toContain("\nmeshcni_agent_unrecorded_del_reports_total 2\n");
    expect(metrics).toContain('\nmeshcni_plugin_requests_total{command="DEL",outcome="removed"} 1\n');
    expect((await a.status()).pods.handled).toBe(0);
  }, 30_000);
});

describe.if(isRoot())("/status from memory", () => {
  test("no record file is opened to answer it; the plugin's changes still show without a resync", async () => {
    const a = await startAgent(["--resync-seconds", "3600"]);
    for (let i = 0; i < 50; i++) {
      const id = `mem${String(i).padStart(5, "0")}`;
      Bun.write(a.record(id), recordText(id, `p${i}`, "skipped"));
    }
    await until(async () => (await a.status()).pods.handled === 50, 5000, "the records held");
    // Every file the agent opens while it answers /status three times.
    const trace = join(dirs.root, "strace.out");
    const argv = ["strace", "-f", "-qq", "-e", "trace=open,openat,openat2", "-o", trace, "-p", String(a.p.proc.pid)];
    const strace = Bun.spawn(argv, { stderr: "pipe" });
    await Bun.sleep(500); // attached
    for (let i = 0; i < 3; i++) expect((await a.status()).pods.handled).toBe(50);
    strace.kill("SIGINT");
    await strace.exited;
    const opened = readFileSync(trace, "utf8");
    expect(opened).toContain("openat"); // the trace saw the agent work (the kubeconfig, the binary)
    expect(opened.split("\n").filter((l) => l.includes("/containers/")).length).toBe(0);
    // The plugin removes one, writes another: /status follows through the watch alone.
    await Bun.file(a.record("mem00000")).delete();
    Bun.write(a.record("new00001"), recordText("new00001", "n", "meshed"));
    await until(
      async () => {
        const ids = (await a.status()).pods.containers.map((c: { containerId: string }) => c.containerId);
        return ids.length === 50 && ids.includes("new00001") && !ids.includes("mem00000");
      },
      3000,
      "the change in /status",
    );
  }, 30_000);
});
