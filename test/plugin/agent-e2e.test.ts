// Issue 9 end to end: the compiled plugin (dist/meshcni) driven the way a runtime drives it (the
// spec's call sequence, test/support/cni-runtime.ts, the reference bridge plugin first in the
// chain) with the REAL node agent (dist/meshcni-installer), which chains meshcni into the host's
// conflist and serves the plugin from its watch cache over its socket, against the TLS stand-in
// API server (test/support/apiserver.ts) that counts every request. Real netns, real iptables.
// Warm ADDs make no API request; a pod created after the sync, a compaction (410) and dropped
// watches change nothing; the agent prints every ADD's outcome (failed ones with their reason),
// records appear and go; with the agent killed the plugin falls back to its kubeconfig GET, and
// with the API down too it fails closed. Needs root.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { recordPath } from "../../internal/wire/state.ts";
import { type Attachment, CniRuntime, type Conflist } from "../support/cni-runtime.ts";
import { isRoot, Netns, sh, uniq } from "../support/netns.ts";
import { REFERENCE_PLUGINS } from "../support/pod-lab.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  type InstallerProcess,
  isChainedIn,
  PLUGIN,
  startCluster,
  startInstaller,
  until,
} from "../agent/harness.ts";

const PRIMARY = "10-bridge.conflist";
const NS = "emojivoto";

let cluster: Cluster;
let dirs: HostDirs;
let agent: InstallerProcess;
let port = 0;
let bridge = "";
const netnses: Netns[] = [];

let uidN = 0;
const uid = () =>
  `e2e0${String(++uidN).padStart(4, "0")}-aaaa-4bbb-8ccc-${Math.floor(Math.random() * 2 ** 48)
    .toString(16)
    .padStart(12, "0")}`;

/** A Linkerd-injected pod of node-a as the API server holds it. */
function pod(name: string, annotations: Record<string, string> = {}) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: NS, uid: uid(), annotations: { "linkerd.io/inject": "enabled", ...annotations } },
    spec: {
      nodeName: "node-a",
      initContainers: [
        { name: "linkerd-proxy", image: "cr.l5d.io/linkerd/proxy:edge-25.1.1", restartPolicy: "Always" },
      ],
      containers: [{ name: "web", image: "buoyantio/emojivoto-web:v11" }],
    },
    status: { phase: "Pending" },
  };
}
type PodObj = ReturnType<typeof pod>;
const podPath = (p: PodObj) => `/api/v1/namespaces/${NS}/pods/${p.metadata.name}`;
/** GETs of this pod and of its namespace: what an ADD would cost without the agent. */
const gets = (p: PodObj) => cluster.api.count(podPath(p), "get") + cluster.api.count(`/api/v1/namespaces/${NS}`, "get");

interface Box {
  netns: Netns;
  runtime: CniRuntime;
  a: Attachment;
}

/** A sandbox for the pod: its netns, and the host's chain as the agent left it in `dirs.net`. */
function box(p: PodObj): Box {
  const conflist = JSON.parse(readFileSync(join(dirs.net, PRIMARY), "utf8")) as Conflist;
  const runtime = new CniRuntime(conflist, [REFERENCE_PLUGINS, dirs.bin], join(dirs.root, "cni-cache"));
  const netns = Netns.create(`mce-${uniq()}`);
  netnses.push(netns);
  const a: Attachment = {
    containerId: `c${uniq()}${uniq()}`,
    netns: netns.path,
    ifname: "eth0",
    cniArgs: `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${p.metadata.name};K8S_POD_UID=${p.metadata.uid}`,
  };
  return { netns, runtime, a };
}

/** The pod's rules, wherever the agent or the plugin applied them. */
const redirected = (n: Netns) =>
  n.exec(["iptables-save", "-t", "nat"]).stdout.includes("PROXY_INIT_REDIRECT") ||
  n.exec(["nft", "list", "table", "ip", "meshcni"]).stdout.includes("PROXY_INIT_REDIRECT");
const inIptablesNft = (n: Netns) => n.save("nft", 4).includes("PROXY_INIT_REDIRECT");
const status = async () => (await (await fetch(`http://127.0.0.1:${port}/status`)).json()) as any;
const failMsg = (e: unknown) => `${(e as Error).message}\n--- agent ---\n${agent.log()}`;

/**
 * Adds the pod to the API server and waits until the agent's watch delivered it: a pod the cache
 * does not hold yet gets a short wait and then the agent's own GET, which on a loaded machine
 * would make "zero requests" a matter of timing.
 */
