// containerd's CRI as kubelet drives it: Debian's containerd 1.6 started with a private config,
// root, state, runc root and gRPC socket under one temp folder, its CRI plugin pointed at a
// private CNI bin folder and conflist folder, and a sandbox ("pause") image built here and
// imported with `ctr` (no registry is reachable). Tests call the CRI's RuntimeService over the
// socket as kubelet does: RunPodSandbox, PodSandboxStatus, StopPodSandbox, RemovePodSandbox.
//
// Plugin types named in `record` are installed behind a small recording wrapper: each call's
// CNI_* environment, stdin, exit status and the pod namespace's rules right after the call are
// kept, and the real plugin runs unchanged (its stdout and stderr go where containerd points them).
//
//   const cri = await Cri.start({ plugins: { meshcni: "dist/meshcni" }, record: ["meshcni"] });
//   await cri.writeConflist("10-pods.conflist", conflist);   // waits until containerd loaded it
//   const sb = await cri.runPodSandbox({ name, namespace, uid });   // sb.ip, sb.netns
//   await cri.stopPodSandbox(sb.id); await cri.removePodSandbox(sb.id);
//   await cri.close();                                         // also after a failed test
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import type { Subprocess } from "bun";
import {
  decode,
  getMsg,
  getMsgs,
  getStr,
  getStringMap,
  getUint,
  GrpcClient,
  message,
  str,
  stringMap,
  sub,
  uint,
} from "./cri-wire.ts";
import { must, Netns, sh } from "./netns.ts";

export const REFERENCE_PLUGINS = "/usr/lib/cni";
const SANDBOX_IMAGE = "meshcni.test/pause:1";
const RUNTIME = "/runtime.v1.RuntimeService";
const IMAGES = "/runtime.v1.ImageService";

export interface CriOptions {
  /** CNI plugins besides Debian's reference ones (all of /usr/lib/cni), by type: the binary. */
  plugins?: Record<string, string>;
  /** Plugin types whose every call is recorded (see `calls`). */
  record?: string[];
  /** The conflist folder of the default network (`cni.conf_dir`); a fresh folder when absent. */
  netDir?: string;
  /**
   * The CNI bin folder (`cni.bin_dir`), e.g. where an installer under test puts the plugin; a
   * fresh folder when absent. The reference plugins and `plugins` are linked into it.
   */
  binDir?: string;
  /**
   * More conflist folders, each served by a runtime handler of that name (the handler's
   * `cni_conf_dir`); `runPodSandbox(meta, { netDir })` picks the handler of the folder.
   */
  handlerNetDirs?: Record<string, string>;
}

export interface SandboxMeta {
  name: string;
  namespace: string;
  uid: string;
  attempt?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface Sandbox {
  id: string;
  meta: SandboxMeta;
  /** The pod's IPv4 (or only) address, as PodSandboxStatus reports it. */
  ip: string;
  /** The sandbox's network namespace (containerd pins it under /var/run/netns). */
  netns: Netns;
}

export interface SandboxStatus {
  id: string;
  name: string;
  namespace: string;
  uid: string;
  ready: boolean;
  ip: string;
  /** Path of the network namespace, from the verbose status' runtime spec; "" when unknown. */
  netnsPath: string;
  /** The verbose status' `info` entry (JSON): runtime spec, CNI result, process status. */
  info: any;
}

/** One call of a recorded plugin, as the runtime made it. */
export interface PluginCall {
  command: string;
  /** The CNI_* variables the plugin got (empty ones included). */
  env: Record<string, string>;
  /** CNI_ARGS split into its pairs. */
  args: Record<string, string>;
  stdin: string;
  exitCode: number;
  /**
   * iptables-legacy-save, ip6tables-legacy-save and `nft list ruleset` of CNI_NETNS after the call;
   * undefined when there was no netns.
   */
  rulesAfter: string | undefined;
}

/** The recording wrapper installed in place of a plugin. `@REAL@` and `@DIR@` are filled in. */
const RECORDER = `#!/bin/sh
# Written by test/support/cri.ts: records one call of @REAL@ as the runtime made it,
# runs it unchanged, then records its exit status and the rules in CNI_NETNS after the call.
r="@DIR@/$(date +%s%N)-$$"
env | grep '^CNI_' > "$r.env"
cat > "$r.stdin"
"@REAL@" "$@" < "$r.stdin"
rc=$?
if [ -n "$CNI_NETNS" ] && [ -e "$CNI_NETNS" ]; then
  for c in iptables-legacy-save ip6tables-legacy-save "nft list ruleset"; do
    echo "### $c"
    nsenter --net="$CNI_NETNS" $c 2>&1
  done > "$r.rules"
fi
echo "$rc" > "$r.rc"
exit "$rc"
`;

export class Cri {
  readonly socket: string;
  readonly netDir: string;
  readonly binDir: string;
  readonly logFile: string;
  private readonly recordDir: string;
  private readonly handlerNetDirs: Record<string, string>;
  private readonly client: GrpcClient;
  private containerd: Subprocess | undefined;
  private readonly netnsSeen = new Set<string>();
  private readonly bridges = new Set<string>();

