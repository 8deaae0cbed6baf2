// The agent's watch cache (internal/agent/cache/watch-cache.ts on internal/agent/cache/store.ts and lookup.ts)
// against the stand-in API server's list and watch (TLS, a bearer token, real chunked watch
// streams): sync, pods created after sync, UIDs, one shared GET, 410 and relist, dropped
// watches, an outage, bookmarks. Every API request is counted by the stand-in.
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { backoffMs, type InformerTiming, WatchCache } from "../../internal/agent/cache/watch-cache.ts";
import { serviceAccountClient } from "../../internal/kube/client.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";

const TIMING: InformerTiming = { backoffBaseMs: 40, backoffCapMs: 300, watchSeconds: [300, 600], listTimeoutMs: 3000 };
const NODE = "node-a";

let api: ApiServer | undefined;
let dir: string | undefined;
let stop: AbortController | undefined;
afterEach(async () => {
  stop?.abort();
  await api?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
  api = undefined;
  dir = undefined;
});

const pod = (
  ns: string,
  name: string,
  uid: string,
  node: string | undefined = NODE,
  extra: Record<string, unknown> = {},
) => ({
  apiVersion: "v1",
  kind: "Pod",
  metadata: {
    name,
    namespace: ns,
    uid,
    annotations: { "config.linkerd.io/skip-outbound-ports": "443" },
    managedFields: [{ manager: "kubelet", fieldsV1: { big: "x".repeat(2000) } }],
  },
  spec: {
    ...(node ? { nodeName: node } : {}),
    containers: [
      { name: "app", image: "app:1", volumeMounts: [{ name: "v", mountPath: "/v" }] },
      { name: "linkerd-proxy", image: "proxy:1", env: [{ name: "A", value: "1" }] },
    ],
    volumes: [{ name: "v" }],
  },
  status: { phase: "Pending" },
  ...extra,
});
const podPath = (ns: string, name: string) => `/api/v1/namespaces/${ns}/pods/${name}`;
/** The agent's own request for a pod the cache does not hold: its namespace's list, by name and node. */
const podList = (ns: string) => `/api/v1/namespaces/${ns}/pods`;
const podListQueries = (api: ApiServer, ns: string) =>
  api.requests.filter((r) => r.path === podList(ns)).map((r) => new URLSearchParams(r.query).get("fieldSelector"));

async function setup(o: { watchWaitMs?: number } = {}) {
  api = await startApiServer({ token: "sa-token" });
  dir = mkdtempSync(join(tmpdir(), "meshcni-cache-"));
  writeFileSync(join(dir, "token"), "sa-token\n");
  writeFileSync(join(dir, "ca.crt"), api.caPem);
  api.addNamespace({ metadata: { name: "emojivoto", annotations: { "config.linkerd.io/proxy-uid": "2102" } } });
  api.addNamespace({ metadata: { name: "other" } });
  api.addPod(pod("emojivoto", "web-1", "uid-web-1"));
  api.addPod(pod("emojivoto", "elsewhere", "uid-elsewhere", "node-b"));
  const u = new URL(api.url);
  const client = serviceAccountClient({ host: u.hostname, port: u.port, serviceAccountDir: dir });
  const cache = new WatchCache(client, {
    nodeName: NODE,
    timing: TIMING,
    ...(o.watchWaitMs !== undefined ? { watchWaitMs: o.watchWaitMs } : {}),
  });
  stop = new AbortController();
  void cache.run(stop.signal);
  await cache.podInformer.whenSynced();
  await cache.namespaceInformer.whenSynced();
  await until(() => api!.watches() === 2, "both watches open");
  const ask = (ns: string, name: string, uid?: string) => cache.lookup.lookup(ns, name, uid, AbortSignal.timeout(3000));
  return { api: api!, cache, ask };
}

async function until<T>(fn: () => T | undefined | false, what: string, ms = 5000): Promise<T> {
  const deadline = performance.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined && v !== false) return v;
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(5);
  }
}

const names = (cache: WatchCache) =>
  cache
    .pods()
    .map((p) => (p as { metadata: { name: string } }).metadata.name)
    .sort();

