// The DaemonSet install-cni renders, against the real meshcni-installer: its command and args
// (the /host mounts and the agent's /var/run/meshcni pointed at scratch folders), its
// environment and the ConfigMap's entry as the mounted file install meshcni into a Calico node's
// conflist. The pod has no preStop; on SIGTERM the running agent asks a stand-in API server
// holding the rendered DaemonSet itself: while it exists the node stays meshed, once it is
// deleted the agent undoes everything. The stand-in authorizes every request with the rendered
// RBAC (the agent's token is the rendered ServiceAccount's), and the kubeconfig the agent writes
// holds a token of the rendered plugin account. This holds the manifests to the agent's switches.
import { afterAll, beforeAll, expect, test } from "bun:test";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { objectPath } from "../../internal/cli/check/check.ts";
import { readWrittenToken } from "../../internal/agent/install/kubeconfig.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { repoPath } from "../support/golden.ts";
import { ensureCli, runCli } from "./support.ts";

type Obj = Record<string, any>;
let tmp: string;
let api: ApiServer;

beforeAll(async () => {
  await ensureCli();
  for (const name of ["meshcni-installer", "meshcni"]) {
    if (!existsSync(repoPath("dist", name))) {
      const b = Bun.spawnSync([process.execPath, repoPath("scripts/build.ts"), name], {
        cwd: repoPath(),
        stdout: "pipe",
        stderr: "pipe",
      });
      if (b.exitCode !== 0) throw new Error(`building ${name} failed: ${b.stderr}`);
    }
  }
  tmp = mkdtempSync(join(tmpdir(), "meshcni-ds-contract-"));
  api = await startApiServer({ token: "contract-test-token" });
});
afterAll(async () => {
  await api?.close();
  rmSync(tmp, { recursive: true, force: true });
});

const NAMESPACE = "mesh-system";
const NODE = "node-a";