  private constructor(
    readonly dir: string,
    opts: CriOptions,
  ) {
    this.socket = join(dir, "containerd.sock");
    this.netDir = opts.netDir ?? join(dir, "net.d");
    this.binDir = opts.binDir ?? join(dir, "bin");
    this.logFile = join(dir, "containerd.log");
    this.recordDir = join(dir, "calls");
    this.handlerNetDirs = opts.handlerNetDirs ?? {};
    this.client = new GrpcClient(this.socket);
  }

  /**
   * Starts containerd and waits until its CRI answers with the sandbox image in place. Throws,
   * with the reason and containerd's last log lines, when containerd cannot run here.
   */
  static async start(opts: CriOptions = {}): Promise<Cri> {
    for (const bin of ["containerd", "ctr", "runc", "containerd-shim-runc-v2"]) {
      if (!Bun.which(bin))
        throw new Error(`${bin} is not installed: run scripts/setup.sh (Debian packages containerd and runc)`);
    }
    if (!existsSync("/bin/busybox"))
      throw new Error("/bin/busybox is missing: run scripts/setup.sh (Debian package busybox-static)");
    const cri = new Cri(mkdtempSync(join(tmpdir(), "meshcni-cri-")), opts);
    try {
      cri.installPlugins(opts.plugins ?? {}, new Set(opts.record ?? []));
      cri.writeConfig();
      await cri.launch();
      await cri.importSandboxImage();
      return cri;
    } catch (e) {
      const tail = existsSync(cri.logFile) ? cri.log().trim().split("\n").slice(-15).join("\n") : "";
      await cri.close();
      throw new Error(
        `containerd's CRI did not start: ` +
          `${(e as Error).message}${tail ? `\ncontainerd's log ends with:\n${tail}` : ""}`,
      );
    }
  }

  private installPlugins(plugins: Record<string, string>, record: Set<string>): void {
    mkdirSync(this.binDir, { recursive: true });
    mkdirSync(this.netDir, { recursive: true });
    mkdirSync(this.recordDir, { recursive: true });
    for (const f of readdirSync(REFERENCE_PLUGINS)) {
      if (!(f in plugins) && !existsSync(join(this.binDir, f)))
        symlinkSync(join(REFERENCE_PLUGINS, f), join(this.binDir, f));
    }
    for (const [type, path] of Object.entries(plugins)) {
      if (!existsSync(path)) throw new Error(`plugin ${type}: ${path} does not exist (run the build first)`);
      rmSync(join(this.binDir, type), { force: true });
      if (record.has(type)) {
        const dir = join(this.recordDir, type);
        mkdirSync(dir);
        writeFileSync(join(this.binDir, type), RECORDER.replaceAll("@REAL@", path).replaceAll("@DIR@", dir), {
          mode: 0o755,
        });
      } else {
        symlinkSync(path, join(this.binDir, type));
      }
    }
  }

