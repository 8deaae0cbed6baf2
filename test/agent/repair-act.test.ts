// Repair's acts (internal/agent/repair/loop.ts) through the agent's real Kubernetes client against
// the stand-in API server's Eviction API (test/support/apiserver-writes.ts): --repair evict posts
// a policy/v1 Eviction with the pod's UID as a precondition, a Warning Event first; a
// PodDisruptionBudget's refusal (429) is reported with the server's message and tried again after
// the backoff; a pod made again under the same name (another UID) is never hit (409); --repair
// delete deletes; --repair off reports only; a pod with no record is only reported as unverified.
import { afterEach, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { RepairConfig, RepairMode } from "../../internal/agent/repair/plan.ts";
import { parsePluginConf } from "../../internal/config/plugin-config.ts";
import { type RepairLoop, startRepair } from "../../internal/agent/repair/loop.ts";
import { clientWriter } from "../../internal/agent/repair/api-write.ts";
import { serviceAccountClient } from "../../internal/kube/client.ts";
import { linkerdProfile } from "../../internal/mesh/linkerd/profile.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { addWriteRoutes, PDB_REFUSAL, type Writes } from "../support/apiserver-writes.ts";

const conf = parsePluginConf(
  JSON.stringify({
    cniVersion: "1.0.0",
    name: "k8s-pod-network",
    type: "meshcni",
    mesh: "linkerd",
    kubernetes: {
      kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig",
      exclude_namespaces: ["kube-system"],
      pod_namespace: "meshcni",
    },
  }),
);

type Obj = Record<string, any> & { metadata: { name: string; namespace: string; [k: string]: unknown } };
const failed95 = { waiting: { reason: "CrashLoopBackOff" } };
function pod(name: string, uid: string, validator: "failed" | "ok" | "none"): Obj {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, namespace: "emojivoto", uid, annotations: { "linkerd.io/inject": "enabled" } },
    spec: {
      nodeName: "node-a",
      initContainers: [
        { name: "linkerd-network-validator", image: "p" },
        { name: "linkerd-proxy", image: "p", restartPolicy: "Always" },
      ],
      containers: [{ name: "web", image: "web" }],
    },
    status: {
      phase: validator === "failed" ? "Pending" : "Running",
      conditions: [{ type: "PodReadyToStartContainers", status: "True" }],
      initContainerStatuses:
        validator === "none"
          ? []
          : [
              {
                name: "linkerd-network-validator",
                restartCount: 1,
                ...(validator === "failed"
                  ? { state: failed95, lastState: { terminated: { exitCode: 95, reason: "Error" } } }
                  : {
                      state: { terminated: { exitCode: 0, reason: "Completed" } },
                      lastState: { terminated: { exitCode: 95, reason: "Error" } },
                    }),
              },
            ],
    },
  };
}

let api: ApiServer | undefined;
let dir: string | undefined;
const loops: RepairLoop[] = [];
afterEach(async () => {
  for (const l of loops.splice(0)) l.stop();
  await api?.close();
  api = undefined;
  if (dir) rmSync(dir, { recursive: true, force: true });
});

async function setup(
  mode: RepairMode,
  pods: Obj[],
): Promise<{ writes: Writes; loop: RepairLoop; lines: string[]; view: Obj[] }> {
  api = await startApiServer({ token: "sa-token" });
  dir = mkdtempSync(join(tmpdir(), "meshcni-repair-act-"));
  writeFileSync(join(dir, "token"), "sa-token\n");
  writeFileSync(join(dir, "ca.crt"), api.caPem);
  const writes = addWriteRoutes(api);
  for (const p of pods) api.addPod(p);
  const u = new URL(api.url);
  const client = serviceAccountClient({ host: u.hostname, port: u.port, serviceAccountDir: dir });
  const lines: string[] = [];
  const say = (m: string) => void lines.push(m);
  const view = [...pods];
  const cfg: RepairConfig = {
    mode,
    node: "node-a",
    conf,
    profile: linkerdProfile,
    daemonSetName: "meshcni-node",
    graceMs: 0,
    ratePerMinute: 100,
    retryMs: 400,
  };
  const loop = startRepair({
    cfg,
    log: { debug: say, info: say, warn: say, error: say },
    records: () => [],
    intervalMs: 25,
    view: { synced: () => true, pods: () => view, namespace: () => undefined, onChange: () => () => {} },
    api: client,
    writer: clientWriter(client),
    chained: () => true,
    ready: () => true,
  });
  loops.push(loop);
  return { writes, loop, lines, view };
}

