// Regression tests for what the agent chaos run found, against the compiled installer.
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { entryFromConfigText } from "../../internal/agent/install/entry.ts";
import { Installer } from "../../internal/agent/install/installer.ts";
import { createHostFs, syncDir } from "../../internal/agent/install/io/fs.ts";
import {
  type Cluster,
  ensureBuilt,
  HostDirs,
  type InstallerProcess,
  pluginTypes,
  startCluster,
  startInstaller,
  until,
} from "../agent/harness.ts";

let dirs: HostDirs;
let running: InstallerProcess | undefined;
/** Without the DaemonSet: SIGTERM undoes, as when meshcni is removed. */
let cluster: Cluster;

beforeAll(async () => {
  ensureBuilt();
  cluster = await startCluster();
});
afterAll(() => cluster?.close());
afterEach(async () => {
  await running?.stop("SIGKILL");
  running = undefined;
  dirs?.cleanup();
});

function start(): InstallerProcess {
  const plugin = join(dirs.root, "meshcni-build");
  writeFileSync(plugin, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
  return (running = startInstaller(dirs, ["--plugin-binary", plugin], cluster.env));
}

/** Atomic write with a temp name no runtime reads (the harness's own temp name ends in the config's extension). */
function hostWrite(name: string, content: string): void {
  writeFileSync(join(dirs.net, `.${name}.tmp`), content);
  renameSync(join(dirs.net, `.${name}.tmp`), join(dirs.net, name));
}

const flannel = (hairpin: boolean) =>
  `${JSON.stringify({ name: "cbr0", type: "flannel", delegate: { hairpinMode: hairpin, isDefaultGateway: true } }, null, 2)}\n`;
const EXTRA = `${JSON.stringify({ cniVersion: "1.0.0", name: "extra", plugins: [{ type: "bridge", bridge: "cni0" }] })}\n`;

describe("a list made from a single-plugin file is out of date once the host writes that file again", () => {
  test("written again unusable: the list goes, the host's file stays as written, the chain moves to the next config", async () => {
    dirs = cluster.dirs();
    hostWrite("10-flannel.conf", flannel(true));
    writeFileSync(join(dirs.net, "20-extra.conflist"), EXTRA);
    start();
    // The list is written first, then the .conf removed: wait for both before asserting.
    await until(
      () =>
        pluginTypes(dirs, "10-flannel.conflist")?.join(",") === "flannel,meshcni" &&
        dirs.file("10-flannel.conf") === undefined,
      5000,
      "the .conf turned into a list",
    );
    expect(dirs.file("10-flannel.conf")).toBeUndefined();
    hostWrite("10-flannel.conf", "{ not json");
    // The runtime would pass over the broken .conf and use the stale list: it must not be there.
    await until(() => dirs.file("10-flannel.conflist") === undefined, 5000, "the stale list removed");
    await until(
      () => pluginTypes(dirs, "20-extra.conflist")?.join(",") === "bridge,meshcni",
      5000,
      "the chain in the next config",
    );
    expect(dirs.file("10-flannel.conf")).toBe("{ not json");
    expect(await running!.stop()).toBe(0);
    expect(dirs.names()).toEqual(["10-flannel.conf", "20-extra.conflist"]);
    expect(dirs.file("10-flannel.conf")).toBe("{ not json");
    expect(dirs.file("20-extra.conflist")).toBe(EXTRA);
  });

  test("a .json written again (it sorts after its .conflist): the list follows the new content, undo gives the last bytes", async () => {
    dirs = cluster.dirs();
    hostWrite("10-flannel.json", flannel(true));
    start();
    await until(
      () => pluginTypes(dirs, "10-flannel.conflist")?.join(",") === "flannel,meshcni",
      5000,
      "the .json turned into a list",
    );
    const last = flannel(false);
    hostWrite("10-flannel.json", last);
    await until(
      () => {
        const t = dirs.file("10-flannel.conflist");
        return (
          t !== undefined &&
          JSON.parse(t).plugins[0].delegate?.hairpinMode === false &&
          dirs.file("10-flannel.json") === undefined
        );
      },
      5000,
      "the list made from the new .json",
    );
    expect(await running!.stop()).toBe(0);
    expect(dirs.names()).toEqual(["10-flannel.json"]);
    expect(dirs.file("10-flannel.json")).toBe(last);
  });
});

describe("the agent's file operations never replace or remove what the host wrote after meshcni read it", () => {
  // The chaos run found the host's rewrite lost when it landed between the agent reading a
  // config and renaming its chained version over it. These are the primitives that close that.
  const fs = createHostFs();
  let dir: string;
  const at = (n: string) => join(dir, n);
  const leftovers = () => readdirSync(dir).filter((n) => n.startsWith("."));

  test("replaceIfUnchanged writes over exactly what the plan was made from, and over nothing else", () => {
    dir = mkdtempSync(join(tmpdir(), "meshcni-fs-"));
    writeFileSync(at("10-a.conflist"), "V1");
    expect(fs.replaceIfUnchanged(at("10-a.conflist"), "chained V1", 0o644, "V1")).toBe(true);
    expect(readFileSync(at("10-a.conflist"), "utf8")).toBe("chained V1");
    // the host wrote V2 after meshcni read V1: V2 stays
    writeFileSync(at("10-a.conflist"), "V2");
    expect(fs.replaceIfUnchanged(at("10-a.conflist"), "chained V1", 0o644, "V1")).toBe(false);
    expect(readFileSync(at("10-a.conflist"), "utf8")).toBe("V2");
    // expected absent, but the host created it meanwhile
    expect(fs.replaceIfUnchanged(at("10-a.conflist"), "restored", 0o644, null)).toBe(false);
    expect(readFileSync(at("10-a.conflist"), "utf8")).toBe("V2");
    expect(fs.replaceIfUnchanged(at("10-b.conf"), "restored", 0o600, null)).toBe(true);
    expect(readFileSync(at("10-b.conf"), "utf8")).toBe("restored");
    expect(statSync(at("10-b.conf")).mode & 0o777).toBe(0o600);
    // expected there, but the host removed it meanwhile
    expect(fs.replaceIfUnchanged(at("10-c.conflist"), "chained", 0o644, "V1")).toBe(false);
    expect(existsSync(at("10-c.conflist"))).toBe(false);
    expect(leftovers()).toEqual([]);
    rmSync(dir, { recursive: true, force: true });
  });

  test("removeIfUnchanged removes exactly what the plan was made from", () => {
    dir = mkdtempSync(join(tmpdir(), "meshcni-fs-"));
    writeFileSync(at("10-flannel.conf"), "V2");
    expect(fs.removeIfUnchanged(at("10-flannel.conf"), "V1")).toBe("changed");
    expect(readFileSync(at("10-flannel.conf"), "utf8")).toBe("V2");
    expect(fs.removeIfUnchanged(at("10-flannel.conf"), "V2")).toBe("removed");
    expect(fs.removeIfUnchanged(at("10-flannel.conf"), "V2")).toBe("absent");
    expect(leftovers()).toEqual([]);
    rmSync(dir, { recursive: true, force: true });
  });

  test("a host file held aside when a kill -9 came is put back at start-up (unless the host wrote it again)", () => {
    dir = mkdtempSync(join(tmpdir(), "meshcni-fs-"));
    writeFileSync(at(".10-flannel.conf.0a1b2c3d.meshcni-held"), "host's");
    writeFileSync(at(".10-b.conf.0a1b2c3d.meshcni-held"), "older");
    writeFileSync(at("10-b.conf"), "newer");
    writeFileSync(at(".10-c.conflist.0a1b2c3d.meshcni-tmp"), "half a write");
    expect(fs.recoverInterruptedWrites(dir).sort()).toEqual([
      ".10-b.conf.0a1b2c3d.meshcni-held",
      ".10-c.conflist.0a1b2c3d.meshcni-tmp",
      ".10-flannel.conf.0a1b2c3d.meshcni-held",
    ]);
    expect(readdirSync(dir).sort()).toEqual(["10-b.conf", "10-flannel.conf"]);
    expect(readFileSync(at("10-flannel.conf"), "utf8")).toBe("host's");
    expect(readFileSync(at("10-b.conf"), "utf8")).toBe("newer");
    rmSync(dir, { recursive: true, force: true });
  });
});

describe("the bytes undo keeps are the ones the chained list was made from", () => {
  // A file rewritten in place can be read torn (new bytes, then the old file's tail), and valid
  // JSON that way when the tail is whitespace. Planning from one read and recording another let
  // such bytes into the undo record.
  test("a torn second read of the selected file: no write now; the next reconcile records the real bytes", () => {
    dirs = new HostDirs();
    const host = `${JSON.stringify({ cniVersion: "1.0.0", name: "k8s-pod-network", plugins: [{ type: "calico" }] }, null, 2)}\n`;
    writeFileSync(join(dirs.net, "10-calico.conflist"), host);
    const real = createHostFs();
    let reads = 0;
    const fs: typeof real = {
      ...real,
      read(path) {
        const r = real.read(path);
        // The selection reads first; the second read of the file comes back with a stale tail.
        if (r && path.endsWith("/10-calico.conflist") && ++reads === 2)
          return { ...r, bytes: Buffer.concat([r.bytes, Buffer.from("\n")]) };
        return r;
      },
      readText(path) {
        const r = this.read(path);
        return r && new TextDecoder().decode(r.bytes);
      },
    };
    const plugin = join(dirs.root, "meshcni-build");
    writeFileSync(plugin, "#!/bin/sh\n", { mode: 0o755 });
    const quiet = { debug() {}, info() {}, warn() {}, error() {} };
    const inst = new Installer(
      {
        hostNetDir: dirs.net,
        hostBinDir: dirs.bin,
        pluginBinary: plugin,
        serviceAccountDir: dirs.sa,
        entry: entryFromConfigText(undefined, "/etc/cni/net.d"),
        service: { host: "10.96.0.1", port: "443" },
      },
      { fs, log: quiet, now: () => performance.now() },
    );
    inst.prepare();
    expect(inst.reconcile().kind).toBe("changed");
    expect(readFileSync(join(dirs.net, "10-calico.conflist"), "utf8")).toBe(host);
    expect(inst.reconcile()).toEqual({ kind: "chained", file: "10-calico.conflist" });
    inst.uninstall();
    expect(readFileSync(join(dirs.net, "10-calico.conflist"), "utf8")).toBe(host);
  });
});

describe("a host config that is a symbolic link is followed as the host follows it", () => {
  // The host's /etc/cni/net.d is mounted at another path in the agent's container: an
  // absolute link the host wrote names a host path, which in the container is another file or
  // none. HOST stands for the host's view of the folder (a path that is nothing here).
  const HOST = "/nonexistent-host/etc/cni/net.d";
  let root: string;
  let net: string;
  const calico = `${JSON.stringify({ cniVersion: "1.0.0", name: "k8s-pod-network", plugins: [{ type: "calico" }] })}\n`;
  const setup = () => {
    root = mkdtempSync(join(tmpdir(), "meshcni-links-"));
    net = join(root, "host/etc/cni/net.d");
    mkdirSync(join(net, "calico"), { recursive: true });
    writeFileSync(join(net, "calico/10-calico.conflist"), calico);
  };

  test("an absolute link into the folder: read and written at the file it names, the link kept", () => {
    setup();
    symlinkSync(`${HOST}/calico/10-calico.conflist`, join(net, "10-calico.conflist"));
    const fs = createHostFs([{ host: HOST, container: net }]);
    expect(fs.readText(join(net, "10-calico.conflist"))).toBe(calico);
    expect(fs.replaceIfUnchanged(join(net, "10-calico.conflist"), "chained", 0o644, calico)).toBe(true);
    expect(lstatSync(join(net, "10-calico.conflist")).isSymbolicLink()).toBe(true);
    expect(readFileSync(join(net, "calico/10-calico.conflist"), "utf8")).toBe("chained");
    // Followed in the container's own view, the link names nothing: the config would be missed.
    expect(createHostFs().readText(join(net, "10-calico.conflist"))).toBeUndefined();
    rmSync(root, { recursive: true, force: true });
  });

  test("a relative link is taken from the link's folder on the host", () => {
    setup();
    symlinkSync("calico/10-calico.conflist", join(net, "10-calico.conflist"));
    const fs = createHostFs([{ host: HOST, container: net }]);
    fs.writeAtomic(join(net, "10-calico.conflist"), "chained", 0o644);
    expect(lstatSync(join(net, "10-calico.conflist")).isSymbolicLink()).toBe(true);
    expect(readFileSync(join(net, "calico/10-calico.conflist"), "utf8")).toBe("chained");
    rmSync(root, { recursive: true, force: true });
  });

  test("a link out of the mounted folders is refused, naming it; nothing in the container is written", () => {
    setup();
    const inContainer = join(root, "container-own.conflist");
    writeFileSync(inContainer, calico);
    symlinkSync(inContainer, join(net, "10-calico.conflist"));
    const fs = createHostFs([{ host: HOST, container: net }]);
    expect(() => fs.readText(join(net, "10-calico.conflist"))).toThrow(
      /is a symbolic link to .*outside the host folders meshcni has mounted/,
    );
    expect(() => fs.writeAtomic(join(net, "10-calico.conflist"), "chained", 0o644)).toThrow(/outside the host folders/);
    expect(readFileSync(inContainer, "utf8")).toBe(calico);
    rmSync(root, { recursive: true, force: true });
  });
});

describe("each rename, link and unlink in a host folder is followed by an fsync of the folder", () => {
  test("writeAtomic, replaceIfUnchanged, copyAtomic, removeIfUnchanged, remove: the folder is synced once the name is in place", () => {
    const dir = mkdtempSync(join(tmpdir(), "meshcni-dirsync-"));
    const at = (n: string) => join(dir, n);
    // What the folder held at each sync: the sync must come after the rename, not before.
    const synced: string[] = [];
    const fs = createHostFs([], (d) => {
      expect(d).toBe(dir);
      syncDir(d); // the real one, on a real folder
      synced.push(
        readdirSync(d)
          .sort()
          .map((n) => `${n}=${readFileSync(join(d, n), "utf8")}`)
          .join(" "),
      );
    });
    fs.writeAtomic(at("10-a.conflist"), "A1", 0o644);
    expect(synced.pop()).toBe("10-a.conflist=A1");
    expect(fs.replaceIfUnchanged(at("10-a.conflist"), "A2", 0o644, "A1")).toBe(true);
    expect(synced.pop()).toBe("10-a.conflist=A2");
    writeFileSync(at("src"), "binary");
    fs.copyAtomic(at("src"), at("meshcni"), 0o755);
    expect(synced.pop()).toBe("10-a.conflist=A2 meshcni=binary src=binary");
    expect(fs.removeIfUnchanged(at("10-a.conflist"), "A2")).toBe("removed");
    expect(synced.pop()).toBe("meshcni=binary src=binary");
    expect(fs.remove(at("meshcni"))).toBe(true);
    expect(synced.pop()).toBe("src=binary");
    expect(synced).toEqual([]);
    rmSync(dir, { recursive: true, force: true });
  });
});