  private writeConfig(): void {
    const d = this.dir;
    const cri = 'plugins."io.containerd.grpc.v1.cri"';
    const runtime = (name: string, extra: string[] = []) => [
      `[${cri}.containerd.runtimes.${name}]`,
      '  runtime_type = "io.containerd.runc.v2"',
      ...extra,
      `[${cri}.containerd.runtimes.${name}.options]`,
      `  Root = ${JSON.stringify(join(d, "runc"))}`,
    ];
    for (const dir of Object.values(this.handlerNetDirs)) mkdirSync(dir, { recursive: true });
    const lines = [
      "version = 2",
      `root = ${JSON.stringify(join(d, "root"))}`,
      `state = ${JSON.stringify(join(d, "state"))}`,
      // Snapshotters this machine cannot use only add warnings and start-up time.
      'disabled_plugins = ["io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", ' +
        '"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.aufs"]',
      "[grpc]",
      `  address = ${JSON.stringify(this.socket)}`,
      '[plugins."io.containerd.internal.v1.opt"]',
      `  path = ${JSON.stringify(join(d, "opt"))}`,
      `[${cri}]`,
      `  sandbox_image = ${JSON.stringify(SANDBOX_IMAGE)}`,
      // This kernel refuses the negative oom_score_adj containerd gives sandboxes.
      "  restrict_oom_score_adj = true",
      '  stream_server_address = "127.0.0.1"',
      '  stream_server_port = "0"',
      `[${cri}.cni]`,
      `  bin_dir = ${JSON.stringify(this.binDir)}`,
      `  conf_dir = ${JSON.stringify(this.netDir)}`,
      `[${cri}.containerd]`,
      '  default_runtime_name = "runc"',
      ...runtime("runc"),
      ...Object.entries(this.handlerNetDirs).flatMap(([name, dir]) =>
        runtime(name, [`  cni_conf_dir = ${JSON.stringify(dir)}`, "  cni_max_conf_num = 1"]),
      ),
      "",
    ];
    writeFileSync(join(d, "config.toml"), lines.join("\n"));
  }

  private async launch(): Promise<void> {
    const fd = openSync(this.logFile, "a");
    try {
      this.containerd = Bun.spawn(["containerd", "--config", join(this.dir, "config.toml")], {
        stdin: "ignore",
        stdout: fd,
        stderr: fd,
        env: { ...Bun.env },
      });
    } finally {
      closeSync(fd);
    }
    const deadline = Date.now() + 30_000;
    let last: unknown;
    while (Date.now() < deadline) {
      if (!this.running())
        throw new Error(`containerd exited (${this.containerd.signalCode ?? `status ${this.containerd.exitCode}`})`);
      if (existsSync(this.socket)) {
        try {
          const v = decode(await this.client.call(`${RUNTIME}/Version`, message(str(1, "v1")), 5_000));
          if (getStr(v, 2) === "containerd") return;
        } catch (e) {
          last = e;
        }
      }
      await Bun.sleep(50);
    }
    throw new Error(`containerd's CRI did not answer within 30 s${last ? ` (${(last as Error).message})` : ""}`);
  }

  /** containerd's own log (its stdout and stderr): where a plugin's stderr lands on success. */
  log(): string {
    return readFileSync(this.logFile, "utf8");
  }

  /** The log's size now, for `logSince`. */
  logMark(): number {
    return statSync(this.logFile).size;
  }

  logSince(mark: number): string {
    const fd = openSync(this.logFile, "r");
    try {
      const size = statSync(this.logFile).size;
      const buf = Buffer.alloc(Math.max(0, size - mark));
      readSync(fd, buf, 0, buf.length, mark);
      return buf.toString("utf8");
    } finally {
      closeSync(fd);
    }
  }

  // ---- the sandbox image ---------------------------------------------------------------------

