// The compiled meshcni-installer as the node agent, with real signals, against temporary host
// folders and the stand-in API server: restarts that never unmesh the node (SIGTERM and SIGINT
// keep everything while the DaemonSet exists) and the cases that undo (the records stay for a
// reinstall); `--uninstall` (which removes them); the socket and its folder; pod lookups through
// the agent; the plugin's reports and its fallback log on the agent's stdout; /metrics and
// /status; the periodic resync putting right what a watch missed.
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Report } from "../../internal/wire/protocol.ts";
import type { PodRecord } from "../../internal/wire/state.ts";
import { repoPath } from "../support/golden.ts";
import { checkExposition } from "../support/prometheus.ts";
import {
  type Cluster,
  DAEMONSET_PATH,
  daemonSet,
  ensureBuilt,
  freePort,
  type HostDirs,
  INSTALLER,
  type InstallerProcess,
  installerArgs,
  isChainedIn,
  NODE_PATH,
  readyz,
  startCluster,
  startInstaller,
  until,
} from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");
const KUBECONFIG = "ZZZ-meshcni-kubeconfig";

let cluster: Cluster;
let dirs: HostDirs;
let running: InstallerProcess[] = [];
let fakePlugin: string;

beforeAll(async () => {
  ensureBuilt();
  cluster = await startCluster();
}, 60_000);
afterAll(() => cluster?.close());
afterEach(async () => {
  for (const p of running) await p.stop("SIGKILL");
  running = [];
  cluster.api.faults.clear();
  cluster.setDaemonSet("absent");
  cluster.api.addNamespace({ metadata: { name: "meshcni" } });
  cluster.api.objects.set(NODE_PATH, {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: "node-a", labels: { "kubernetes.io/os": "linux" } },
    spec: {},
  });
  dirs?.cleanup();
});

function setup(): HostDirs {
  dirs = cluster.dirs();
  fakePlugin = join(dirs.root, "meshcni-build");
  writeFileSync(fakePlugin, `#!/bin/sh\n# stand-in plugin ${Math.random()}\n`, { mode: 0o755 });
  writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
  return dirs;
}

function start(extra: string[] = [], env: Record<string, string> = {}): InstallerProcess {
  const p = startInstaller(dirs, ["--plugin-binary", fakePlugin, ...extra], { ...cluster.env, ...env });
  running.push(p);
  return p;
}

const isSocket = (path: string) => statSync(path, { throwIfNoEntry: false })?.isSocket() === true;

/** Started, chained, and answering on its socket. */
async function startAgent(extra: string[] = [], env: Record<string, string> = {}): Promise<InstallerProcess> {
  const p = start(extra, env);
  await until(
    () => isChainedIn(dirs, "10-calico.conflist") && existsSync(join(dirs.net, KUBECONFIG)) && isSocket(dirs.socket),
    10_000,
    "the agent up",
  ).catch((e) => {
    throw new Error(`${e.message}\n${p.log()}`);
  });
  return p;
}

/** Everything the installation consists of, as bytes. */
function installation(): Record<string, string | undefined> {
  const bin = join(dirs.bin, "meshcni");
  return {
    conflist: dirs.file("10-calico.conflist"),
    kubeconfig: dirs.file(KUBECONFIG),
    binary: existsSync(bin) ? readFileSync(bin, "utf8") : undefined,
  };
}

function writeRecord(r: Partial<PodRecord> & { containerId: string }): void {
  mkdirSync(join(dirs.state, "containers"), { recursive: true });
  const record: PodRecord = {
    v: 1,
    namespace: "emojivoto",
    name: "web-1",
    uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f",
    decision: "meshed",
    reason: "has a linkerd-proxy container",
    backend: "iptables-nft",
    families: [4],
    time: "2026-01-01T10:00:00.000Z",
    ...r,
  };
  writeFileSync(join(dirs.state, "containers", `${r.containerId}.json`), JSON.stringify(record));
}

const ask = (path: string, init: RequestInit = {}) =>
  fetch(`http://localhost${path}`, { ...init, unix: dirs.socket } as RequestInit);

