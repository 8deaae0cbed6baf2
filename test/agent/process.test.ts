// The compiled dist/meshcni-installer against real temporary host folders: install, the primary
// CNI rewriting its config, another file becoming the first, token rotation, SIGTERM/SIGINT
// undo, kill -9 in the middle of many writes, waiting for a config, a component that fights.
// The stand-in cluster holds no DaemonSet, as when meshcni is being removed: SIGTERM undoes
// (test/agent/agent.test.ts has the restarts that keep everything).
import { buildElfRewrite } from "../../internal/agent/install/hostcheck/elf-rewrite.ts";
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync, readFileSync, statSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseHostConfig } from "../../internal/agent/install/conflist/parse.ts";
import { repoPath } from "../support/golden.ts";
import {
  type Cluster,
  ensureBuilt,
  freePort,
  type HostDirs,
  INSTALLER,
  INSTALLER_ENV,
  type InstallerProcess,
  installerArgs,
  isChainedIn,
  PLUGIN,
  pluginTypes,
  readyz,
  startCluster,
  startInstaller,
  until,
} from "./harness.ts";

const host = (h: string, f: string) => readFileSync(repoPath("testdata/hosts", h, f), "utf8");
const CALICO = host("calico", "10-calico.conflist");
const FLANNEL_CONF = host("flannel-legacy", "10-flannel.conf");
const KINDNET = host("kind", "10-kindnet.conflist");

let dirs: HostDirs;
let running: InstallerProcess[] = [];
let fakePlugin: string;
let cluster: Cluster;

beforeAll(async () => {
  ensureBuilt();
  cluster = await startCluster();
}, 60_000);
afterAll(() => cluster?.close());
afterEach(async () => {
  for (const p of running) await p.stop("SIGKILL");
  running = [];
  dirs?.cleanup();
});

function start(extra: string[] = [], env: Record<string, string> = {}): InstallerProcess {
  const p = startInstaller(dirs, ["--plugin-binary", fakePlugin, ...extra], { ...cluster.env, ...env });
  running.push(p);
  return p;
}

function setup(files: Record<string, string> = {}): HostDirs {
  dirs = cluster.dirs();
  fakePlugin = join(dirs.root, "meshcni-build");
  writeFileSync(fakePlugin, `#!/bin/sh\n# stand-in plugin ${Math.random()}\n`, { mode: 0o755 });
  for (const [name, content] of Object.entries(files)) writeFileSync(join(dirs.net, name), content);
  return dirs;
}

/** No config file in the folder is torn: each parses, or is a file the agent does not own. */
function assertNothingTorn(): void {
  for (const name of readdirSync(dirs.net)) {
    if (!/\.(conflist|conf|json)$/.test(name)) continue;
    const parsed = parseHostConfig(name, dirs.file(name)!);
    expect({ name, ok: parsed.ok }).toEqual({ name, ok: true });
  }
}

