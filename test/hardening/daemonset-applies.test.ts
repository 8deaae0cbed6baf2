// The rendered DaemonSet applies pods' rules (issue 22), run by podman with exactly the rendered
// security context and mounts (test/support/daemonset-podman.ts translates it field by field),
// in an image laid out as `bun run image` lays it plus the userland the agent applies with (this
// machine's libnftables and iptables-nft/-legacy with their libraries and extensions, standing in
// for the image's). The agent reaches the stand-in API server through a relay into its container's
// own network namespace (--network none). Pods are namespaces made on this host under
// /var/run/netns, wired by bridge + host-local, with the compiled plugin chained after them; the
// plugin runs in a private mount namespace where the container's state folder is the host's
// /var/run/meshcni, with or without the host's iptables, nft, nsenter and libnftables.
//
// - Rendered with the capabilities: the agent applies; the plugin, with no userland at all, meshes
//   a pod (real rules inside, real TCP to a stand-in proxy port).
// - Rendered without them (--agent-applies=false), and with exactly one of the two missing: the
//   agent says so (its log, GET /v1/applies); the plugin applies with the host's userland, and
//   without it fails closed (11). Never a pod started without its rules.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  realpathSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { checkBinaryOnHost } from "../../internal/agent/install/io/host-root.ts";
import { buildManifests } from "../../internal/cli/manifests/objects.ts";
import { parseValues } from "../../internal/cli/manifests/values.ts";
import { agentRequest } from "../../internal/plugin/agent/client.ts";
import { ensureBuilt, PLUGIN } from "../agent/harness.ts";
import { type ApiServer, startApiServer } from "../support/apiserver.ts";
import { bridgeConflist, CniRuntime } from "../support/cni-runtime.ts";
import { translatePod } from "../support/daemonset-podman.ts";
import { hiddenUserland } from "../support/hidden-userland.ts";
import { type Relay, relayInto } from "../support/netns-relay.ts";
import { isRoot, type Listener, listen, Netns, probe, sh, uniq } from "../support/netns.ts";
import { REFERENCE_PLUGINS } from "../support/pod-lab.ts";

type Obj = Record<string, any>;
const ULIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096"];
const canRun = isRoot() && Bun.which("podman") !== null && Bun.which("runc") !== null;
const NS = "emojivoto";
const TOKEN = "probe-token";

/** A file of this machine at the same path in `root`, with the libraries ldd says it loads. */
function stageWithLibraries(root: string, file: string, seen = new Set<string>()): void {
  if (seen.has(file)) return;
  seen.add(file);
  mkdirSync(join(root, dirname(file)), { recursive: true });
  if (!existsSync(join(root, file))) copyFileSync(realpathSync(file), join(root, file));
  const ldd = sh(["ldd", file]).stdout;
  for (const m of ldd.matchAll(/=> (\/\S+)/g)) stageWithLibraries(root, m[1]!, seen);
}

/** The agent image's files: the node binary and its loader (as scripts/image.ts stages them) and the userland. */
function stageRootfs(root: string): void {
  mkdirSync(join(root, "opt/meshcni"), { recursive: true });
  copyFileSync(PLUGIN, join(root, "opt/meshcni/meshcni"));
  symlinkSync("meshcni", join(root, "opt/meshcni/meshcni-installer"));
  const verdict = checkBinaryOnHost("/", PLUGIN);
  if (verdict.ok !== true) throw new Error(`this machine cannot run ${PLUGIN}: ${JSON.stringify(verdict)}`);
  for (const f of verdict.files) {
    mkdirSync(join(root, dirname(f.path)), { recursive: true });
    copyFileSync(f.real, join(root, f.path));
  }
  const seen = new Set<string>();
  stageWithLibraries(root, "/usr/lib/x86_64-linux-gnu/libnftables.so.1", seen);
  for (const multi of ["xtables-nft-multi", "xtables-legacy-multi"]) {
    stageWithLibraries(root, `/usr/sbin/${multi}`, seen);
    const variant = multi.split("-")[1];
    for (const fam of ["iptables", "ip6tables"])
      for (const what of ["restore", "save"]) symlinkSync(multi, join(root, `usr/sbin/${fam}-${variant}-${what}`));
  }
  const ext = "/usr/lib/x86_64-linux-gnu/xtables";
  for (const f of readdirSync(ext)) stageWithLibraries(root, `${ext}/${f}`, seen);
}