  /**
   * Builds an OCI image archive of a static busybox whose entrypoint sleeps (a pause
   * container: StopPodSandbox kills it with SIGKILL) and imports it into the CRI's namespace.
   */
  private async importSandboxImage(): Promise<void> {
    const img = join(this.dir, "image");
    const layer = join(img, "layer");
    for (const d of ["bin", "dev", "proc", "sys", "etc", "tmp"]) mkdirSync(join(layer, d), { recursive: true });
    writeFileSync(join(layer, "bin/busybox"), readFileSync("/bin/busybox"), { mode: 0o755 });
    for (const a of ["sh", "sleep", "nc", "ip"]) symlinkSync("busybox", join(layer, "bin", a));
    const layerTar = join(img, "layer.tar");
    must([
      "tar",
      "--sort=name",
      "--mtime=@0",
      "--owner=0",
      "--group=0",
      "--numeric-owner",
      "-C",
      layer,
      "-cf",
      layerTar,
      ".",
    ]);
    const oci = join(img, "oci");
    const blobs = join(oci, "blobs/sha256");
    mkdirSync(blobs, { recursive: true });
    const blob = (bytes: Uint8Array | string) => {
      const data = typeof bytes === "string" ? Buffer.from(bytes) : bytes;
      const digest = new Bun.CryptoHasher("sha256").update(data).digest("hex");
      writeFileSync(join(blobs, digest), data);
      return { digest: `sha256:${digest}`, size: data.length };
    };
    const layerBlob = blob(readFileSync(layerTar));
    const configBlob = blob(
      JSON.stringify({
        architecture: "amd64",
        os: "linux",
        config: { Entrypoint: ["/bin/sleep", "2147483647"] },
        rootfs: { type: "layers", diff_ids: [layerBlob.digest] },
      }),
    );
    const manifestBlob = blob(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: "application/vnd.oci.image.manifest.v1+json",
        config: { mediaType: "application/vnd.oci.image.config.v1+json", ...configBlob },
        layers: [{ mediaType: "application/vnd.oci.image.layer.v1.tar", ...layerBlob }],
      }),
    );
    writeFileSync(join(oci, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
    writeFileSync(
      join(oci, "index.json"),
      JSON.stringify({
        schemaVersion: 2,
        manifests: [
          {
            mediaType: "application/vnd.oci.image.manifest.v1+json",
            ...manifestBlob,
            platform: { architecture: "amd64", os: "linux" },
            annotations: { "io.containerd.image.name": SANDBOX_IMAGE },
          },
        ],
      }),
    );
    const archive = join(img, "pause.tar");
    must(["tar", "-C", oci, "-cf", archive, "."]);
    must(["ctr", "--address", this.socket, "-n", "k8s.io", "images", "import", archive]);
    // The CRI learns of the image from containerd's events; wait until it knows it.
    for (let i = 0; i < 100; i++) {
      const r = decode(
        await this.client.call(`${IMAGES}/ImageStatus`, message(sub(1, message(str(1, SANDBOX_IMAGE))))),
      );
      if (r.has(1)) return;
      await Bun.sleep(50);
    }
    throw new Error(`the CRI does not see the imported image ${SANDBOX_IMAGE}`);
  }

  // ---- networks --------------------------------------------------------------------------------

  /**
   * Writes a conflist into `netDir` (the default network's folder unless named) as an
   * installer would (a temp file, then a rename), and waits until containerd has loaded it:
   * for the default folder, exactly these bytes (the CRI shows them); for a runtime handler's
   * folder, until its last load succeeded (the CRI shows no more of it).
   */
  async writeConflist(file: string, conflist: unknown, opts: { netDir?: string } = {}): Promise<string> {
    const dir = opts.netDir ?? this.netDir;
    const handler = this.runtimeHandler(dir);
    const text = `${JSON.stringify(conflist, null, 2)}\n`;
    const tmp = join(dir, `.${file}.tmp`);
    writeFileSync(tmp, text);
    renameSync(tmp, join(dir, file));
    const bridge = (conflist as { plugins?: { type?: string; bridge?: string }[] }).plugins?.find(
      (p) => p.type === "bridge",
    )?.bridge;
    if (bridge) this.bridges.add(bridge);
    if (handler === "") await this.waitForNetwork((n) => n.Source === text || n.Source === text.trimEnd());
    else
      await this.waitFor(
        async () => (await this.runtimeInfo())[`lastCNILoadStatus.${handler}`] === "OK",
        `containerd did not load ${dir}`,
      );
    return join(dir, file);
  }

  /** The verbose `Status` answer's info: the CRI's config, `cniconfig`, `lastCNILoadStatus[.HANDLER]`. */
  async runtimeInfo(): Promise<Record<string, string>> {
    return getStringMap(decode(await this.client.call(`${RUNTIME}/Status`, message(uint(1, true)))), 2);
  }

  /** The networks of the default folder that containerd has loaded (go-cni's view: `cni-loopback` first). */
  async loadedNetworks(): Promise<{ Name: string; Source: string }[]> {
    const info = await this.runtimeInfo();
    if (!info.cniconfig) return [];
    const conf = JSON.parse(info.cniconfig) as { Networks?: { Config?: { Name: string; Source: string } }[] };
    return (conf.Networks ?? []).flatMap((n) => (n.Config ? [{ Name: n.Config.Name, Source: n.Config.Source }] : []));
  }

  /** Waits until a loaded network matches (containerd reloads its folder on file events). */
  async waitForNetwork(match: (n: { Name: string; Source: string }) => boolean, timeoutMs = 20_000): Promise<void> {
    await this.waitFor(
      async () => (await this.loadedNetworks()).some(match),
      `containerd did not load the expected network from ${this.netDir}`,
      timeoutMs,
    );
  }

  private async waitFor(ok: () => Promise<boolean>, what: string, timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (await ok()) return;
      await Bun.sleep(50);
    }
    const info = await this.runtimeInfo();
    const status = Object.entries(info)
      .filter(([k]) => k.startsWith("lastCNILoadStatus"))
      .map(([k, v]) => `${k}: ${v}`);
    throw new Error(`${what} within ${timeoutMs} ms (${status.join("; ")})`);
  }

