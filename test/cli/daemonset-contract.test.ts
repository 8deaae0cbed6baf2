// The DaemonSet install-cni renders, against the real meshcni-installer: its command and args
// (the /host mounts pointed at scratch folders), its environment and the ConfigMap's entry as
// the mounted file install meshcni into a Calico node's conflist; its preStop command has the
// running installer take meshcni out again and waits for it, or undoes by itself when no
// installer runs. This holds the manifests to the installer's switches.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { repoPath } from "../support/golden.ts";
import { ensureCli, runCli } from "./support.ts";

type Obj = Record<string, any>;
let tmp: string;

beforeAll(async () => {
  await ensureCli();
  for (const name of ["meshcni-installer", "meshcni"]) {
    if (!existsSync(repoPath("dist", name))) {
      const b = Bun.spawnSync([process.execPath, repoPath("scripts/build.ts"), name], { cwd: repoPath(), stdout: "pipe", stderr: "pipe" });
      if (b.exitCode !== 0) throw new Error(`building ${name} failed: ${b.stderr}`);
    }
  }
  tmp = mkdtempSync(join(tmpdir(), "meshcni-ds-contract-"));
});
afterAll(() => {
  rmSync(tmp, { recursive: true, force: true });
});

/** A node (scratch folders) and the DaemonSet's container, as commands to run on it. */
function setUp(name: string) {
  const objs = parseAllDocuments(runCli(["install-cni", "--cni-log-level", "debug", "--namespace", "mesh-system"]).stdout).map((d) => d.toJS() as Obj);
  const ds = objs.find((o) => o.kind === "DaemonSet")!;
  const cm = objs.find((o) => o.kind === "ConfigMap")!;
  const c = ds.spec.template.spec.containers[0];

  // The container's view, mapped onto scratch folders.
  const root = join(tmp, name, "container");
  const inside = ["/host", "/opt/meshcni", "/etc/meshcni"];
  const mapOne = (p: string) => (inside.some((d) => p === d || p.startsWith(`${d}/`)) ? join(root, p) : p);
  // --plugin-binary names candidates, comma-separated.
  const map = (p: string) => p.split(",").map(mapOne).join(",");
  const netDir = map("/host/etc/cni/net.d");
  const binDir = map("/host/opt/cni/bin");
  for (const d of [netDir, binDir, map("/opt/meshcni"), map("/etc/meshcni")]) mkdirSync(d, { recursive: true });
  // The host's root, mounted where the DaemonSet mounts it: this machine is the node.
  const rootMount = c.volumeMounts.find((m: Obj) => m.name === "host-root");
  const rootVolume = ds.spec.template.spec.volumes.find((v: Obj) => v.name === "host-root");
  symlinkSync(rootVolume.hostPath.path, map(rootMount.mountPath));
  copyFileSync(repoPath("dist/meshcni-installer"), map("/opt/meshcni/meshcni-installer"));
  copyFileSync(repoPath("dist/meshcni"), map("/opt/meshcni/meshcni"));
  for (const [key, text] of Object.entries(cm.data as Record<string, string>)) writeFileSync(join(map("/etc/meshcni"), key), text);
  writeFileSync(join(netDir, "10-calico.conflist"), readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8"));
  const sa = join(tmp, name, "serviceaccount");
  mkdirSync(sa);
  writeFileSync(join(sa, "token"), "contract-test-token\n");
  writeFileSync(join(sa, "ca.crt"), "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n");

  const env: Record<string, string> = { PATH: process.env.PATH ?? "/usr/bin:/bin", KUBERNETES_SERVICE_HOST: "10.96.0.1", KUBERNETES_SERVICE_PORT: "443" };
  for (const e of c.env) {
    // The downward API's values, as the kubelet fills them in.
    env[e.name] = e.valueFrom.fieldRef.fieldPath === "metadata.namespace" ? ds.metadata.namespace : "node-a";
  }
  // No health server here (tests run side by side); every other switch as rendered.
  const args = (c.args as string[]).filter((a, i, all) => a !== "--health-port" && all[i - 1] !== "--health-port").map(map);
  const conflist = () => JSON.parse(readFileSync(join(netDir, "10-calico.conflist"), "utf8"));
  return {
    env,
    netDir,
    binDir,
    conflist,
    // --host-root's default is the mount's path in the container; here it is mapped.
    main: [map(c.command[0]), ...args, "--service-account-dir", sa, "--host-root", map(rootMount.mountPath)],
    preStop: (c.lifecycle.preStop.exec.command as string[]).map(map),
    isChained: () => conflist().plugins.some((p: Obj) => p.type === "meshcni"),
    leftovers: () => [join(binDir, "meshcni"), join(netDir, "ZZZ-meshcni-kubeconfig")].filter((f) => existsSync(f)),
  };
}

/** A process id that is no longer in use (preStop must never signal the test machine's PID 1). */
function deadPid(): string {
  const p = Bun.spawnSync(["true"]);
  return String(p.pid);
}

test("the rendered DaemonSet's installer command installs, and its preStop undoes when no installer runs", () => {
  const node = setUp("once");
  const run = (argv: string[]) => Bun.spawnSync(argv, { env: { ...node.env, MESHCNI_STOP_PID: deadPid() }, stdout: "pipe", stderr: "pipe" });
  const install = run([...node.main, "--once"]);
  expect(install.stderr.toString()).not.toContain("error");
  expect(install.exitCode).toBe(0);
  const ours = node.conflist().plugins.at(-1);
  expect(ours.type).toBe("meshcni");
  expect(ours.log_level).toBe("debug");
  expect(ours.kubernetes.pod_namespace).toBe("mesh-system");
  expect(ours.kubernetes.kubeconfig).toBe("/etc/cni/net.d/ZZZ-meshcni-kubeconfig");
  expect(node.leftovers().length).toBe(2);
  // The installer checked the plugin against the mounted host root before installing it.
  expect(install.stdout.toString() + install.stderr.toString()).toContain(`this host can run ${join(tmp, "once", "container")}/opt/meshcni/meshcni (`);

  const undo = run(node.preStop);
  expect(undo.exitCode).toBe(0);
  expect(node.isChained()).toBe(false);
  expect(node.leftovers()).toEqual([]);
});

test("preStop against the running installer: it undoes, once, and preStop returns when it is done", async () => {
  const node = setUp("run");
  const installer = Bun.spawn(node.main, { env: node.env, stdout: "pipe", stderr: "pipe" });
  try {
    for (let i = 0; i < 100 && !node.isChained(); i++) await Bun.sleep(50);
    expect(node.isChained()).toBe(true);
    // In the container the installer is PID 1, preStop's default; here it is the child's pid.
    const undo = Bun.spawn(node.preStop, { env: { ...node.env, MESHCNI_STOP_PID: String(installer.pid) }, stdout: "pipe", stderr: "pipe" });
    expect(await undo.exited).toBe(0);
    // preStop returned only after the installer had undone everything and exited.
    expect(installer.exitCode).toBe(0);
    expect(node.isChained()).toBe(false);
    expect(node.leftovers()).toEqual([]);
    // preStop itself wrote nothing: it did not need to undo.
    expect(await new Response(undo.stderr).text()).not.toContain("undoing directly");
  } finally {
    installer.kill("SIGKILL");
  }
});