describe("the watch cache", () => {
  test("lists and watches the node's pods (all namespaces) and the namespaces; objects trimmed; changes follow", async () => {
    const { api, cache } = await setup();
    expect(cache.synced()).toBe(true);
    expect(names(cache)).toEqual(["web-1"]);
    const web = cache.pods()[0] as any;
    expect(web.metadata.managedFields).toBeUndefined();
    expect(web.spec.volumes).toBeUndefined();
    expect(web.spec.containers).toEqual([
      { name: "app", image: "app:1" },
      { name: "linkerd-proxy", image: "proxy:1", env: [{ name: "A", value: "1" }] },
    ]);
    expect(web.metadata.annotations).toEqual({ "config.linkerd.io/skip-outbound-ports": "443" });
    expect((cache.namespace("emojivoto") as any).metadata.annotations).toEqual({
      "config.linkerd.io/proxy-uid": "2102",
    });
    // The list and the watch asked for this node's pods only, with bookmarks, from the list's resourceVersion.
    const watch = api.requests.find((r) => r.path === "/api/v1/pods" && r.query.includes("watch=1"))!;
    const q = new URLSearchParams(watch.query);
    expect([q.get("fieldSelector"), q.get("allowWatchBookmarks"), q.get("resourceVersion")]).toEqual([
      `spec.nodeName=${NODE}`,
      "true",
      String(api.resourceVersion()),
    ]);
    expect(api.requests.every((r) => r.authorization === "Bearer sa-token")).toBe(true);

    let changes = 0;
    const off = cache.onChange(() => changes++);
    api.addPod(pod("other", "batch-1", "uid-batch-1"));
    api.addPod(pod("other", "batch-2", "uid-batch-2", "node-b"));
    await until(() => names(cache).includes("batch-1"), "batch-1 added");
    // Bound to this node later: arrives as ADDED; moved away: DELETED.
    api.updatePod(pod("other", "batch-2", "uid-batch-2", NODE));
    await until(() => names(cache).includes("batch-2"), "batch-2 bound here");
    api.deletePod("emojivoto", "web-1");
    await until(() => !names(cache).includes("web-1"), "web-1 deleted");
    api.deleteNamespace("other");
    await until(() => cache.namespace("other") === undefined, "namespace deleted");
    expect(names(cache)).toEqual(["batch-1", "batch-2"]);
    expect(changes).toBeGreaterThanOrEqual(4);
    off();
    const s = cache.status();
    expect(s.pods).toMatchObject({ synced: true, objects: 2, lists: 1, watchRestarts: 0, expired: 0 });
    expect(s.namespaces).toMatchObject({ synced: true, objects: 1, lists: 1 });
    expect(api.count(podPath("emojivoto", "web-1"))).toBe(0);
  });

  test("a cached pod is answered at once with zero GETs; a pod created after sync too, the watch awaited briefly", async () => {
    const { api, ask } = await setup();
    const r = await ask("emojivoto", "web-1", "uid-web-1");
    expect(r).toMatchObject({
      ok: true,
      source: "cache",
      pod: { metadata: { uid: "uid-web-1" } },
      namespace: { metadata: { name: "emojivoto" } },
    });
    // Asked before the watch has delivered it (just bound): answered from the watch, no GET.
    const asking = ask("emojivoto", "web-2", "uid-web-2");
    await Bun.sleep(30);
    api.addPod(pod("emojivoto", "web-2", "uid-web-2"));
    expect(await asking).toMatchObject({ ok: true, source: "cache", pod: { metadata: { uid: "uid-web-2" } } });
    expect(api.count(podPath("emojivoto", "web-1"), "get") + api.count(podPath("emojivoto", "web-2"), "get")).toBe(0);
    expect(api.count("/api/v1/namespaces/emojivoto", "get")).toBe(0);
  });

  test("a cached pod with another UID is never answered from the cache: the API decides", async () => {
    const { api, ask, cache } = await setup();
    const stale = await ask("emojivoto", "web-1", "uid-new");
    expect(stale).toMatchObject({ ok: false, status: 404, error: { code: 106 } });
    expect((stale as any).error.details).toContain("has UID uid-web-1");
    expect(api.count(podList("emojivoto"), "list")).toBe(1);
    expect(podListQueries(api, "emojivoto")).toEqual([`metadata.name=web-1,spec.nodeName=${NODE}`]);
    // The API has the new pod, the watch has not said so yet: the GET's answer is used.
    api.objects.set(podPath("emojivoto", "web-1"), pod("emojivoto", "web-1", "uid-new"));
    const fresh = await ask("emojivoto", "web-1", "uid-new");
    expect(fresh).toMatchObject({ ok: true, source: "api", pod: { metadata: { uid: "uid-new" } } });
    expect((cache.podInformer.get("emojivoto/web-1") as any).metadata.uid).toBe("uid-web-1");
    expect(cache.status().lookups).toEqual({ cache: 0, api: 1, failed: 1 });
  });

  test("concurrent asks for a pod the cache does not hold share one request", async () => {
    const { api, ask } = await setup({ watchWaitMs: 50 });
    // In the API, bound here, not yet delivered by the watch.
    api.objects.set(podPath("emojivoto", "late"), pod("emojivoto", "late", "uid-l"));
    api.faults.set(podList("emojivoto"), { kind: "slow", ms: 200 });
    const answers = await Promise.all(Array.from({ length: 8 }, () => ask("emojivoto", "late", "uid-l")));
    expect(answers.every((a) => a.ok && a.source === "api")).toBe(true);
    expect(api.count(podList("emojivoto"), "list")).toBe(1);
    // Not there at all: one request, 404 code 106 for every asker.
    const missing = await Promise.all(Array.from({ length: 4 }, () => ask("emojivoto", "ghost")));
    expect(missing.every((a) => !a.ok && a.status === 404 && a.error.code === 106)).toBe(true);
    expect(api.count(podList("emojivoto"), "list")).toBe(2);
    expect(api.count(podPath("emojivoto", "late"), "get") + api.count(podPath("emojivoto", "ghost"), "get")).toBe(0);
  });

  test("a pod of another node, or of none, is never fetched nor answered: 404, as a missing pod", async () => {
    const { api, ask } = await setup({ watchWaitMs: 50 });
    api.objects.set(podPath("other", "unbound"), pod("other", "unbound", "uid-u", ""));
    for (const [ns, name, uid] of [
      ["emojivoto", "elsewhere", "uid-elsewhere"],
      ["emojivoto", "elsewhere", undefined],
      ["other", "unbound", "uid-u"],
    ] as const) {
      const r = await ask(ns, name, uid);
      expect(r).toMatchObject({ ok: false, status: 404, error: { code: 106 } });
      expect(JSON.stringify(r)).not.toContain("linkerd-proxy");
      expect((r as any).error.details).toContain(`does not exist on node ${NODE}`);
    }
    // No GET of either pod by name; the lists asked for this node only.
    expect(api.count(podPath("emojivoto", "elsewhere"), "get") + api.count(podPath("other", "unbound"), "get")).toBe(0);
    expect([...podListQueries(api, "emojivoto"), ...podListQueries(api, "other")]).toEqual([
      `metadata.name=elsewhere,spec.nodeName=${NODE}`,
      `metadata.name=elsewhere,spec.nodeName=${NODE}`,
      `metadata.name=unbound,spec.nodeName=${NODE}`,
    ]);
    // Bound to this node afterwards: answered.
    api.objects.set(podPath("other", "unbound"), pod("other", "unbound", "uid-u"));
    expect(await ask("other", "unbound", "uid-u")).toMatchObject({ ok: true, source: "api" });
  });

  test("410 Gone: relists, serving the cached pods until the new list lands", async () => {
    const { api, ask, cache } = await setup();
    api.faults.set("/api/v1/pods", { kind: "slow", ms: 400 }); // the relist takes a while
    api.addPod(pod("emojivoto", "web-3", "uid-web-3"));
    await until(() => cache.podInformer.get("emojivoto/web-3"), "web-3");
    api.compact({ expireWatches: true });
    await until(() => cache.status().pods.expired === 1, "the 410 seen");
    // Meanwhile: still answering from the old data.
    expect(await ask("emojivoto", "web-1", "uid-web-1")).toMatchObject({ ok: true, source: "cache" });
    api.deletePod("emojivoto", "web-3");
    api.faults.delete("/api/v1/pods");
    await until(() => cache.status().pods.lists === 2 && !cache.podInformer.get("emojivoto/web-3"), "the relist");
    expect(cache.status().pods).toMatchObject({ synced: true, expired: 1, lists: 2 });
    // The first list may come from the API server's cache (resourceVersion=0); the relist asks for the newest.
    const lists = api.requests
      .filter((r) => r.path === "/api/v1/pods" && !r.query.includes("watch=1"))
      .map((r) => new URLSearchParams(r.query).get("resourceVersion"));
    expect([lists[0], lists.at(-1)]).toEqual(["0", null]);
    api.addPod(pod("emojivoto", "web-4", "uid-web-4"));
    await until(() => cache.podInformer.get("emojivoto/web-4"), "watching after the relist");
    // A watch from a compacted resourceVersion answered with a 410 status relists too.
    api.expiredAsStatus = true;
    api.compact();
    api.dropWatches();
    await until(
      () => cache.status().namespaces.expired === 1 && cache.status().namespaces.lists === 2,
      "namespaces relisted",
    );
    // The pods were at the newest resourceVersion, which survives the compaction: no relist for them.
    expect(cache.status().pods.lists).toBe(2);
  });

  test("dropped watches: reconnected with back-off, catching up from the last resourceVersion without a relist", async () => {
    const { api, cache, ask } = await setup();
    api.dropWatches();
    api.addPod(pod("emojivoto", "web-5", "uid-web-5"));
    api.addNamespace({ metadata: { name: "late" } });
    await until(() => cache.podInformer.get("emojivoto/web-5") && cache.namespace("late"), "caught up");
    const s = cache.status();
    expect(s.pods.watchRestarts).toBeGreaterThanOrEqual(1);
    expect(s.namespaces.watchRestarts).toBeGreaterThanOrEqual(1);
    expect([s.pods.lists, s.namespaces.lists]).toEqual([1, 1]);
    expect(await ask("emojivoto", "web-5", "uid-web-5")).toMatchObject({ ok: true, source: "cache" });
    expect(api.count(podPath("emojivoto", "web-5"))).toBe(0);
  });

  test("an outage: cached pods still answered, new pods 503; afterwards the cache catches up", async () => {
    const { api, cache, ask } = await setup({ watchWaitMs: 50 });
    api.setOutage("500");
    await until(() => cache.status().pods.lastError, "the watch failing");
    expect(await ask("emojivoto", "web-1", "uid-web-1")).toMatchObject({ ok: true, source: "cache" });
    api.objects.set(podPath("emojivoto", "new-1"), pod("emojivoto", "new-1", "uid-new-1"));
    const down = await ask("emojivoto", "new-1", "uid-new-1");
    expect(down).toMatchObject({ ok: false, status: 503, error: { code: 11 } });
    expect((down as any).error.details).toContain("answered 500");
    api.setOutage("refuse");
    expect(await ask("emojivoto", "web-1")).toMatchObject({ ok: true, source: "cache" });
    expect(await ask("emojivoto", "new-1")).toMatchObject({ ok: false, status: 503 });
    const failedWatches = api.count("/api/v1/pods", "watch");
    await Bun.sleep(600);
    // Backing off: a handful of attempts, not a spin.
    expect(api.count("/api/v1/pods", "watch") - failedWatches).toBeLessThan(10);
    api.setOutage(undefined);
    api.addPod(pod("emojivoto", "new-2", "uid-new-2"));
    await until(() => cache.podInformer.get("emojivoto/new-2"), "caught up after the outage", 5000);
    expect(cache.status().pods.synced).toBe(true);
  });

  test("bookmarks advance the resourceVersion without any object changing", async () => {
    const { api, cache } = await setup();
    api.addPod(pod("other", "far", "uid-far", "node-b")); // another node's pod: not in this watch
    await Bun.sleep(50);
    const before = cache.status().pods.resourceVersion;
    expect(Number(before)).toBeLessThan(api.resourceVersion());
    api.bookmark();
    await until(() => cache.status().pods.resourceVersion === String(api.resourceVersion()), "the bookmark");
    expect(cache.status().pods.objects).toBe(1);
    // A reconnect then starts from the bookmark's resourceVersion.
    api.dropWatches();
    await until(() => api.watches() === 2, "watching again");
    const last = api.requests.filter((r) => r.path === "/api/v1/pods" && r.query.includes("watch=1")).at(-1)!;
    expect(new URLSearchParams(last.query).get("resourceVersion")).toBe(String(api.resourceVersion()));
  });
});