  /** Deletes this bridge when the harness closes (bridges made by the `bridge` plugin outlive pods). */
  trackBridge(name: string): void {
    this.bridges.add(name);
  }

  // ---- pod sandboxes -----------------------------------------------------------------------

  private runtimeHandler(netDir: string | undefined): string {
    if (netDir === undefined || netDir === this.netDir) return "";
    const h = Object.entries(this.handlerNetDirs).find(([, d]) => d === netDir);
    if (!h) throw new Error(`${netDir} is not a conflist folder of this containerd (give it in handlerNetDirs)`);
    return h[0];
  }

  /**
   * RunPodSandbox as kubelet sends it: the pod's metadata, hostname, log directory, labels and
   * annotations. Resolves once the sandbox runs, with its address and network namespace;
   * rejects with a GrpcError carrying containerd's message when it fails (a CNI error among them).
   */
  async runPodSandbox(meta: SandboxMeta, opts: { netDir?: string; timeoutMs?: number } = {}): Promise<Sandbox> {
    const handler = this.runtimeHandler(opts.netDir);
    const logDir = join(this.dir, "pods", `${meta.namespace}_${meta.name}_${meta.uid}`);
    mkdirSync(logDir, { recursive: true });
    const labels = {
      "io.kubernetes.pod.name": meta.name,
      "io.kubernetes.pod.namespace": meta.namespace,
      "io.kubernetes.pod.uid": meta.uid,
      ...meta.labels,
    };
    const config = message(
      sub(1, message(str(1, meta.name), str(2, meta.uid), str(3, meta.namespace), uint(4, meta.attempt ?? 0))),
      str(2, meta.name),
      str(3, logDir),
      stringMap(6, labels),
      stringMap(7, meta.annotations),
    );
    const r = decode(
      await this.client.call(
        `${RUNTIME}/RunPodSandbox`,
        message(sub(1, config), str(2, handler)),
        opts.timeoutMs ?? 120_000,
      ),
    );
    const id = getStr(r, 1);
    const status = await this.podSandboxStatus(id);
    if (!status.netnsPath.startsWith("/var/run/netns/")) {
      throw new Error(
        `sandbox ${id}: its network namespace ${JSON.stringify(status.netnsPath)} is not under /var/run/netns`,
      );
    }
    return { id, meta, ip: status.ip, netns: new Netns(basename(status.netnsPath)) };
  }