/** A node (scratch folders) and the DaemonSet's container, as commands to run on it. */
function setUp(name: string) {
  const objs = parseAllDocuments(
    runCli(["install-cni", "--cni-log-level", "debug", "--namespace", NAMESPACE]).stdout,
  ).map((d) => d.toJS() as Obj);
  const ds = objs.find((o) => o.kind === "DaemonSet")!;
  const cm = objs.find((o) => o.kind === "ConfigMap")!;
  const pod = ds.spec.template.spec;
  const c = pod.containers[0];
  // The cluster as install-cni made it: its RBAC decides, and the agent runs as its account.
  api.rbac = objs.filter((o) => /^(Cluster)?Role(Binding)?$/.test(o.kind));
  api.identities.set("contract-test-token", `system:serviceaccount:${NAMESPACE}:${pod.serviceAccountName}`);
  for (const o of objs.filter((x) => x.kind === "ServiceAccount")) api.objects.set(objectPath(o as never), o);

  // The container's view, mapped onto scratch folders; the agent's folder is the host's own path,
  // so it maps to the same scratch folder from inside and from the host.
  const root = join(tmp, name, "container");
  const inside = ["/host", "/opt/meshcni", "/etc/meshcni", "/var/run/meshcni"];
  const mapOne = (p: string) => (inside.some((d) => p === d || p.startsWith(`${d}/`)) ? join(root, p) : p);
  // --plugin-binary names candidates, comma-separated.
  const map = (p: string) => p.split(",").map(mapOne).join(",");
  const netDir = map("/host/etc/cni/net.d");
  const binDir = map("/host/opt/cni/bin");
  for (const d of [netDir, binDir, map("/opt/meshcni"), map("/etc/meshcni")]) mkdirSync(d, { recursive: true });
  // The host paths the host check reads, each mounted read-only at its own path under
  // /host/root: this machine is the node, so /host/root is its / here (the agent looks at those
  // paths alone).
  const hostRoot = "/host/root";
  const hostCheck = (c.volumeMounts as Obj[]).filter((m) => m.mountPath.startsWith(`${hostRoot}/`));
  expect(hostCheck.length).toBeGreaterThan(0);
  for (const m of hostCheck) {
    const v = (pod.volumes as Obj[]).find((x) => x.name === m.name)!;
    expect({ mountPath: m.mountPath, readOnly: m.readOnly }).toEqual({
      mountPath: `${hostRoot}${v.hostPath.path}`,
      readOnly: true,
    });
  }
  symlinkSync("/", map(hostRoot));
  copyFileSync(repoPath("dist/meshcni-installer"), map("/opt/meshcni/meshcni-installer"));
  copyFileSync(repoPath("dist/meshcni"), map("/opt/meshcni/meshcni"));
  for (const [key, text] of Object.entries(cm.data as Record<string, string>))
    writeFileSync(join(map("/etc/meshcni"), key), text);
  writeFileSync(
    join(netDir, "10-calico.conflist"),
    readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8"),
  );
  const sa = join(tmp, name, "serviceaccount");
  mkdirSync(sa);
  writeFileSync(join(sa, "token"), "contract-test-token\n");
  writeFileSync(join(sa, "ca.crt"), api.caPem);

  const env: Record<string, string> = {
    PATH: process.env.PATH ?? "/usr/bin:/bin",
    KUBERNETES_SERVICE_HOST: "127.0.0.1",
    KUBERNETES_SERVICE_PORT: new URL(api.url).port,
  };
  for (const e of c.env) {
    // The downward API's values, as the kubelet fills them in.
    const field = e.valueFrom.fieldRef.fieldPath;
    env[e.name] =
      field === "metadata.namespace"
        ? ds.metadata.namespace
        : field === "spec.nodeName"
          ? NODE
          : `unknown field ${field}`;
  }
  // No health server here (tests run side by side); every other switch as rendered.
  const args = (c.args as string[])
    .filter((a, i, all) => a !== "--health-port" && all[i - 1] !== "--health-port")
    .map(map);
  const conflist = () => JSON.parse(readFileSync(join(netDir, "10-calico.conflist"), "utf8"));
  const volumes = Object.fromEntries((pod.volumes as Obj[]).map((v) => [v.name, v]));
  return {
    ds,
    pod,
    container: c,
    volumes,
    env,
    netDir,
    binDir,
    stateDir: map("/var/run/meshcni"),
    conflist,
    // --host-root's default is the mount's path in the container; here it is mapped.
    main: [map(c.command[0]), ...args, "--service-account-dir", sa, "--host-root", map(hostRoot)],
    isChained: () => conflist().plugins.some((p: Obj) => p.type === "meshcni"),
    leftovers: () =>
      [join(binDir, "meshcni"), join(binDir, "meshcni.d"), join(netDir, "ZZZ-meshcni-kubeconfig")].filter((f) =>
        existsSync(f),
      ),
  };
}

const dsPath = `/apis/apps/v1/namespaces/${NAMESPACE}/daemonsets/meshcni-node`;