async function created(p: PodObj): Promise<void> {
  const n = (await status()).cache.pods.objects as number;
  cluster.api.addPod(p);
  await until(
    async () => (await status()).cache.pods.objects > n,
    15_000,
    `the watch delivering ${p.metadata.name}`,
  ).catch((e) => {
    throw new Error(failMsg(e));
  });
}

/** ADD through the chain; asserts the pod got its rules with no API request. */
async function warmAdd(p: PodObj): Promise<Box> {
  const b = box(p);
  const before = gets(p);
  await b.runtime.add(b.a).catch((e) => {
    throw new Error(failMsg(e));
  });
  expect(gets(p) - before).toBe(0);
  expect(redirected(b.netns)).toBe(true);
  return b;
}

beforeAll(async () => {
  if (!isRoot()) return;
  ensureBuilt();
  cluster = await startCluster();
  cluster.setDaemonSet("present");
  cluster.api.addNamespace({ metadata: { name: NS } });
  dirs = cluster.dirs();
  bridge = `mce${uniq()}`.slice(0, 15);
  writeFileSync(
    join(dirs.net, PRIMARY),
    JSON.stringify(
      {
        cniVersion: "1.0.0",
        name: "node-net",
        plugins: [
          {
            type: "bridge",
            bridge,
            isGateway: true,
            ipMasq: false,
            ipam: {
              type: "host-local",
              subnet: `10.${150 + (process.pid % 90)}.9.0/24`,
              dataDir: join(dirs.root, "ipam"),
            },
          },
        ],
      },
      null,
      2,
    ),
  );
}, 120_000);

afterAll(async () => {
  await agent?.stop("SIGTERM");
  for (const n of netnses) n.delete();
  if (bridge) sh(["ip", "link", "del", bridge]);
  dirs?.cleanup();
  await cluster?.close();
});