  async podSandboxStatus(id: string): Promise<SandboxStatus> {
    const r = decode(await this.client.call(`${RUNTIME}/PodSandboxStatus`, message(str(1, id), uint(2, true))));
    const s = getMsg(r, 1);
    const md = getMsg(s, 2);
    const infoText = getStringMap(r, 2).info;
    const info = infoText ? JSON.parse(infoText) : {};
    const netns =
      ((info.runtimeSpec?.linux?.namespaces ?? []) as { type: string; path?: string }[]).find(
        (n) => n.type === "network",
      )?.path ?? "";
    if (netns) this.netnsSeen.add(netns);
    return {
      id: getStr(s, 1),
      name: getStr(md, 1),
      uid: getStr(md, 2),
      namespace: getStr(md, 3),
      ready: getUint(s, 3) === 0,
      ip: getStr(getMsg(s, 5), 1),
      netnsPath: netns,
      info,
    };
  }

  async listPodSandboxes(): Promise<{ id: string; name: string; namespace: string; uid: string; ready: boolean }[]> {
    const r = decode(await this.client.call(`${RUNTIME}/ListPodSandbox`, message()));
    return getMsgs(r, 1).map((p) => {
      const md = getMsg(p, 2);
      return {
        id: getStr(p, 1),
        name: getStr(md, 1),
        uid: getStr(md, 2),
        namespace: getStr(md, 3),
        ready: getUint(p, 3) === 0,
      };
    });
  }

  /** StopPodSandbox: kills the sandbox, tears its network down (CNI DEL with the netns) and removes the netns. */
  async stopPodSandbox(id: string): Promise<void> {
    await this.client.call(`${RUNTIME}/StopPodSandbox`, message(str(1, id)));
  }

  /** RemovePodSandbox: CNI DEL once more, now with an empty CNI_NETNS, then the sandbox is gone. */
  async removePodSandbox(id: string): Promise<void> {
    await this.client.call(`${RUNTIME}/RemovePodSandbox`, message(str(1, id)));
  }

  // ---- recorded plugin calls ---------------------------------------------------------------

  /** Every completed call of a recorded plugin type, oldest first. */
  calls(type: string): PluginCall[] {
    const dir = join(this.recordDir, type);
    if (!existsSync(dir)) throw new Error(`plugin ${type} is not recorded (give it in record)`);
    const ids = readdirSync(dir)
      .filter((f) => f.endsWith(".rc"))
      .map((f) => f.slice(0, -3))
      .sort();
    return ids.map((id) => {
      const env: Record<string, string> = {};
      for (const line of readFileSync(join(dir, `${id}.env`), "utf8").split("\n")) {
        const eq = line.indexOf("=");
        if (eq > 0) env[line.slice(0, eq)] = line.slice(eq + 1);
      }
      const args: Record<string, string> = {};
      for (const pair of (env.CNI_ARGS ?? "").split(";")) {
        const eq = pair.indexOf("=");
        if (eq > 0) args[pair.slice(0, eq)] = pair.slice(eq + 1);
      }
      const rules = join(dir, `${id}.rules`);
      return {
        command: env.CNI_COMMAND ?? "",
        env,
        args,
        stdin: readFileSync(join(dir, `${id}.stdin`), "utf8"),
        exitCode: Number(readFileSync(join(dir, `${id}.rc`), "utf8").trim()),
        rulesAfter: existsSync(rules) ? readFileSync(rules, "utf8") : undefined,
      };
    });
  }

