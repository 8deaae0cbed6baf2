// containerd's CRI drives the compiled plugin as kubelet would: RunPodSandbox, StopPodSandbox and
// RemovePodSandbox over the CRI socket, with meshcni chained after Debian's bridge + host-local
// in a cniVersion 1.0.0 conflist and the stand-in API server holding the pods. One containerd
// serves the whole file (test/support/cri.ts).
//
// What the plugin received is captured by the harness' recording wrapper in front of
// dist/meshcni: it keeps each call's CNI_* environment and stdin, runs the real binary with its
// stdout and stderr left as containerd set them, then keeps its exit status and the rules in
// CNI_NETNS right after the call.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { bridgeConflist } from "../support/cni-runtime.ts";
import { Cri, type PluginCall, type Sandbox } from "../support/cri.ts";
import { GrpcError } from "../support/cri-wire.ts";
import { repoPath } from "../support/golden.ts";
import { type Listener, listen, probe, uniq } from "../support/netns.ts";
import { PodLab, readFixture, withAnnotations } from "../support/pod-lab.ts";

const PLUGIN = repoPath("dist/meshcni");

/** Both iptables backends' rules of a sandbox (the plugin's `auto` mode picks one). */
function rulesOf(sb: Sandbox): string {
  return sb.netns.save("nft") + sb.netns.save("legacy");
}