test("the rendered DaemonSet's installer command installs with the agent's paths; the pod has no preStop; its mount is the host's path", async () => {
  const node = setUp("once");
  expect(node.container.lifecycle).toBeUndefined();
  // The agent's folder is mounted at the path the host sees, which is what the entry names.
  const mount = (node.container.volumeMounts as Obj[]).find((m) => m.name === "agent-state")!;
  expect(node.volumes["agent-state"].hostPath).toEqual({ path: mount.mountPath, type: "DirectoryOrCreate" });
  // Not spawnSync: the stand-in API server in this process answers the agent's TokenRequest.
  const proc = Bun.spawn([...node.main, "--once"], { env: node.env, stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([
    new Response(proc.stdout).text(),
    new Response(proc.stderr).text(),
    proc.exited,
  ]);
  const install = { stdout, stderr, exitCode: code };
  expect(install.stderr.toString()).not.toContain("error");
  expect(install.exitCode).toBe(0);
  // The kubeconfig holds a token of the rendered plugin account, which the rendered Role lets the agent ask for.
  const written = readWrittenToken(readFileSync(join(node.netDir, "ZZZ-meshcni-kubeconfig"), "utf8"));
  expect(written?.account).toEqual({ namespace: NAMESPACE, name: "meshcni-plugin" });
  expect(api.issued.at(-1)).toMatchObject({
    token: written!.token,
    user: `system:serviceaccount:${NAMESPACE}:meshcni-plugin`,
    by: `system:serviceaccount:${NAMESPACE}:meshcni`,
  });
  const ours = node.conflist().plugins.at(-1);
  expect(ours.type).toBe("meshcni");
  expect(ours.log_level).toBe("debug");
  expect(ours.kubernetes.pod_namespace).toBe(NAMESPACE);
  expect(ours.kubernetes.kubeconfig).toBe("/etc/cni/net.d/ZZZ-meshcni-kubeconfig");
  expect(ours.agent_socket).toBe(join(node.stateDir, "agent.sock"));
  expect(ours.state_dir).toBe(node.stateDir);
  expect(node.leftovers().length).toBe(3);
  // The agent looked at the mounted host root, and installed the plugin with its own loader,
  // named where the host sees the bin folder (--dest-bin-dir), not where the container mounts it.
  expect(install.stdout.toString() + install.stderr.toString()).toContain(
    "the host's C library: glibc (/lib64/ld-linux-x86-64.so.2). The plugin loads none of it: " +
      "its own loader and C library are in /opt/cni/bin/meshcni.d/",
  );
  const elf = Bun.spawnSync(["readelf", "-l", "-d", join(node.binDir, "meshcni")]).stdout.toString();
  expect(elf).toMatch(/program interpreter: \/opt\/cni\/bin\/meshcni\.d\/[0-9a-f]{16}\/ld-linux-x86-64\.so\.2\]/);
  expect(elf).toMatch(/Library rpath: \[\/opt\/cni\/bin\/meshcni\.d\/[0-9a-f]{16}\]/);
});

test("the running agent, as rendered: SIGTERM keeps everything while its DaemonSet exists, undoes once it is deleted", async () => {
  const node = setUp("run");
  api.objects.set(dsPath, node.ds);
  api.addNamespace({ metadata: { name: NAMESPACE } });
  // The node the rendered DaemonSet selects (kubernetes.io/os=linux), with a taint it tolerates.
  api.objects.set(`/api/v1/nodes/${NODE}`, {
    apiVersion: "v1",
    kind: "Node",
    metadata: { name: NODE, labels: { "kubernetes.io/os": "linux" } },
    spec: { taints: [{ key: "example.com/dedicated", value: "mesh", effect: "NoSchedule" }] },
  });
  const run = async () => {
    const agent = Bun.spawn(node.main, { env: node.env, stdout: "pipe", stderr: "pipe" });
    for (
      let i = 0;
      i < 200 &&
      !(
        node.isChained() &&
        node.leftovers().length === 3 &&
        statSync(join(node.stateDir, "agent.sock"), { throwIfNoEntry: false })?.isSocket()
      );
      i++
    )
      await Bun.sleep(25);
    expect(node.isChained()).toBe(true);
    agent.kill("SIGTERM");
    const code = await agent.exited;
    return { code, out: (await new Response(agent.stdout).text()) + (await new Response(agent.stderr).text()) };
  };
  try {
    const kept = await run();
    expect(kept.code).toBe(0);
    expect(kept.out).toContain(`its DaemonSet ${NAMESPACE}/meshcni-node exists and runs on node ${NODE}`);
    expect(node.isChained()).toBe(true);
    expect(node.leftovers().length).toBe(3);
    // It asked with its own service account.
    expect(
      api.requests.filter((r) => r.path === dsPath).every((r) => r.authorization === "Bearer contract-test-token"),
    ).toBe(true);

    // `kubectl delete -f` of everything: the DaemonSet goes first.
    api.objects.delete(dsPath);
    const undone = await run();
    expect(undone.code).toBe(0);
    expect(undone.out).toContain(`its DaemonSet ${NAMESPACE}/meshcni-node is gone (404); undoing the installation`);
    expect(node.isChained()).toBe(false);
    expect(node.leftovers()).toEqual([]);
    expect(existsSync(join(node.stateDir, "agent.sock"))).toBe(false);
  } finally {
    api.objects.delete(dsPath);
  }
}, 60_000);