describe("meshcni-installer process", () => {
  test("installs the real plugin binary, the kubeconfig and the chain; /readyz says ready; the token is never logged", async () => {
    setup({ "10-calico.conflist": CALICO });
    const port = freePort();
    const p = startInstaller(dirs, ["--health-port", String(port)], cluster.env);
    running.push(p);
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 10_000, "the chain");
    // The default --plugin-binary is the meshcni next to the agent: dist/meshcni, given its own
    // loader (meshcni.d/<id>/, named as --dest-bin-dir says), its program bytes untouched.
    const installed = readFileSync(join(dirs.bin, "meshcni"));
    const built = readFileSync(PLUGIN);
    const [id] = readdirSync(join(dirs.bin, "meshcni.d"));
    const elf = Bun.spawnSync(["readelf", "-l", "-W", join(dirs.bin, "meshcni")]).stdout.toString();
    expect(elf).toContain(`[Requesting program interpreter: ${dirs.bin}/meshcni.d/${id}/ld-linux-x86-64.so.2]`);
    const folder = `${dirs.bin}/meshcni.d/${id}`;
    const want = buildElfRewrite(built, { interpreter: `${folder}/ld-linux-x86-64.so.2`, runPath: folder }).bytes;
    expect(Buffer.compare(installed, want)).toBe(0);
    expect(statSync(join(dirs.bin, "meshcni")).mode & 0o777).toBe(0o755);
    const version = Bun.spawnSync([join(dirs.bin, "meshcni")], {
      env: { CNI_COMMAND: "VERSION" },
      stdin: new TextEncoder().encode('{"cniVersion":"1.0.0"}'),
    });
    expect(JSON.parse(version.stdout.toString()).cniVersion).toBe("1.1.0");
    const kubeconfig = join(dirs.net, "ZZZ-meshcni-kubeconfig");
    await until(() => existsSync(kubeconfig), 5000, "the kubeconfig");
    expect(statSync(kubeconfig).mode & 0o777).toBe(0o600);
    // A token of the plugin's own account, asked for with the agent's: never the agent's own.
    const issued = cluster.api.issued.at(-1)!;
    expect([issued.user, issued.by === undefined, issued.boundObjectRef]).toEqual([
      "system:serviceaccount:meshcni:meshcni-plugin",
      true,
      null,
    ]);
    expect(
      cluster.api.requests.find((q) => q.path.endsWith("/serviceaccounts/meshcni-plugin/token"))!.authorization,
    ).toBe("Bearer token-one");
    expect(readFileSync(kubeconfig, "utf8")).toContain(`token: "${issued.token}"`);
    expect(readFileSync(kubeconfig, "utf8")).not.toContain("token-one");
    const server = `https://127.0.0.1:${cluster.env.KUBERNETES_SERVICE_PORT}`;
    expect(readFileSync(kubeconfig, "utf8")).toContain(`server: ${server}`);
    const entry = JSON.parse(dirs.file("10-calico.conflist")!).plugins.at(-1);
    expect(entry.kubernetes).toEqual({
      kubeconfig: "/etc/cni/net.d/ZZZ-meshcni-kubeconfig",
      exclude_namespaces: [],
      pod_namespace: "meshcni",
    });
    expect([entry.agent_socket, entry.state_dir]).toEqual([dirs.socket, dirs.state]);
    await until(async () => (await readyz(port)).status === 200, 5000, "/readyz 200");
    expect((await fetch(`http://127.0.0.1:${port}/healthz`)).status).toBe(200);
    // One line per action, naming the file.
    const log = p.log();
    expect(log).toMatch(new RegExp(`installed the plugin binary: wrote ${join(dirs.bin, "meshcni")}`));
    expect(log).toMatch(
      new RegExp(
        `wrote the plugin's kubeconfig for ${server} \\(service account ` +
          `meshcni/meshcni-plugin, valid until \\S+\\): ${kubeconfig}`,
      ),
    );
    expect(log).toMatch(new RegExp(`chained meshcni: wrote ${join(dirs.net, "10-calico.conflist")}`));
    expect(await p.stop()).toBe(0);
    expect(p.log()).toContain("stopping: its DaemonSet meshcni/meshcni-node is gone (404); undoing the installation");
    expect(dirs.file("10-calico.conflist")).toBe(CALICO);
    expect(dirs.names()).toEqual(["10-calico.conflist"]);
    expect(readdirSync(dirs.bin)).toEqual([]);
    // The socket goes; the state folder stays for the records of a later install (none here).
    expect(existsSync(dirs.socket)).toBe(false);
    expect(readdirSync(dirs.state)).toEqual([]);
    expect(p.log()).not.toContain("token-one");
    expect(p.log()).not.toContain(issued.token);
  }, 30_000);

  test("a second start finds the binary in place and does not copy it again", async () => {
    setup({ "10-calico.conflist": CALICO });
    expect(await start(["--once"]).proc.exited).toBe(0);
    const before = statSync(join(dirs.bin, "meshcni"));
    const again = start(["--once"]);
    expect(await again.proc.exited).toBe(0);
    await again.stop();
    expect(again.log()).toContain("already holds this meshcni binary");
    expect(statSync(join(dirs.bin, "meshcni")).ino).toBe(before.ino);
  }, 30_000);

  test("the primary CNI rewriting its config many times in a row: chained again each time, undo gives its last bytes", async () => {
    setup({ "10-calico.conflist": CALICO });
    const p = start();
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 5000, "the chain");
    const latencies: number[] = [];
    let last = CALICO;
    for (let i = 0; i < 30; i++) {
      // under the back-off budget (40 re-chains of a file in 5 s)
      last = CALICO.replace('"mtu": 0', `"mtu": ${1400 + i}`);
      expect(last).not.toBe(CALICO);
      // Half of the rewrites in place (Bun writes, then truncates: a reader can catch it torn),
      // half by rename.
      if (i % 2) writeFileSync(join(dirs.net, "10-calico.conflist"), last);
      else dirs.writeHost("10-calico.conflist", last);
      const t0 = performance.now();
      await until(
        () =>
          isChainedIn(dirs, "10-calico.conflist") &&
          JSON.parse(dirs.file("10-calico.conflist")!).plugins[0].mtu === 1400 + i,
        5000,
        `re-chain ${i}`,
      );
      latencies.push(performance.now() - t0);
    }
    // And a burst with no pause at all: the agent catches up with the last one.
    for (let i = 0; i < 50; i++)
      dirs.writeHost("10-calico.conflist", (last = CALICO.replace('"mtu": 0', `"mtu": ${2000 + i}`)));
    await until(
      () =>
        isChainedIn(dirs, "10-calico.conflist") && JSON.parse(dirs.file("10-calico.conflist")!).plugins[0].mtu === 2049,
      5000,
      "catching up",
    );
    latencies.sort((a, b) => a - b);
    expect(latencies[Math.floor(latencies.length / 2)]!).toBeLessThan(100);
    expect(await p.stop()).toBe(0);
    expect(dirs.file("10-calico.conflist")).toBe(last);
    expect(p.log()).not.toContain("keeps losing");
  }, 30_000);

  test("another file becoming the first: meshcni moves there and the old file gets its bytes back", async () => {
    setup({ "10-kindnet.conflist": KINDNET });
    const p = start();
    await until(() => isChainedIn(dirs, "10-kindnet.conflist"), 5000, "the chain");
    dirs.writeHost("05-flannel.conf", FLANNEL_CONF);
    await until(
      () => isChainedIn(dirs, "05-flannel.conflist") && dirs.file("10-kindnet.conflist") === KINDNET,
      2000,
      "the move",
    );
    expect(dirs.file("05-flannel.conf")).toBeUndefined();
    // The new first file goes away again: back to kindnet.
    unlinkSync(join(dirs.net, "05-flannel.conflist"));
    await until(() => isChainedIn(dirs, "10-kindnet.conflist"), 2000, "the move back");
    expect(await p.stop("SIGINT")).toBe(0);
    expect(dirs.names()).toEqual(["10-kindnet.conflist"]);
    expect(dirs.file("10-kindnet.conflist")).toBe(KINDNET);
  }, 30_000);

  test("kubelet rotating the agent's own token (its ..data swap) leaves the plugin's token; a new CA rewrites the kubeconfig; no token is logged", async () => {
    setup({ "10-calico.conflist": CALICO });
    const port = freePort();
    const p = start(["--health-port", String(port)]);
    const kubeconfig = join(dirs.net, "ZZZ-meshcni-kubeconfig");
    await until(() => existsSync(kubeconfig), 5000, "the kubeconfig");
    const first = readFileSync(kubeconfig, "utf8");
    const plugin = cluster.api.issued.at(-1)!.token;
    expect(first).toContain(`token: "${plugin}"`);
    dirs.projectToken("token-two-rotated");
    await until(async () => (await readyz(port)).status === 200, 2000, "ready");
    await Bun.sleep(200);
    expect(readFileSync(kubeconfig, "utf8")).toBe(first);
    // The agent asks with its rotated token from then on.
    cluster.api.requests.length = 0;
    const pem = `${cluster.caPem}\n${cluster.caPem}`;
    dirs.projectToken("token-three", pem);
    await until(() => readFileSync(kubeconfig, "utf8") !== first, 2000, "the new CA");
    const text = readFileSync(kubeconfig, "utf8");
    expect(text).toContain(`certificate-authority-data: ${Buffer.from(pem).toString("base64")}`);
    expect(text).toContain(`token: "${plugin}"`);
    expect(statSync(kubeconfig).mode & 0o777).toBe(0o600);
    await p.waitForLog(/rewrote the plugin's kubeconfig \(CA, server or mode changed\)/);
    expect(await p.stop()).toBe(0);
    expect(cluster.api.requests.every((q) => q.authorization === "Bearer token-three")).toBe(true);
    expect(p.log()).not.toMatch(/token-one|token-two|token-three/);
    expect(p.log()).not.toContain(plugin);
  }, 30_000);

  test("SIGTERM undo puts a converted .conf back byte for byte", async () => {
    setup({ "10-flannel.conf": FLANNEL_CONF });
    const p = start();
    await until(() => isChainedIn(dirs, "10-flannel.conflist"), 5000, "the conversion");
    // The .conf goes only after the .conflist is in place: a moment later.
    await until(() => !dirs.names().includes("10-flannel.conf"), 5000, "the .conf removed");
    await until(() => existsSync(join(dirs.net, "ZZZ-meshcni-kubeconfig")), 5000, "the kubeconfig");
    expect(dirs.names()).toEqual(["10-flannel.conflist", "ZZZ-meshcni-kubeconfig", "ZZZ-meshcni-undo"]);
    expect(await p.stop("SIGTERM")).toBe(0);
    expect(dirs.names()).toEqual(["10-flannel.conf"]);
    expect(dirs.file("10-flannel.conf")).toBe(FLANNEL_CONF);
  }, 30_000);

  test("a conflist the host rewrote (keeping meshcni) keeps the host's latest content minus meshcni's entry", async () => {
    setup({ "10-calico.conflist": CALICO });
    const p = start();
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 5000, "the chain");
    const doc = JSON.parse(dirs.file("10-calico.conflist")!);
    doc.plugins[0].mtu = 1450;
    dirs.writeHost("10-calico.conflist", JSON.stringify(doc));
    await Bun.sleep(50);
    expect(await p.stop()).toBe(0);
    doc.plugins.pop();
    expect(JSON.parse(dirs.file("10-calico.conflist")!)).toEqual(doc);
  }, 30_000);

  test("kill -9 in the middle of many writes, then a restart: no torn file, and undo still exact", async () => {
    setup({ "10-flannel.conf": FLANNEL_CONF, "20-calico.conflist": CALICO });
    let hostLast = CALICO; // the last bytes the host wrote to 20-calico.conflist
    for (let round = 0; round < 6; round++) {
      const p = start();
      await until(
        () => isChainedIn(dirs, "10-flannel.conflist") || isChainedIn(dirs, "05-calico.conflist"),
        5000,
        "the chain",
      ).catch((e) => {
        throw new Error(`${e.message}; folder: ${dirs.names().join(" ")}\n${p.log()}`);
      });
      // The host keeps writing; alternate which file is the first one.
      let stop = false;
      const writer = (async () => {
        for (let i = 0; !stop; i++) {
          const content = CALICO.replace('"mtu": 0', `"mtu": ${round * 1000 + i}`);
          if (i % 7 === 3) dirs.writeHost("05-calico.conflist", content);
          else if (i % 7 === 5 && existsSync(join(dirs.net, "05-calico.conflist")))
            unlinkSync(join(dirs.net, "05-calico.conflist"));
          else dirs.writeHost("20-calico.conflist", (hostLast = content));
          await Bun.sleep(1 + (i % 3));
        }
      })();
      await Bun.sleep(30 + Math.random() * 120);
      p.proc.kill("SIGKILL");
      await p.stop();
      stop = true;
      await writer;
      assertNothingTorn();
    }
    if (existsSync(join(dirs.net, "05-calico.conflist"))) unlinkSync(join(dirs.net, "05-calico.conflist"));
    const last = start();
    await last.waitForLog(/meshcni is chained in .*10-flannel\.conflist|chained meshcni into 10-flannel\.conf/);
    await until(() => dirs.names().every((n) => !n.endsWith(".meshcni-tmp")), 2000, "temp files cleaned");
    expect(await last.stop()).toBe(0);
    expect(dirs.names()).toEqual(["10-flannel.conf", "20-calico.conflist"]);
    expect(dirs.file("10-flannel.conf")).toBe(FLANNEL_CONF);
    expect(dirs.file("20-calico.conflist")).toBe(hostLast);
  }, 30_000);

  test("--uninstall after a kill -9 in the middle of a removal: the host file held aside goes back, nothing is left", async () => {
    setup({ "10-flannel.conf": FLANNEL_CONF });
    expect(await start(["--once"]).proc.exited).toBe(0);
    expect(dirs.names()).toEqual(["10-flannel.conflist", "ZZZ-meshcni-kubeconfig", "ZZZ-meshcni-undo"]);
    // As if the kill came between taking 10-flannel.conf aside and deleting it.
    writeFileSync(join(dirs.net, ".10-flannel.conf.0a1b2c3d.meshcni-held"), FLANNEL_CONF);
    const u = Bun.spawnSync([INSTALLER, ...installerArgs(dirs, ["--uninstall"])], {
      env: {},
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(u.exitCode).toBe(0);
    expect(dirs.names()).toEqual(["10-flannel.conf"]);
    expect(dirs.file("10-flannel.conf")).toBe(FLANNEL_CONF);
  }, 30_000);

  test("--uninstall after a kill -9 undoes everything from the record on disk", async () => {
    setup({ "10-flannel.conf": FLANNEL_CONF });
    const p = start();
    await until(() => isChainedIn(dirs, "10-flannel.conflist"), 5000, "the chain");
    p.proc.kill("SIGKILL");
    await p.stop();
    const u = Bun.spawnSync([INSTALLER, ...installerArgs(dirs, ["--uninstall"])], {
      env: {},
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(u.exitCode).toBe(0);
    expect(dirs.names()).toEqual(["10-flannel.conf"]);
    expect(dirs.file("10-flannel.conf")).toBe(FLANNEL_CONF);
    expect(readdirSync(dirs.bin)).toEqual([]);
  }, 30_000);

  test("with no config yet it waits, not ready, then chains the first one that appears; --once exits then", async () => {
    setup();
    const port = freePort();
    const p = start(["--once", "--health-port", String(port)]);
    await p.waitForLog(/waiting for a CNI network config in/);
    await until(
      async () => (await readyz(port).catch(() => ({ status: 0, body: "" }))).status === 503,
      5000,
      "/readyz 503",
    );
    expect((await readyz(port)).body).toContain("no CNI network config in");
    writeFileSync(join(dirs.net, "10-broken.conflist"), '{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"bri');
    await p.waitForLog(/skipped .*10-broken\.conflist: not JSON/);
    expect(p.proc.exitCode).toBeNull();
    dirs.writeHost("20-calico.conflist", CALICO);
    expect(await p.proc.exited).toBe(0);
    expect(isChainedIn(dirs, "20-calico.conflist")).toBe(true);
    // The unparseable file was never rewritten.
    expect(dirs.file("10-broken.conflist")).toBe('{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"bri');
  }, 30_000);

  test("--once stopped before any config appeared exits 1", async () => {
    setup();
    const p = start(["--once"]);
    await p.waitForLog(/waiting for a CNI network config in/);
    expect(await p.stop("SIGTERM")).toBe(1);
    expect(p.log()).toContain("stopped before meshcni was chained (--once)");
  }, 30_000);

  test("--conf-name picks the file, and finds a converted .conf under its new name after a restart", async () => {
    setup({ "05-first.conflist": KINDNET, "10-flannel.conf": FLANNEL_CONF });
    const a = start(["--once", "--conf-name", "10-flannel.conf"]);
    expect(await a.proc.exited).toBe(0);
    expect(isChainedIn(dirs, "10-flannel.conflist")).toBe(true);
    expect(dirs.file("05-first.conflist")).toBe(KINDNET);
    const b = start(["--conf-name", "10-flannel.conf"]);
    await b.waitForLog(/meshcni is chained in .*10-flannel\.conflist/);
    expect(await b.stop()).toBe(0);
    expect(dirs.file("10-flannel.conf")).toBe(FLANNEL_CONF);
  }, 30_000);

  test("a component that keeps removing the entry: a warning naming the file, and back-off", async () => {
    setup({ "10-calico.conflist": CALICO });
    const p = start();
    await until(() => isChainedIn(dirs, "10-calico.conflist"), 5000, "the chain");
    // A Cilium-like agent: whenever meshcni's entry appears, write its own config back.
    let writes = 0;
    let stop = false;
    const fighter = (async () => {
      while (!stop) {
        if (pluginTypes(dirs, "10-calico.conflist")?.includes("meshcni")) {
          dirs.writeHost("10-calico.conflist", CALICO);
          writes++;
        }
        await Bun.sleep(1);
      }
    })();
    await p.waitForLog(/10-calico\.conflist keeps losing meshcni's entry .*backing off/, 10_000);
    const atWarning = writes;
    await Bun.sleep(1500);
    stop = true;
    await fighter;
    // Backing off: 100 ms doubling, so at most a handful of re-chains in 1.5 s.
    expect(writes - atWarning).toBeLessThanOrEqual(6);
    expect(writes - atWarning).toBeGreaterThanOrEqual(2);
    expect(await p.stop()).toBe(0);
    expect(dirs.file("10-calico.conflist")).toBe(CALICO);
  }, 30_000);

  test("bad usage and bad entries get a clear answer and exit 2; missing service env exits 1", async () => {
    setup({ "10-calico.conflist": CALICO });
    const run = (args: string[], env: Record<string, string> = INSTALLER_ENV) => {
      const r = Bun.spawnSync([INSTALLER, ...args], { env, stdout: "pipe", stderr: "pipe" });
      return { code: r.exitCode, out: r.stdout.toString() + r.stderr.toString() };
    };
    expect(run(["--bogus"])).toEqual({ code: 2, out: expect.stringContaining("Unknown option '--bogus'") });
    writeFileSync(join(dirs.root, "entry.json"), '{"type":"meshcni","mesh":"consul"}');
    expect(run(installerArgs(dirs, ["--once", "--plugin-config", join(dirs.root, "entry.json")]))).toEqual({
      code: 2,
      out: expect.stringContaining("the plugin would reject it: mesh"),
    });
    expect(run(installerArgs(dirs, ["--once", "--plugin-binary", fakePlugin]), {})).toEqual({
      code: 1,
      out: expect.stringContaining("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set"),
    });
    expect(run(installerArgs(dirs, ["--once", "--plugin-binary", "/nonexistent/meshcni"]))).toEqual({
      code: 1,
      out: expect.stringContaining("the plugin binary /nonexistent/meshcni does not exist"),
    });
    expect(run(["--help"]).out).toContain("MESHCNI_HOST_NET_DIR");
    expect(dirs.file("10-calico.conflist")).toBe(CALICO);
  }, 30_000);
});