describe("the agent's Kubernetes client", () => {
  test("reads the service account's token again when kubelet rotates it, and sends it on lists, watches and GETs", async () => {
    const { api } = await setup();
    const u = new URL(api.url);
    const client = serviceAccountClient({ host: u.hostname, port: u.port, serviceAccountDir: dir! });
    expect((await client.get("/api/v1/namespaces/emojivoto", 2000)).kind).toBe("object");
    // kubelet writes a new file and swaps it in (a new inode): the next request carries it.
    writeFileSync(join(dir!, "token.new"), "rotated-token\n");
    renameSync(join(dir!, "token.new"), join(dir!, "token"));
    const seen = api.requests.length;
    expect(await client.get("/api/v1/namespaces/emojivoto", 2000)).toMatchObject({ kind: "status", status: 401 });
    expect(api.requests.slice(seen).map((r) => r.authorization)).toEqual(["Bearer rotated-token"]);
    const ended = await client.watch(
      "/api/v1/namespaces?watch=1&resourceVersion=1",
      () => {},
      AbortSignal.timeout(2000),
    );
    expect(ended).toMatchObject({ kind: "status", status: 401 });
    // A service account that cannot be read is an answer, not an exception.
    const none = serviceAccountClient({ host: u.hostname, port: u.port, serviceAccountDir: join(dir!, "nowhere") });
    expect(await none.get("/api/v1/namespaces/emojivoto", 2000)).toMatchObject({
      kind: "unreachable",
      reason: expect.stringContaining("cannot read the service account"),
    });
  });
});

describe("back-off", () => {
  test("exponential, jittered between half and all of it, capped", () => {
    const t = { backoffBaseMs: 500, backoffCapMs: 30_000 };
    expect([0, 1, 2, 3].map((n) => backoffMs(n, t, 0.999999))).toEqual([500, 1000, 2000, 4000]);
    expect([0, 1, 2, 3].map((n) => backoffMs(n, t, 0))).toEqual([250, 500, 1000, 2000]);
    expect(backoffMs(20, t, 0.999999)).toBe(30_000);
    expect(backoffMs(1000, t, 0)).toBe(15_000);
  });
});