function report(over: Partial<Report> = {}): Report {
  return {
    v: 1,
    command: "ADD",
    containerId: "3f0c9b6a1e2d",
    pod: { namespace: "emojivoto", name: "web-1", uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f" },
    outcome: "meshed",
    reason: "pod emojivoto/web-1: has a linkerd-proxy container",
    rules: 12,
    backend: "iptables-nft",
    lookup: "agent-cache",
    durationMs: 21,
    lines: ["meshcni: info container=3f0c9b6a1e2d pod=emojivoto/web-1: applied 12 rules"],
    time: new Date().toISOString(),
    version: "0.1.0",
    ...over,
  };
}

describe("restarts never unmesh the node", () => {
  test("SIGTERM and SIGINT while the DaemonSet exists: chain, binary, kubeconfig and records stay; the next agent takes over without rewriting", async () => {
    setup();
    cluster.setDaemonSet("present");
    const first = await startAgent();
    writeRecord({ containerId: "aaaa1111" });
    const before = installation();
    expect(await first.stop("SIGTERM")).toBe(0);
    expect(first.log()).toContain(
      "stopping: its DaemonSet meshcni/meshcni-node exists and runs on " +
        "node node-a: a new agent will take over; leaving meshcni installed",
    );
    expect(installation()).toEqual(before);
    expect(existsSync(join(dirs.state, "containers", "aaaa1111.json"))).toBe(true);
    // Its socket goes with it: the plugin falls back to its kubeconfig until the next agent.
    expect(existsSync(dirs.socket)).toBe(false);

    const second = await startAgent();
    await second.waitForLog(/meshcni is chained in .*10-calico\.conflist/);
    expect(second.log()).not.toMatch(
      /chained meshcni: wrote|wrote the plugin's kubeconfig|installed the plugin binary/,
    );
    expect(await second.stop("SIGINT")).toBe(0);
    expect(installation()).toEqual(before);
    // It asked the API server with the service account's token.
    const asked = cluster.api.requests.filter((r) => r.path === DAEMONSET_PATH);
    expect(asked.length).toBeGreaterThanOrEqual(2);
    expect(asked.every((r) => r.authorization === "Bearer token-one")).toBe(true);
    expect(cluster.api.requests.some((r) => r.path === NODE_PATH)).toBe(true);
  }, 30_000);

  const undoCases: [string, () => void, RegExp][] = [
    [
      "the DaemonSet is gone (404)",
      () => cluster.setDaemonSet("absent"),
      /its DaemonSet meshcni\/meshcni-node is gone \(404\)/,
    ],
    [
      "the DaemonSet is being deleted",
      () => cluster.setDaemonSet("deleting"),
      /is being deleted \(deletionTimestamp 2026-01-01T00:00:00Z\)/,
    ],
    [
      "the namespace is being deleted",
      () => {
        cluster.setDaemonSet("present");
        cluster.api.addNamespace({ metadata: { name: "meshcni", deletionTimestamp: "2026-01-01T00:00:00Z" } } as never);
      },
      /its namespace meshcni is being deleted/,
    ],
    [
      "the service account was deleted (401)",
      () => {
        cluster.setDaemonSet("present");
        cluster.api.faults.set(DAEMONSET_PATH, { kind: "status", code: 401 });
      },
      /no longer accepts the agent's service account token \(401\)/,
    ],
    [
      "the RBAC was deleted (403)",
      () => {
        cluster.setDaemonSet("present");
        cluster.api.faults.set(DAEMONSET_PATH, { kind: "status", code: 403 });
      },
      /may no longer read its DaemonSet meshcni\/meshcni-node \(403\)/,
    ],
    [
      "the DaemonSet no longer selects the node",
      () => {
        cluster.api.objects.set(DAEMONSET_PATH, daemonSet({ nodeSelector: { "meshcni.io/enabled": "true" } }));
      },
      /no longer runs on node node-a: its nodeSelector wants meshcni.io\/enabled=true/,
    ],
  ];
  for (const [what, arrange, why] of undoCases) {
    test(`SIGTERM undoes when ${what}: chain, binary, kubeconfig, socket; the records and the fallback log stay for a reinstall`, async () => {
      setup();
      cluster.setDaemonSet("present");
      const p = await startAgent();
      writeRecord({ containerId: "bbbb2222" });
      writeFileSync(join(dirs.state, "plugin.log"), "");
      arrange();
      expect(await p.stop("SIGTERM")).toBe(0);
      expect(p.log()).toMatch(why);
      expect(p.log()).toContain("meshcni is uninstalled from this node");
      expect(p.log()).toContain(
        `the plugin's records stay in ${dirs.state} for a later install ` +
          `(--uninstall removes them; a reboot empties the folder)`,
      );
      expect(dirs.file("10-calico.conflist")).toBe(CALICO);
      expect(dirs.names()).toEqual(["10-calico.conflist"]);
      expect(readdirSync(dirs.bin)).toEqual([]);
      expect(existsSync(dirs.socket)).toBe(false);
      expect(readdirSync(dirs.state).sort()).toEqual(["containers", "plugin.log"]);
      expect(readdirSync(join(dirs.state, "containers"))).toEqual(["bbbb2222.json"]);
    }, 30_000);
  }

  test("an API server that does not answer: nothing is undone (after trying for a while)", async () => {
    setup();
    cluster.setDaemonSet("present");
    const p = await startAgent();
    const before = installation();
    cluster.api.setGlobalFault({ kind: "status", code: 503 });
    try {
      expect(await p.stop("SIGTERM")).toBe(0);
    } finally {
      cluster.api.setGlobalFault(undefined);
    }
    expect(p.log()).toMatch(
      /stopping: cannot tell whether its DaemonSet meshcni\/meshcni-node still exists: the API server answered 503.*; leaving meshcni installed/,
    );
    expect(installation()).toEqual(before);
    // It asked again while the answers were 503, not just once.
    expect(cluster.api.requests.filter((r) => r.path === DAEMONSET_PATH).length).toBeGreaterThan(2);
  }, 30_000);

  test("--uninstall always undoes, records, fallback logs and earlier agents' notes included", async () => {
    setup();
    cluster.setDaemonSet("present");
    const p = await startAgent();
    writeRecord({ containerId: "cccc3333" });
    writeFileSync(join(dirs.state, "plugin.log"), "meshcni: info left behind\n");
    for (const note of ["records-since", "chained-since"]) writeFileSync(join(dirs.state, note), "1764000000000\n");
    p.proc.kill("SIGKILL");
    await p.stop();
    const u = Bun.spawnSync([INSTALLER, ...installerArgs(dirs, ["--uninstall"])], {
      env: { PATH: Bun.env.PATH ?? "/usr/bin:/bin" },
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(u.exitCode).toBe(0);
    expect(dirs.names()).toEqual(["10-calico.conflist"]);
    expect(dirs.file("10-calico.conflist")).toBe(CALICO);
    expect(readdirSync(dirs.bin)).toEqual([]);
    expect(existsSync(dirs.state)).toBe(false);
  }, 30_000);
});

describe("the agent's socket", () => {
  test("mode 0000 in a 0700 folder, named in the conflist entry; the node's pods answered from the watch cache with no API request, others through one list by name and node", async () => {
    setup();
    cluster.api.addPod({
      metadata: { name: "web-1", namespace: "emojivoto", uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f" },
      spec: { nodeName: "node-a", containers: [{ name: "app" }] },
    } as never);
    cluster.api.addPod({
      metadata: { name: "elsewhere", namespace: "emojivoto", uid: "1c8a8b1f-3d2e-4e9f-8b66-5a4c3d2e1f00" },
      spec: { nodeName: "node-b", containers: [{ name: "app" }] },
    } as never);
    cluster.api.addNamespace({
      metadata: { name: "emojivoto", annotations: { "config.linkerd.io/skip-outbound-ports": "443" } },
    });
    const port = freePort();
    const before = cluster.api.requests.length;
    await startAgent(["--health-port", String(port)]);
    expect(statSync(dirs.socket).mode & 0o7777).toBe(0);
    expect(statSync(dirs.state).mode & 0o777).toBe(0o700);
    const entry = JSON.parse(dirs.file("10-calico.conflist")!).plugins.at(-1);
    expect([entry.agent_socket, entry.state_dir]).toEqual([dirs.socket, dirs.state]);
    const status = async () => (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
    await until(
      async () => (await status()).cache?.pods?.synced && (await status()).cache?.namespaces?.synced,
      10_000,
      "the cache in sync",
    );

    const podPath = "/api/v1/namespaces/emojivoto/pods/web-1";
    const seen = cluster.api.requests.length;
    const ok = await ask("/v1/pods/emojivoto/web-1?uid=0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f");
    expect(ok.status).toBe(200);
    const body = (await ok.json()) as any;
    expect(body.source).toBe("cache");
    expect(body.pod.metadata.uid).toBe("0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f");
    expect(body.namespace.metadata.annotations).toEqual({ "config.linkerd.io/skip-outbound-ports": "443" });
    // Zero requests to the API server for a cached pod, by the stand-in's count.
    expect(cluster.api.count(podPath)).toBe(0);
    expect(cluster.api.count("/api/v1/namespaces/emojivoto", "get")).toBe(0);
    expect(cluster.api.requests.slice(seen)).toEqual([]);
    // The cache's own requests: one list and one watch of this node's pods, one of namespaces, with
    // the agent's own service account.
    const cacheRequests = cluster.api.requests
      .slice(before)
      .filter((r) => r.path === "/api/v1/pods" || r.path === "/api/v1/namespaces");
    expect(
      cacheRequests
        .filter((r) => r.path === "/api/v1/pods")
        .map((r) => new URLSearchParams(r.query).get("fieldSelector")),
    ).toEqual(["spec.nodeName=node-a", "spec.nodeName=node-a"]);
    expect(cacheRequests.every((r) => r.authorization === "Bearer token-one")).toBe(true);

    // A pod of this node the watch has not delivered: the agent's own list, by name and node.
    const list = "/api/v1/namespaces/emojivoto/pods";
    cluster.api.objects.set(`${list}/late`, {
      metadata: { name: "late", namespace: "emojivoto", uid: "2d9b9c20-4e3f-4fa0-9c77-6b5d4e3f2a11" },
      spec: { nodeName: "node-a", containers: [{ name: "app" }] },
    });
    const late = await ask("/v1/pods/emojivoto/late");
    expect(late.status).toBe(200);
    expect(((await late.json()) as any).source).toBe("api");
    expect(cluster.api.count(list, "list")).toBe(1);
    // Another node's pod: neither fetched nor answered (404, as a missing pod).
    const elsewhere = await ask("/v1/pods/emojivoto/elsewhere");
    expect(elsewhere.status).toBe(404);
    expect(await elsewhere.text()).not.toContain("1c8a8b1f");
    expect(cluster.api.count(`${list}/late`, "get") + cluster.api.count(`${list}/elsewhere`, "get")).toBe(0);
    expect(
      cluster.api.requests.filter((r) => r.path === list).map((r) => new URLSearchParams(r.query).get("fieldSelector")),
    ).toEqual(["metadata.name=late,spec.nodeName=node-a", "metadata.name=elsewhere,spec.nodeName=node-a"]);

    const missing = await ask("/v1/pods/emojivoto/web-2");
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as any).code).toBe(106);
    // Another UID than the cached pod's: never from the cache; the API still has the old pod.
    const recreated = await ask("/v1/pods/emojivoto/web-1?uid=11111111-2222-4333-8444-555555555555");
    expect(recreated.status).toBe(404);
    expect(((await recreated.json()) as any).details).toContain("has UID 0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f");
    expect([cluster.api.count(podPath, "get"), cluster.api.count(list, "list")]).toEqual([0, 4]);
    cluster.api.faults.set(list, { kind: "status", code: 500 });
    const failing = await ask("/v1/pods/emojivoto/late");
    expect(failing.status).toBe(503);
    cluster.api.faults.delete(list);
    expect((await ask("/v1/pods/Emojivoto/web-1")).status).toBe(400);
    const s = await status();
    expect(s.cache).toMatchObject({
      pods: { synced: true, objects: 1, lists: 1 },
      namespaces: { synced: true },
      lookups: { cache: 1, api: 1, failed: 4 },
    });
    const { samples } = checkExposition(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text());
    expect(samples.get("meshcni_agent_cached_pods")).toBe(1);
    expect(samples.get('meshcni_agent_cache_synced{resource="pods"}')).toBe(1);
    expect(samples.get('meshcni_agent_cache_synced{resource="namespaces"}')).toBe(1);
    expect(samples.get('meshcni_agent_cache_lists_total{resource="pods"}')).toBe(1);
    expect(samples.get('meshcni_agent_lookups_total{answer="cache"}')).toBe(1);
    expect(samples.get('meshcni_agent_lookups_total{answer="api"}')).toBe(1);
    for (const name of ["web-1", "elsewhere", "late"]) cluster.api.deletePod("emojivoto", name);
  }, 30_000);
});

describe("every plugin decision on the agent's stdout", () => {
  test("reports: the plugin's lines and a summary naming the pod; a failed ADD's reason; pod-controlled text cannot forge a line", async () => {
    setup();
    const p = await startAgent();
    const sent = [
      report(),
      report({
        containerId: "9a8b7c6d5e4f",
        outcome: "failed",
        code: 11,
        lookup: "kubeconfig",
        durationMs: 5003,
        rules: undefined,
        backend: undefined,
        pod: { namespace: "emojivoto", name: "voting-2" },
        reason: "try again later: cannot reach the API server https://10.96.0.1:443 for pod emojivoto/voting-2",
        lines: ["meshcni: error container=9a8b7c6d5e4f pod=emojivoto/voting-2: try again later"],
      }),
      report({
        containerId: "evil",
        pod: { namespace: "evil", name: "x\n2026-01-01T00:00:00.000Z info  plugin ADD pod=evil/x outcome=meshed" },
        outcome: "failed",
        code: 7,
        reason: "invalid annotation \u001b]0;owned\u0007\nforged",
        lines: ["meshcni: error \u001b[2J cleared?\nmeshcni: info forged"],
      }),
    ];
    for (const r of sent)
      expect((await ask("/v1/reports", { method: "POST", body: JSON.stringify(r) })).status).toBe(204);
    await p.waitForLog(/plugin ADD pod="evil\/x/);
    const out = p.log();
    expect(out).toMatch(/info {2}meshcni: info container=3f0c9b6a1e2d pod=emojivoto\/web-1: applied 12 rules\n/);
    expect(out).toMatch(
      /info {2}plugin ADD pod=emojivoto\/web-1 outcome=meshed rules=12 backend=iptables-nft lookup=agent-cache duration=21ms uid=0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f container=3f0c9b6a1e2d.* reason="pod emojivoto\/web-1: has a linkerd-proxy container"\n/,
    );
    expect(out).toMatch(
      /error plugin ADD pod=emojivoto\/voting-2 outcome=failed code=11 lookup=kubeconfig duration=5003ms container=9a8b7c6d5e4f.* reason="try again later: cannot reach the API server https:\/\/10.96.0.1:443 for pod emojivoto\/voting-2"\n/,
    );
    // The hostile report: two lines (its one line and the summary), no escape character, no
    // forged summary line and no line starting with a forged timestamp.
    expect(out).not.toContain("\u001b");
    expect(out.split("\n").filter((l) => /^\S+ \S+ +plugin ADD pod="?evil/.test(l)).length).toBe(1);
    expect(out.split("\n").filter((l) => /^\S+ \S+ +plugin ADD pod=evil\/x outcome=meshed/.test(l))).toEqual([]);
    expect(out.split("\n").filter((l) => /^2026-01-01T00:00:00.000Z/.test(l))).toEqual([]);
    expect(out).toContain(
      'plugin ADD pod="evil/x\\n2026-01-01T00:00:00.000Z info  ' +
        'plugin ADD pod=evil/x outcome=meshed" outcome=failed code=7',
    );
    expect(out).toContain("meshcni: error \\x1b[2J cleared?\\nmeshcni: info forged");
    // Everything on stdout, failed ADDs included.
    expect(await p.stop("SIGKILL")).not.toBe(0);
  }, 30_000);

  test("the fallback log the plugin wrote while the agent was down is printed at start (older file first) and emptied; later ones at the next resync", async () => {
    setup();
    mkdirSync(dirs.state, { recursive: true });
    writeFileSync(join(dirs.state, "plugin.log.1"), "meshcni: warn pod=emojivoto/web-0: older, rotated\n");
    writeFileSync(
      join(dirs.state, "plugin.log"),
      "meshcni: error pod=emojivoto/web-1: try again later: the agent did not answer\n",
    );
    const port = freePort();
    const p = await startAgent(["--resync-seconds", "1", "--health-port", String(port)]);
    await p.waitForLog(/end of .*plugin\.log\n/);
    const out = p.log();
    const older = out.indexOf("older, rotated");
    const newer = out.indexOf("pod=emojivoto/web-1: try again later: the agent did not answer");
    expect(older).toBeGreaterThan(0);
    expect(newer).toBeGreaterThan(older);
    expect(out).toMatch(
      /the plugin wrote 1 line\(s\) to .*plugin\.log\.1 while the agent was not answering; they follow/,
    );
    expect(readdirSync(dirs.state).filter((n) => n.includes("plugin.log"))).toEqual([]);
    // A plugin that could not reach the agent later (say, a wedged socket): printed at a resync.
    writeFileSync(
      join(dirs.state, "plugin.log"),
      "meshcni: warn pod=emojivoto/web-9: the agent did not answer in time\n",
    );
    await p.waitForLog(/meshcni: warn pod=emojivoto\/web-9: the agent did not answer in time/, 5000);
    await until(() => !existsSync(join(dirs.state, "plugin.log")), 2000, "the log emptied");
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(checkExposition(metrics).samples.get("meshcni_agent_fallback_log_lines_total")).toBe(3);
  }, 30_000);
});

describe("/metrics and /status", () => {
  test("live values after reports and lookups; /status names the chain, the binary, the kubeconfig and the pods the plugin handled", async () => {
    setup();
    cluster.api.addNamespace({ metadata: { name: "emojivoto" } });
    const port = freePort();
    await startAgent(["--health-port", String(port)]);
    // In the API, on this node, not (yet) delivered by the watch: the agent's own request.
    cluster.api.objects.set("/api/v1/namespaces/emojivoto/pods/web-1", {
      metadata: { name: "web-1", namespace: "emojivoto", uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f" },
      spec: { nodeName: "node-a" },
    });
    writeRecord({ containerId: "dddd4444" });
    writeRecord({
      containerId: "eeee5555",
      name: "batch-1",
      decision: "skipped",
      reason: "no linkerd-proxy container",
    });
    writeFileSync(join(dirs.state, "containers", "ffff6666.json"), "{ torn");
    await ask("/v1/pods/emojivoto/web-1");
    await ask("/v1/pods/emojivoto/nope");
    await ask("/v1/pods/BAD/x");
    const reports = [
      report(),
      report({ durationMs: 180 }),
      report({ outcome: "failed", code: 11, lookup: "kubeconfig", durationMs: 5003, reason: "try again later" }),
      report({ outcome: "skipped", lookup: "none", durationMs: 2, reason: "excluded namespace" }),
      // A DEL's report counts (and prints) only for a container the agent holds a record of.
      report({ command: "DEL", containerId: "dddd4444", outcome: "untouched", durationMs: 1, reason: "no record" }),
    ];
    for (const r of reports) await ask("/v1/reports", { method: "POST", body: JSON.stringify(r) });
    const metricsUrl = `http://127.0.0.1:${port}/metrics`;
    await until(
      async () => (await (await fetch(metricsUrl)).text()).includes('command="DEL"'),
      5000,
      "the DEL counted",
    );
    const res = await fetch(metricsUrl);
    expect(res.headers.get("content-type")).toStartWith("text/plain; version=0.0.4");
    const { samples } = checkExposition(await res.text());
    expect(samples.get('meshcni_plugin_requests_total{command="ADD",outcome="meshed"}')).toBe(2);
    expect(samples.get('meshcni_plugin_requests_total{command="ADD",outcome="failed"}')).toBe(1);
    expect(samples.get('meshcni_plugin_requests_total{command="ADD",outcome="skipped"}')).toBe(1);
    expect(samples.get('meshcni_plugin_requests_total{command="DEL",outcome="untouched"}')).toBe(1);
    expect(samples.get("meshcni_plugin_add_duration_seconds_count")).toBe(4);
    expect(samples.get('meshcni_plugin_add_duration_seconds_bucket{le="0.025"}')).toBe(2);
    expect(samples.get('meshcni_plugin_add_duration_seconds_bucket{le="0.25"}')).toBe(3);
    expect(samples.get('meshcni_plugin_add_duration_seconds_bucket{le="+Inf"}')).toBe(4);
    expect(samples.get("meshcni_plugin_add_duration_seconds_sum")).toBeCloseTo(0.021 + 0.18 + 5.003 + 0.002, 5);
    expect(samples.get('meshcni_plugin_errors_total{code="11"}')).toBe(1);
    expect(samples.get("meshcni_api_fallbacks_total")).toBe(1);
    expect(samples.get('meshcni_agent_lookups_total{answer="api"}')).toBe(1);
    expect(samples.get('meshcni_agent_lookups_total{answer="not_found"}')).toBe(1);
    expect(samples.get("meshcni_agent_bad_requests_total")).toBe(1);
    expect(samples.get("meshcni_installer_ready")).toBe(1);
    expect(samples.get("meshcni_repairs_total")).toBe(0);
    expect(samples.get("meshcni_repair_refusals_total")).toBe(0);
    expect(samples.get("meshcni_agent_bypassing_pods")).toBe(0);
    expect(samples.get("meshcni_agent_unverified_pods")).toBe(0);
    expect(samples.get("meshcni_agent_cached_pods")).toBe(0);

    const status = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
    expect(status).toMatchObject({
      node: "node-a",
      namespace: "meshcni",
      daemonSet: "meshcni-node",
      ready: true,
      problems: [],
      chain: { path: join(dirs.net, "10-calico.conflist"), file: "10-calico.conflist", current: true },
      binary: { path: join(dirs.bin, "meshcni"), current: true },
      kubeconfig: { path: join(dirs.net, KUBECONFIG), current: true },
      cache: { pods: { synced: true }, namespaces: { synced: true } },
      pods: { handled: 2, meshed: 1, skipped: 1, unreadableRecords: ["ffff6666.json"] },
      plugin: { reports: 5, apiFallbacks: 1, badRequests: 1 },
      agent: { socket: dirs.socket, stateDir: dirs.state },
    });
    expect(typeof status.version).toBe("string");
    expect(status.pods.containers).toEqual([
      {
        namespace: "emojivoto",
        name: "web-1",
        uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f",
        containerId: "dddd4444",
        decision: "meshed",
        reason: "has a linkerd-proxy container",
        backend: "iptables-nft",
        time: "2026-01-01T10:00:00.000Z",
      },
      {
        namespace: "emojivoto",
        name: "batch-1",
        uid: "0b7f7a0e-2c1d-4d8e-9a55-4f3b2c1d0e9f",
        containerId: "eeee5555",
        decision: "skipped",
        reason: "no linkerd-proxy container",
        backend: "iptables-nft",
        time: "2026-01-01T10:00:00.000Z",
      },
    ]);

    // Not ready: /status says why, and so do /readyz and the gauge.
    writeFileSync(join(dirs.bin, "meshcni"), "someone else's binary");
    const broken = (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
    expect(broken.ready).toBe(false);
    expect(broken.binary).toEqual({
      path: join(dirs.bin, "meshcni"),
      current: false,
      problem: `${join(dirs.bin, "meshcni")} is not the installed meshcni binary`,
      // No host paths mounted here: the host check says it was skipped.
      hostCheck: expect.stringMatching(/^host check skipped: \S+ is not there/),
    });
    expect(await (await fetch(`http://127.0.0.1:${port}/nothing`)).text()).toContain("/metrics, /status");
    cluster.api.objects.delete("/api/v1/namespaces/emojivoto/pods/web-1");
  }, 30_000);
});

describe("the periodic resync", () => {
  test("puts right a CA rewritten in place, which the folder's watch cannot see", async () => {
    setup();
    const port = freePort();
    const p = await startAgent(["--resync-seconds", "3", "--health-port", String(port)]);
    const resyncs = async () => checkExposition(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text()).samples;
    await until(
      async () => (await resyncs()).get("meshcni_installer_resyncs_total")! >= 1 && dirs.file(KUBECONFIG),
      10_000,
      "a first resync",
    );
    const before = dirs.file(KUBECONFIG)!;
    // Just after a resync: the next one is about 3 s away. A CA bundle with one more certificate.
    const bundle = `${cluster.caPem}\n${cluster.caPem}`;
    writeFileSync(join(dirs.sa, "..data", "ca.crt"), bundle);
    await Bun.sleep(1000);
    // The watch on the service account folder saw nothing: the kubeconfig still has the old CA.
    expect(dirs.file(KUBECONFIG)).toBe(before);
    expect((await readyz(port)).status).toBe(503);
    await until(
      () => dirs.file(KUBECONFIG)?.includes(Buffer.from(bundle).toString("base64")),
      10_000,
      "the resync's rewrite",
    );
    await p.waitForLog(
      /periodic resync put right what no watch event announced: .*ZZZ-meshcni-kubeconfig is out of date/,
    );
    expect((await resyncs()).get("meshcni_installer_resync_repairs_total")).toBe(1);
  }, 30_000);
});