async function until(fn: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!fn()) {
    if (performance.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(5);
  }
}

describe("--repair evict", () => {
  test("the pod whose validator's latest run failed is evicted (Event first); the one whose earlier run failed is not; none is deleted", async () => {
    const bad = pod("web-bad", "uid-bad", "failed");
    const fine = pod("web-fine", "uid-fine", "ok");
    const { writes, loop, lines } = await setup("evict", [bad, fine]);
    await until(() => writes.evicted.length === 1, "the eviction");
    await Bun.sleep(200);
    await until(() => loop.status().repaired === 1, "the eviction noted");
    expect(writes.evicted).toEqual(["emojivoto/web-bad uid-bad"]);
    expect(writes.deleted).toEqual([]);
    expect(writes.events.map((e) => [e.type, e.reason, e.involvedObject.name, e.involvedObject.uid])).toEqual([
      ["Warning", "MeshcniRepair", "web-bad", "uid-bad"],
    ]);
    expect(writes.events[0]!.message).toStartWith(
      "meshcni evicts this pod on node node-a so that its controller creates it again with the mesh's " +
        "redirect: its linkerd-network-validator init container's latest run failed (exit code 95",
    );
    // The Event came before the eviction.
    expect(writes.order).toEqual(["event emojivoto/web-bad", "evict emojivoto/web-bad"]);
    expect(loop.status()).toMatchObject({
      mode: "evict",
      repaired: 1,
      refusals: 0,
      bypassing: [expect.objectContaining({ name: "web-bad", action: "evicted" })],
    });
    expect(lines).toContainEqual(
      expect.stringMatching(/^repair: evicted pod emojivoto\/web-bad \(uid uid-bad\): its linkerd-network-validator/),
    );
  });

  test("a PodDisruptionBudget refuses (429): reported with the server's message and counted, tried again after the backoff, evicted once allowed", async () => {
    const bad = pod("web-pdb", "uid-pdb", "failed");
    const { writes, loop, lines } = await setup("evict", [bad]);
    writes.refuse.add("emojivoto/web-pdb");
    await until(() => writes.refused.length === 1, "the refusal");
    await until(() => loop.status().bypassing[0]?.action === "refused", "the refusal in the status");
    const st = loop.status();
    expect(st.refusals).toBe(1);
    expect(st.bypassing[0]!.refusal).toEqual({ message: PDB_REFUSAL, retryAt: expect.any(String) });
    expect(lines).toContain(
      `repair: the eviction of pod emojivoto/web-pdb (uid uid-pdb) was refused (trying again later): ${PDB_REFUSAL}`,
    );
    // Not again before the backoff (400 ms), then again; refused again, the backoff doubles.
    await Bun.sleep(250);
    expect(writes.refused.length).toBe(1);
    await until(() => writes.refused.length === 2, "the second try", 3000).catch((e) => {
      throw new Error(`${e.message}\n${lines.join("\n")}\n${JSON.stringify(loop.status())}`);
    });
    writes.refuse.delete("emojivoto/web-pdb");
    await until(() => writes.evicted.length === 1, "the eviction once allowed", 3000);
    expect(writes.evicted).toEqual(["emojivoto/web-pdb uid-pdb"]);
    await until(() => loop.status().repaired === 1, "the eviction noted");
    expect(loop.status()).toMatchObject({ repaired: 1, refusals: 2 });
    expect(writes.deleted).toEqual([]);
  });

  test("a pod made again under the same name (another UID) is not evicted: the precondition holds it back (409)", async () => {
    const bad = pod("web-again", "uid-old", "failed");
    const { writes, lines } = await setup("evict", [bad]);
    // The API server already holds the new pod; the agent's view still has the old one.
    api!.objects.set("/api/v1/namespaces/emojivoto/pods/web-again", pod("web-again", "uid-new", "ok"));
    await until(
      () => lines.some((l) => l.startsWith("repair: could not evict pod emojivoto/web-again")),
      "the refused try",
    );
    expect(lines.find((l) => l.startsWith("repair: could not evict"))).toContain(
      "answered 409: Precondition failed: UID in precondition: uid-old, UID in object meta: uid-new",
    );
    expect(writes.evicted).toEqual([]);
    expect(api!.objects.has("/api/v1/namespaces/emojivoto/pods/web-again")).toBe(true);
  });

  test("a pod already gone: 404, nothing else happens", async () => {
    const bad = pod("web-gone", "uid-gone", "failed");
    const { writes, lines } = await setup("evict", [bad]);
    api!.objects.delete("/api/v1/namespaces/emojivoto/pods/web-gone");
    await until(() => lines.some((l) => l.startsWith("repair: could not evict pod emojivoto/web-gone")), "the try");
    expect(lines.find((l) => l.startsWith("repair: could not evict"))).toContain(
      'answered 404: pods "web-gone" not found',
    );
    expect([writes.evicted, writes.deleted]).toEqual([[], []]);
  });

  test("a meshed pod with no record of an ADD is unverified: listed, logged once, never acted on", async () => {
    const { writes, loop, lines } = await setup("evict", [pod("web-nr", "uid-nr", "none")]);
    await until(() => loop.status().unverified.length === 1, "the unverified pod");
    await Bun.sleep(300);
    expect(loop.status().unverified).toEqual([
      {
        namespace: "emojivoto",
        name: "web-nr",
        uid: "uid-nr",
        why: "no record of an ADD for its sandbox on this node (PodReadyToStartContainers is True)",
      },
    ]);
    expect(loop.unverified()).toBe(1);
    expect(lines.filter((l) => l.includes("unverified"))).toEqual([
      "repair: 1 meshed pod(s) of node node-a are unverified (no record of an ADD for their sandbox; " +
        "reported, never removed for that; /status says why): emojivoto/web-nr",
    ]);
    expect([writes.evicted, writes.deleted, writes.events]).toEqual([[], [], []]);
  });
});