describe("containerd's CRI (as kubelet drives it) with meshcni chained after bridge", () => {
  let lab: PodLab;
  let cri: Cri;
  let base: any;
  let meshed: Sandbox | undefined;
  const listeners: Listener[] = [];
  const network = `cri-${uniq()}`;
  const bridge = `mcc${uniq()}`.slice(0, 15);
  const subnet = `10.${100 + (process.pid % 150)}.11.0/24`;
  const gateway = subnet.replace(/0\/24$/, "1");
  const outsidePort = 21000 + (process.pid % 2000);
  const legacyNetwork = `cri-legacy-${uniq()}`;
  const legacyBridge = `mcl${uniq()}`.slice(0, 15);
  let legacyNetDir: string;

  /** Adds the pod to the API server with a fresh UID and returns CRI metadata for it. */
  function pod(object: any, name: string, namespace?: string) {
    const copy = withAnnotations(object, name, {});
    if (namespace) copy.metadata.namespace = namespace;
    copy.metadata.uid = crypto.randomUUID();
    lab.api.addPod(copy);
    return { name, namespace: copy.metadata.namespace as string, uid: copy.metadata.uid as string };
  }

  function callsFor(containerId: string, command?: string): PluginCall[] {
    return cri
      .calls("meshcni")
      .filter((c) => c.env.CNI_CONTAINERID === containerId && (!command || c.command === command));
  }

  beforeAll(async () => {
    lab = await PodLab.start();
    legacyNetDir = join(lab.dir, "net-legacy.d");
    cri = await Cri.start({
      plugins: { meshcni: PLUGIN },
      record: ["meshcni"],
      handlerNetDirs: { legacy: legacyNetDir },
    });
    base = await readFixture("testdata/pods/linkerd-meshed.json");
    lab.api.addNamespace(await readFixture("testdata/pods/namespace-emojivoto.json"));
    await cri.writeConflist(
      "10-pods.conflist",
      bridgeConflist({
        name: network,
        bridge,
        subnet,
        ipamDir: join(cri.dir, "ipam"),
        meshcni: lab.entry({ log_level: "info", kubernetes: { exclude_namespaces: ["kube-system"] } }),
      }),
    );
    await cri.writeConflist(
      "10-pods.conflist",
      bridgeConflist({
        name: legacyNetwork,
        bridge: legacyBridge,
        subnet: subnet.replace(/\.11\.0\/24$/, ".12.0/24"),
        ipamDir: join(cri.dir, "ipam"),
        meshcni: lab.entry({ log_level: "info", linkerd: { "iptables-mode": "legacy" } }),
      }),
      { netDir: legacyNetDir },
    );
    listeners.push(await listen(undefined, { [outsidePort]: "outside" }));
  });

  afterAll(async () => {
    for (const l of listeners) l.stop();
    await cri?.close();
    await lab?.close();
  });

  test("a meshed Linkerd pod started by RunPodSandbox gets its rules, and TCP to it arrives at the proxy", async () => {
    const meta = pod(base, "web-cri-meshed");
    meshed = await cri.runPodSandbox(meta);
    expect(meshed.ip).toMatch(/^10\.\d+\.11\.\d+$/);
    const rules = rulesOf(meshed);
    expect(rules).toContain(
      '-A PREROUTING -m comment --comment "proxy-init/install-proxy-init-prerouting" -j PROXY_INIT_REDIRECT',
    );
    expect(rules).toContain("-j REDIRECT --to-ports 4143");
    listeners.push(
      await listen(meshed.netns, { 4143: "proxy-inbound", 4140: "proxy-outbound", 8080: "app", 4191: "admin" }),
    );
    expect(probe(undefined, meshed.ip, 8080)).toBe("proxy-inbound port=4143");
    expect(probe(undefined, meshed.ip, 4191)).toBe("admin port=4191");
    expect(probe(meshed.netns, gateway, outsidePort)).toBe("proxy-outbound port=4140");
    expect(probe(meshed.netns, gateway, outsidePort, { uid: 2102 })).toBe(`outside port=${outsidePort}`);
    expect(lab.api.requests.some((r) => r.path === `/api/v1/namespaces/emojivoto/pods/${meta.name}`)).toBe(true);
  });

  test("what the plugin received from containerd: the pod's identity in CNI_ARGS, the sandbox's netns, bridge's result", () => {
    expect(meshed).toBeDefined();
    const [add, ...more] = callsFor(meshed!.id, "ADD");
    expect(more).toEqual([]);
    expect(add!.exitCode).toBe(0);
    expect(add!.args).toEqual({
      IgnoreUnknown: "1",
      K8S_POD_NAMESPACE: "emojivoto",
      K8S_POD_NAME: "web-cri-meshed",
      K8S_POD_INFRA_CONTAINER_ID: meshed!.id,
      K8S_POD_UID: meshed!.meta.uid,
    });
    expect(meshed!.id).toMatch(/^[0-9a-f]{64}$/);
    expect(add!.env.CNI_NETNS).toBe(meshed!.netns.path);
    expect(add!.env.CNI_IFNAME).toBe("eth0");
    expect(add!.env.CNI_PATH).toBe(cri.binDir);
    const conf = JSON.parse(add!.stdin);
    expect(conf).toMatchObject({ cniVersion: "1.0.0", name: network, type: "meshcni" });
    expect(conf.prevResult.ips.map((i: { address: string }) => i.address)).toContain(`${meshed!.ip}/24`);
    expect(add!.rulesAfter).toContain("PROXY_INIT_REDIRECT");
  });

  test("a successful ADD's log lines (the plugin's stderr) land in containerd's own log", () => {
    expect(meshed).toBeDefined();
    const mine = cri
      .log()
      .split("\n")
      .filter((l) => l.startsWith(`meshcni: info ADD ${meshed!.id.slice(0, 12)}:`));
    expect(mine.length).toBeGreaterThan(0);
    expect(mine.join("\n")).toMatch(/pod emojivoto\/web-cri-meshed.*applied \d+ rules/);
  });

  test("an unmeshed pod and a meshed pod in an excluded namespace get no rules", async () => {
    const plain = await cri.runPodSandbox(pod(await readFixture("testdata/pods/not-injected.json"), "nginx-cri-plain"));
    const before = lab.api.requests.length;
    const excluded = await cri.runPodSandbox(pod(base, "web-cri-excluded", "kube-system"));
    for (const sb of [plain, excluded]) {
      expect(rulesOf(sb)).not.toContain("PROXY_INIT");
      expect(callsFor(sb.id, "ADD").map((c) => c.exitCode)).toEqual([0]);
      listeners.push(await listen(sb.netns, { 4143: "proxy-inbound", 8080: "app" }));
      expect(probe(undefined, sb.ip, 8080)).toBe("app port=8080");
    }
    // the excluded namespace is decided before any API call
    expect(lab.api.requests.slice(before)).toEqual([]);
    for (const sb of [plain, excluded]) {
      await cri.stopPodSandbox(sb.id);
      await cri.removePodSandbox(sb.id);
    }
  });

  test("a failing ADD (401 for a meshed pod) fails RunPodSandbox with meshcni's msg and details; nothing is applied", async () => {
    const meta = pod(base, "web-cri-stale-token");
    lab.api.faults.set(`/api/v1/namespaces/emojivoto/pods/${meta.name}`, { kind: "status", code: 401 });
    const mark = cri.logMark();
    let err: unknown;
    try {
      await cri.runPodSandbox(meta);
    } catch (e) {
      err = e;
    } finally {
      lab.api.faults.delete(`/api/v1/namespaces/emojivoto/pods/${meta.name}`);
    }
    expect(err).toBeInstanceOf(GrpcError);
    const grpc = err as GrpcError;

    const failed = cri.calls("meshcni").filter((c) => c.command === "ADD" && c.args.K8S_POD_NAME === meta.name);
    expect(failed.length).toBe(1);
    const add = failed[0]!;
    expect(add.exitCode).toBe(1);
    // nothing applied: the sandbox's namespace right after the failed ADD holds no meshcni rule
    expect(add.rulesAfter).toBeDefined();
    expect(add.rulesAfter).not.toContain("PROXY_INIT");
    // containerd undoes the failed set-up with one DEL, which succeeds
    expect(
      cri
        .calls("meshcni")
        .filter((c) => c.env.CNI_CONTAINERID === add.env.CNI_CONTAINERID)
        .map((c) => [c.command, c.exitCode]),
    ).toEqual([
      ["ADD", 1],
      ["DEL", 0],
    ]);

    // The same call made directly (the API still answering 401) shows what the plugin printed.
    lab.api.faults.set(`/api/v1/namespaces/emojivoto/pods/${meta.name}`, { kind: "status", code: 401 });
    // (asynchronous: the stand-in API server answers from this process)
    const direct = Bun.spawn([PLUGIN], {
      env: { PATH: Bun.env.PATH ?? "", ...add.env },
      stdin: Buffer.from(add.stdin),
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr] = await Promise.all([
      new Response(direct.stdout).text(),
      new Response(direct.stderr).text(),
      direct.exited,
    ]);
    lab.api.faults.delete(`/api/v1/namespaces/emojivoto/pods/${meta.name}`);
    const answer = JSON.parse(stdout);
    expect(answer.code).toBe(104);
    expect(stderr).toContain(`meshcni: error ADD ${add.env.CNI_CONTAINERID!.slice(0, 12)}: ${answer.msg}`);

    // The gRPC error carries the plugin's msg and details (libcni's "msg; details")...
    expect(grpc.details).toContain(`plugin type="meshcni"`);
    expect(grpc.details).toContain(`${answer.msg}; ${answer.details}`);
    // ...while its stderr lines were dropped: none of them reached containerd's log.
    const logged = cri.logSince(mark);
    expect(logged).toContain(answer.msg); // containerd's own error line quotes the error
    expect(
      logged
        .split("\n")
        .filter((l) => l.startsWith("meshcni:") && l.includes(`ADD ${add.env.CNI_CONTAINERID!.slice(0, 12)}`)),
    ).toEqual([]);
    // and no sandbox is left for the pod
    expect((await cri.listPodSandboxes()).filter((s) => s.name === meta.name)).toEqual([]);
  });

  test("a runtime handler's own conflist folder (its cni_conf_dir): that folder's meshcni entry decides, here iptables-legacy", async () => {
    const sb = await cri.runPodSandbox(pod(base, "web-cri-legacy"), { netDir: legacyNetDir });
    expect(sb.ip).toMatch(/^10\.\d+\.12\.\d+$/);
    expect(sb.netns.save("legacy")).toContain("-j REDIRECT --to-ports 4143");
    expect(sb.netns.save("nft")).not.toContain("PROXY_INIT");
    listeners.push(await listen(sb.netns, { 4143: "proxy-inbound", 8080: "app" }));
    expect(probe(undefined, sb.ip, 8080)).toBe("proxy-inbound port=4143");
    const [add] = callsFor(sb.id, "ADD");
    expect(JSON.parse(add!.stdin).name).toBe(legacyNetwork);
    await cri.stopPodSandbox(sb.id);
    await cri.removePodSandbox(sb.id);
    expect(callsFor(sb.id, "DEL").map((c) => c.exitCode)).toEqual([0, 0]);
  });

  test("StopPodSandbox then RemovePodSandbox: DEL twice (the second with an empty CNI_NETNS), both succeed, the namespace and its rules gone", async () => {
    expect(meshed).toBeDefined();
    const sb = meshed!;
    expect(callsFor(sb.id, "DEL")).toEqual([]);

    await cri.stopPodSandbox(sb.id);
    const [atStop, ...restStop] = callsFor(sb.id, "DEL");
    expect(restStop).toEqual([]);
    expect(atStop!.exitCode).toBe(0);
    expect(atStop!.env.CNI_NETNS).toBe(sb.netns.path);
    expect(atStop!.args.K8S_POD_UID).toBe(sb.meta.uid);
    expect(JSON.parse(atStop!.stdin).prevResult.ips.map((i: { address: string }) => i.address)).toContain(
      `${sb.ip}/24`,
    );
    // meshcni's DEL left its chains to the namespace, which containerd destroys right after
    expect(atStop!.rulesAfter).toBeDefined();
    expect(atStop!.rulesAfter).toContain("PROXY_INIT");
    expect(await Bun.file(sb.netns.path).exists()).toBe(false);

    await cri.removePodSandbox(sb.id);
    const dels = callsFor(sb.id, "DEL");
    expect(dels.length).toBe(2);
    const atRemove = dels[1]!;
    expect(atRemove.exitCode).toBe(0);
    expect(atRemove.env.CNI_NETNS).toBe("");
    expect(atRemove.rulesAfter).toBeUndefined();
    expect(JSON.parse(atRemove.stdin).prevResult).toBeUndefined();
    expect((await cri.listPodSandboxes()).map((s) => s.id)).not.toContain(sb.id);
  });
});