  // ---- clean-up ----------------------------------------------------------------------------

  /**
   * Stops and removes every sandbox, stops containerd, and removes what is left: runc
   * containers and shims of this containerd, mounts under its folder, network namespaces it
   * made, bridges, the folder. Safe to call after any failure, and twice.
   */
  async close(): Promise<void> {
    if (this.running()) {
      try {
        for (const sb of await this.listPodSandboxes()) {
          await this.podSandboxStatus(sb.id).catch(() => undefined); // remembers its netns
          await this.stopPodSandbox(sb.id).catch(() => undefined);
          await this.removePodSandbox(sb.id).catch(() => undefined);
        }
      } catch {
        // containerd is not answering: the steps below remove what it left
      }
    }
    this.client.close();
    if (this.containerd && this.running()) {
      this.containerd.kill("SIGTERM");
      const exited = await Promise.race([this.containerd.exited.then(() => true), Bun.sleep(10_000).then(() => false)]);
      if (!exited) {
        this.containerd.kill("SIGKILL");
        await this.containerd.exited;
      }
    }
    const runcRoot = join(this.dir, "runc", "k8s.io");
    if (existsSync(runcRoot)) {
      for (const id of sh(["runc", "--root", runcRoot, "list", "-q"]).stdout.split("\n").filter(Boolean)) {
        sh(["runc", "--root", runcRoot, "delete", "--force", id]);
      }
    }
    for (const shim of this.shims()) {
      sh(["kill", "-KILL", String(shim.pid)]);
      // a shim that did not exit by itself leaves its socket, named after our address and its id
      const hash = new Bun.CryptoHasher("sha256").update(`${this.socket}/k8s.io/${shim.id}`).digest("hex");
      rmSync(`/run/containerd/s/${hash}`, { force: true });
    }
    for (const m of this.mountsUnder()) sh(["umount", "-l", m]);
    if (existsSync(this.recordDir)) {
      for (const type of readdirSync(this.recordDir)) {
        for (const c of this.calls(type)) if (c.env.CNI_NETNS) this.netnsSeen.add(c.env.CNI_NETNS);
      }
    }
    for (const path of this.netnsSeen) {
      if (existsSync(path)) sh(["ip", "netns", "del", basename(path)]);
    }
    for (const b of this.bridges) sh(["ip", "link", "del", b]);
    rmSync(this.dir, { recursive: true, force: true });
  }

  private running(): boolean {
    return this.containerd !== undefined && this.containerd.exitCode === null && this.containerd.signalCode === null;
  }

  /** Shim processes serving this containerd (started with `-address <our socket>`), with their sandbox ids. */
  private shims(): { pid: number; id: string }[] {
    const out: { pid: number; id: string }[] = [];
    for (const p of readdirSync("/proc")) {
      if (!/^\d+$/.test(p)) continue;
      try {
        const argv = readFileSync(`/proc/${p}/cmdline`, "utf8").split("\0");
        const flag = (name: string) => argv[argv.indexOf(name) + 1];
        if (
          basename(argv[0] ?? "").startsWith("containerd-shim") &&
          argv.includes("-address") &&
          flag("-address") === this.socket
        ) {
          out.push({ pid: Number(p), id: flag("-id") ?? "" });
        }
      } catch {
        // the process ended meanwhile
      }
    }
    return out;
  }

  /** Mount points under this harness' folder, deepest first. */
  private mountsUnder(): string[] {
    const points = readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .map((l) => l.split(" ")[4] ?? "")
      .map((p) => p.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(Number.parseInt(o, 8))))
      .filter((p) => p.startsWith(`${this.dir}/`));
    return [...new Set(points)].sort((a, b) => b.length - a.length);
  }
}