function pod(name: string) {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name,
      namespace: NS,
      uid: crypto.randomUUID(),
      annotations: { "linkerd.io/inject": "enabled" },
    },
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

interface Scenario {
  name: string;
  /** What the rendered DaemonSet is changed to before it runs (a capability taken out). */
  values: Obj;
  drop?: "NET_ADMIN" | "SYS_ADMIN";
  applies: boolean;
}

const SCENARIOS: Scenario[] = [
  { name: "rendered with NET_ADMIN and SYS_ADMIN", values: {}, applies: true },
  { name: "rendered with --agent-applies=false", values: { agentApplies: false }, applies: false },
  { name: "rendered, then NET_ADMIN taken out", values: {}, drop: "NET_ADMIN", applies: false },
  { name: "rendered, then SYS_ADMIN taken out", values: {}, drop: "SYS_ADMIN", applies: false },
];

describe.skipIf(!canRun)("the rendered DaemonSet in podman applies pods' rules, or says why not", () => {
  let scratch: string;
  let rootfs: string;
  let api: ApiServer;
  let kubeconfig: string;
  let outside: Listener;
  const listeners: Listener[] = [];
  const netnses: Netns[] = [];
  const bridges: string[] = [];

  const podman = async (args: string[]) => {
    const p = Bun.spawn(["podman", "--root", join(scratch, "storage"), "--runroot", join(scratch, "run"), ...args], {
      env: { ...Bun.env, CONTAINERS_CONF: join(scratch, "containers.conf") },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [stdout, stderr, code] = await Promise.all([
      new Response(p.stdout).text(),
      new Response(p.stderr).text(),
      p.exited,
    ]);
    return { code, stdout, stderr };
  };

  beforeAll(async () => {
    ensureBuilt();
    scratch = mkdtempSync(join(tmpdir(), "meshcni-ds-applies-"));
    writeFileSync(
      join(scratch, "containers.conf"),
      [
        "[network]",
        'network_backend = "cni"',
        `network_config_dir = ${JSON.stringify(join(scratch, "net.d"))}`,
        "[engine]",
        'runtime = "runc"',
        'cgroup_manager = "cgroupfs"',
        'events_logger = "file"',
        "",
      ].join("\n"),
    );
    mkdirSync(join(scratch, "net.d"));
    rootfs = join(scratch, "rootfs");
    stageRootfs(rootfs);
    api = await startApiServer({ token: TOKEN });
    api.addNamespace({ metadata: { name: NS } });
    api.addNamespace({ metadata: { name: "meshcni" } });
    kubeconfig = join(scratch, "kubeconfig");
    writeFileSync(kubeconfig, api.kubeconfig(), { mode: 0o600 });
    outside = await listen(undefined, { 19996: "outside" });
  }, 120_000);

  afterAll(async () => {
    outside?.stop();
    for (const l of listeners) l.stop();
    for (const n of netnses) n.delete();
    for (const b of bridges) sh(["ip", "link", "del", b]);
    await api?.close();
    if (!scratch) return;
    const mounts = readFileSync("/proc/self/mounts", "utf8")
      .split("\n")
      .map((l) => l.split(" ")[1] ?? "")
      .filter((m) => m.startsWith(scratch))
      .sort((a, b) => b.length - a.length);
    for (const m of mounts) Bun.spawnSync(["umount", "-l", m]);
    rmSync(scratch, { recursive: true, force: true });
  });

  for (const [i, sc] of SCENARIOS.entries()) {
    test(sc.name, async () => {
      const dir = join(scratch, `s${i}`);
      mkdirSync(dir);
      const objects = buildManifests(parseValues(sc.values));
      const ds = objects.find((o) => o.kind === "DaemonSet") as Obj;
      const container = ds.spec.template.spec.containers[0];
      if (sc.drop)
        container.securityContext.capabilities.add = container.securityContext.capabilities.add.filter(
          (c: string) => c !== sc.drop,
        );
      const configMaps = Object.fromEntries(
        objects.filter((o) => o.kind === "ConfigMap").map((o) => [o.metadata.name, o]),
      );
      const relayPort = 17000 + ((process.pid + i * 13) % 2000);
      const translated = translatePod(ds, {
        scratch: dir,
        namespace: ds.metadata.namespace,
        nodeName: "node-a",
        configMaps,
        serviceAccount: {
          token: TOKEN,
          "ca.crt": api.caPem,
          namespace: ds.metadata.namespace,
        },
        extraEnv: { KUBERNETES_SERVICE_HOST: "127.0.0.1", KUBERNETES_SERVICE_PORT: String(relayPort) },
      });
      const name = `meshcni-dsa-${uniq()}`;
      const run = await podman([
        "run",
        "-d",
        "--name",
        name,
        ...ULIMITS,
        ...translated.options,
        "--rootfs",
        rootfs,
        ...translated.command,
      ]);
      if (run.code !== 0) throw new Error(`podman run: ${run.stderr}`);
      let relay: Relay | undefined;
      const logs = async () => {
        const l = await podman(["logs", name]);
        return l.stdout + l.stderr;
      };
      try {
        const pid = (await podman(["inspect", "-f", "{{.State.Pid}}", name])).stdout.trim();
        relay = await relayInto(`/proc/${pid}/ns/net`, relayPort, {
          host: "127.0.0.1",
          port: Number(new URL(api.url).port),
        });
        // The state folder as the host sees it: the translation's fresh folder for /var/run/meshcni.
        const state = translated.mounts.find((m) => m.path === "/var/run/meshcni")!.source;
        const socket = join(state, "agent.sock");
        let said = "";
        for (let t = 0; t < 300 && !said; t++) {
          said = /the agent (?:applies pods' rules|does not apply pods' rules)[^\n]*/.exec(await logs())?.[0] ?? "";
          if (!said) await Bun.sleep(100);
        }
        console.log(`${sc.name}: ${said}`);
        const applies = await agentRequest(socket, "GET", "/v1/applies", undefined, 2000).then((r) =>
          JSON.parse(r.body),
        );
        expect(applies.applies).toBe(sc.applies);
        if (sc.applies) {
          expect(said).toContain("the agent applies pods' rules");
          expect(said).toContain("nftables in process");
        } else if (sc.drop) {
          expect(said).toContain(`lacks CAP_${sc.drop}`);
        } else {
          expect(said).toContain("turned off (--agent-applies=false)");
        }
        const status = readFileSync(`/proc/${pid}/status`, "utf8");
        const capEff = /CapEff:\s+(\S+)/.exec(status)![1];
        const want = (sc.values.agentApplies === false ? [] : ["NET_ADMIN", "SYS_ADMIN"].filter((c) => c !== sc.drop))
          .map((c) => (c === "NET_ADMIN" ? 1n << 12n : 1n << 21n))
          .reduce((a, b) => a | b, 0n);
        expect(BigInt(`0x${capEff}`)).toBe(want);
        // Its own filter on top of the runtime's when it applies.
        expect(/Seccomp_filters:\s+(\d+)/.exec(status)![1]).toBe(sc.applies ? "2" : "1");

        // A pod of node-a: its namespace made here, under /var/run/netns, which the agent sees.
        const web = pod(`web-${i}`);
        api.addPod(web);
        for (let t = 0; t < 150; t++) {
          const r = await agentRequest(socket, "GET", `/v1/pods/${NS}/${web.metadata.name}`, undefined, 2000).catch(
            () => undefined,
          );
          if (r?.status === 200) break;
          await Bun.sleep(100);
        }
        const bridge = `mcd${uniq()}`.slice(0, 15);
        bridges.push(bridge);
        const subnet = `10.${40 + ((process.pid + i) % 80)}.${30 + i}.0/24`;
        const entry = {
          name: "meshcni",
          log_level: "info",
          kubernetes: { kubeconfig, exclude_namespaces: [] },
          agent_socket: "/var/run/meshcni/agent.sock",
          state_dir: "/var/run/meshcni",
        };
        const conflist = bridgeConflist({
          name: `dsa-${i}`,
          bridge,
          subnet,
          ipamDir: join(dir, "ipam"),
          meshcni: entry,
        });
        const binds = [{ source: state, target: "/var/run/meshcni" }];
        const bare = hiddenUserland(join(dir, "bare"), { binds });
        const equipped = hiddenUserland(join(dir, "equipped"), { binds, hide: false });
        const attempt = async (plugins: string) => {
          const netns = Netns.create(`mcd-${uniq()}`);
          netnses.push(netns);
          const runtime = new CniRuntime(conflist, [REFERENCE_PLUGINS, plugins], join(dir, "cni-cache"));
          const a = { containerId: `c${uniq()}${uniq()}`, netns: netns.path, ifname: "eth0" };
          const cniArgs = `IgnoreUnknown=1;K8S_POD_NAMESPACE=${NS};K8S_POD_NAME=${web.metadata.name};K8S_POD_UID=${web.metadata.uid}`;
          const ruled = () =>
            netns.exec(["nft", "list", "ruleset"]).stdout.includes("PROXY_INIT_REDIRECT") ||
            netns.save("nft").includes("PROXY_INIT_REDIRECT") ||
            netns.save("legacy").includes("PROXY_INIT_REDIRECT");
          try {
            const result = (await runtime.add({ ...a, cniArgs })) as any;
            return { ok: true as const, netns, ruled: ruled(), ip: String(result.ips[0].address).split("/")[0]! };
          } catch (e) {
            const out = (e as { run?: { stdout: string } }).run?.stdout ?? "";
            return { ok: false as const, netns, ruled: ruled(), code: JSON.parse(out || "{}").code as number };
          }
        };
        // No userland on the host: only the agent can mesh the pod.
        const withoutUserland = await attempt(bare.pluginDir);
        if (sc.applies) {
          expect(withoutUserland).toMatchObject({ ok: true, ruled: true });
          if (!withoutUserland.ok) return;
          // auto: iptables-nft, from the agent's image, started in the pod's namespace.
          expect(withoutUserland.netns.save("nft")).toContain("PROXY_INIT_REDIRECT");
          listeners.push(await listen(withoutUserland.netns, { 4143: "proxy-inbound", 4140: "proxy-outbound" }));
          expect(probe(undefined, withoutUserland.ip, 8080)).toBe("proxy-inbound port=4143");
          const gw = subnet.replace(/0\/24$/, "1");
          expect(probe(withoutUserland.netns, gw, 19996)).toBe("proxy-outbound port=4140");
          const line = /plugin ADD pod=emojivoto\/web-\d+ outcome=meshed [^\n]*/.exec(await logs())?.[0] ?? "";
          expect(line).toContain("backend=nft ");
        } else {
          // Fails closed, retryable: no pod without its rules.
          expect(withoutUserland).toMatchObject({ ok: false, code: 11, ruled: false });
          // With the host's userland the plugin applies, as before.
          const withUserland = await attempt(equipped.pluginDir);
          expect(withUserland).toMatchObject({ ok: true, ruled: true });
          if (withUserland.ok) {
            listeners.push(await listen(withUserland.netns, { 4143: "proxy-inbound" }));
            expect(probe(undefined, withUserland.ip, 8080)).toBe("proxy-inbound port=4143");
          }
        }
      } catch (e) {
        throw new Error(`${(e as Error).message}\n--- agent ---\n${await logs()}`);
      } finally {
        relay?.stop();
        await podman(["rm", "-f", "-t", "0", name]);
      }
    }, 120_000);
  }
});