describe.skipIf(!isRoot())("the compiled plugin with the real node agent", () => {
  test("warm ADDs make no API request, through 410 and dropped watches; reports, records, /status; killed agent: fallback GET, then fail closed", async () => {
    const cached = pod("web-1");
    cluster.api.addPod(cached);
    port = freePort();
    agent = startInstaller(
      dirs,
      [
        "--node-name",
        "node-a",
        "--plugin-binary",
        PLUGIN,
        "--dest-net-dir",
        dirs.net,
        "--health-port",
        String(port),
        "--repair",
        "off",
      ],
      cluster.env,
    );
    await until(() => isChainedIn(dirs, PRIMARY), 15_000, "meshcni chained").catch((e) => {
      throw new Error(failMsg(e));
    });
    await until(
      async () => (await status().catch(() => undefined))?.cache?.pods?.synced === true,
      15_000,
      "the watch cache synced",
    ).catch((e) => {
      throw new Error(failMsg(e));
    });

    // 1. A pod the cache held before its ADD.
    const b1 = await warmAdd(cached);
    const line = await agent.waitForLog(/plugin ADD pod=emojivoto\/web-1 outcome=meshed .*/, 5000);
    expect(line).toMatch(/ rules=[1-9]\d* /);
    expect(line).toMatch(/ lookup=agent-cache /);
    expect(line).toMatch(/ duration=[\d.]+ms /);
    expect(line).toContain(`container=${b1.a.containerId}`);
    // The agent applied them itself (auto in a fresh namespace: iptables-nft, started in the namespace).
    expect(line).toContain("backend=nft ");
    expect(inIptablesNft(b1.netns)).toBe(true);
    // Its record, and /status lists it.
    const rec = JSON.parse(readFileSync(recordPath(dirs.state, b1.a.containerId), "utf8"));
    expect(rec).toMatchObject({
      containerId: b1.a.containerId,
      namespace: NS,
      name: "web-1",
      uid: cached.metadata.uid,
      decision: "meshed",
      backend: "nft",
    });
    const s1 = await status();
    expect(s1.agent.applies).toMatchObject({ applies: true, missingCapabilities: [], nftInProcess: true });
    expect(s1.pods.containers).toEqual([
      expect.objectContaining({ name: "web-1", containerId: b1.a.containerId, decision: "meshed" }),
    ]);

    // CHECK: answered by the agent, which looks with the record's backend in the pod's namespace.
    await b1.runtime.check(b1.a).catch((e) => {
      throw new Error(failMsg(e));
    });
    const checked = await agent.waitForLog(/plugin CHECK pod=emojivoto\/web-1 outcome=meshed .*/, 5000);
    expect(checked).toContain("backend=nft ");
    // Rules taken away by hand: CHECK fails with 103, still answered by the agent.
    expect(b1.netns.exec(["iptables-nft", "-t", "nat", "-F", "PROXY_INIT_OUTPUT"]).code).toBe(0);
    const bad103 = await b1.runtime.check(b1.a).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(bad103?.message).toContain("code 103");
    await agent.waitForLog(/plugin CHECK pod=emojivoto\/web-1 outcome=failed .*code=103/, 5000);
    // ADD again puts them back.
    const cacheFile = join(dirs.root, "cni-cache", `${b1.runtime.conflist.name}-${b1.a.containerId}-eth0`);
    const prev = JSON.parse(readFileSync(cacheFile, "utf8")).result;
    await b1.runtime.exec("ADD", b1.runtime.conflist.plugins[1]!, b1.a, prev);
    await b1.runtime.check(b1.a);

    // 2. A pod created after the sync.
    const later = pod("web-2");
    await created(later);
    await warmAdd(later);

    // 3. A compaction that expires the watches (410), then dropped watches: the cache recovers
    // and later pods are still served from it.
    const lists = (await status()).cache.pods.lists as number;
    cluster.api.compact({ expireWatches: true });
    await until(async () => (await status()).cache.pods.lists > lists, 15_000, "the relist after 410").catch((e) => {
      throw new Error(failMsg(e));
    });
    const after410 = pod("web-3");
    await created(after410);
    await warmAdd(after410);

    const restarts = (await status()).cache.pods.watchRestarts as number;
    cluster.api.dropWatches();
    await until(async () => (await status()).cache.pods.watchRestarts > restarts, 15_000, "the watch again").catch(
      (e) => {
        throw new Error(failMsg(e));
      },
    );
    const afterDrop = pod("web-4");
    await created(afterDrop);
    await warmAdd(afterDrop);

    // 4. A failed ADD: its reason in the agent's output, and no record.
    const bad = pod("web-bad", { "config.linkerd.io/skip-inbound-ports": "80,99999" });
    cluster.api.addPod(bad);
    const bb = box(bad);
    const err = await bb.runtime.add(bb.a).then(
      () => undefined,
      (e: Error) => e,
    );
    expect(err?.message).toContain("code 7");
    const failed = await agent.waitForLog(/plugin ADD pod=emojivoto\/web-bad outcome=failed .*/, 5000);
    expect(failed).toMatch(/ code=7 /);
    expect(failed).toMatch(/reason=.*99999/);
    expect(redirected(bb.netns)).toBe(false);
    expect(existsSync(recordPath(dirs.state, bb.a.containerId))).toBe(false);
    expect(gets(bad)).toBe(0);
    // The agent planned every one of these ADDs itself and applied the five meshed (web-1 twice): the same
    // build on both sides, every pod in the cache, none needing a Service or its addresses.
    const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const sample = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, "m").exec(metrics)?.[1] ?? NaN);
    const planned = ["planned", "applied", "declined"].map((k) => sample(`meshcni_agent_adds_${k}_total`));
    expect(planned).toEqual([6, 5, 0]);

    // 5. DEL removes the record (the rules stay with the namespace); /status no longer lists it.
    await b1.runtime.del(b1.a);
    expect(existsSync(recordPath(dirs.state, b1.a.containerId))).toBe(false);
    await agent.waitForLog(/plugin DEL pod=emojivoto\/web-1 outcome=ok /, 5000);
    expect((await status()).pods.containers.map((c: { containerId: string }) => c.containerId)).not.toContain(
      b1.a.containerId,
    );

    // 6. The agent is killed: the plugin falls back to one GET through its kubeconfig...
    expect(await agent.stop("SIGKILL")).not.toBe(0);
    const orphan = pod("web-5");
    cluster.api.addPod(orphan);
    const bo = box(orphan);
    await bo.runtime.add(bo.a);
    expect(cluster.api.count(podPath(orphan), "get")).toBe(1);
    expect(redirected(bo.netns)).toBe(true);

    // ...and with the API server down too, the ADD fails closed: code 11, no rules.
    const dark = pod("web-6");
    cluster.api.addPod(dark);
    cluster.api.setOutage("refuse");
    try {
      const bd = box(dark);
      const e2 = await bd.runtime.add(bd.a).then(
        () => undefined,
        (e: Error) => e,
      );
      expect(e2?.message).toContain("code 11");
      expect(redirected(bd.netns)).toBe(false);
      expect(existsSync(recordPath(dirs.state, bd.a.containerId))).toBe(false);
    } finally {
      cluster.api.setOutage(undefined);
    }
  }, 120_000);
});