describe("--repair delete and off", () => {
  test("delete: a DELETE with the UID precondition, an Event first; no eviction", async () => {
    const { writes, loop } = await setup("delete", [pod("web-del", "uid-del", "failed")]);
    await until(() => writes.deleted.length === 1, "the deletion");
    expect(writes.deleted).toEqual(["emojivoto/web-del uid-del"]);
    expect(writes.evicted).toEqual([]);
    expect(writes.events[0]!.message).toStartWith("meshcni deletes this pod on node node-a");
    expect(loop.status().bypassing[0]!.action).toBe("deleted");
  });

  test("off: reported on the log and in the status, nothing written", async () => {
    const { writes, loop, lines } = await setup("off", [pod("web-off", "uid-off", "failed")]);
    await until(() => loop.status().bypassing.length === 1, "the report");
    await Bun.sleep(200);
    expect(loop.status().bypassing[0]!.action).toBe("reported");
    expect(loop.bypassing()).toBe(1);
    expect(lines).toContainEqual(
      expect.stringMatching(
        /^repair: pod emojivoto\/web-off bypasses the mesh \(--repair off: reported only\): its linkerd-network-validator/,
      ),
    );
    expect([writes.evicted, writes.deleted, writes.events]).toEqual([[], [], []]);
  });
});
