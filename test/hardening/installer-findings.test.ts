// Regression tests for what the installer chaos run found, against the compiled installer.
import { afterEach, beforeAll, describe, expect, test } from "bun:test";
import { renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ensureBuilt, HostDirs, type InstallerProcess, pluginTypes, startInstaller, until } from "../installer/harness.ts";

let dirs: HostDirs;
let running: InstallerProcess | undefined;

beforeAll(() => ensureBuilt());
afterEach(async () => {
  await running?.stop("SIGKILL");
  running = undefined;
  dirs?.cleanup();
});

function start(): InstallerProcess {
  const plugin = join(dirs.root, "meshcni-build");
  writeFileSync(plugin, "#!/bin/sh\nexit 0\n", { mode: 0o755 });
  return (running = startInstaller(dirs, ["--plugin-binary", plugin]));
}

/** Atomic write with a temp name no runtime reads (the harness's own temp name ends in the config's extension). */
function hostWrite(name: string, content: string): void {
  writeFileSync(join(dirs.net, `.${name}.tmp`), content);
  renameSync(join(dirs.net, `.${name}.tmp`), join(dirs.net, name));
}

const flannel = (hairpin: boolean) => `${JSON.stringify({ name: "cbr0", type: "flannel", delegate: { hairpinMode: hairpin, isDefaultGateway: true } }, null, 2)}\n`;
const EXTRA = `${JSON.stringify({ cniVersion: "1.0.0", name: "extra", plugins: [{ type: "bridge", bridge: "cni0" }] })}\n`;

describe("a list made from a single-plugin file is out of date once the host writes that file again", () => {
  test("written again unusable: the list goes, the host's file stays as written, the chain moves to the next config", async () => {
    dirs = new HostDirs();
    hostWrite("10-flannel.conf", flannel(true));
    writeFileSync(join(dirs.net, "20-extra.conflist"), EXTRA);
    start();
    await until(() => pluginTypes(dirs, "10-flannel.conflist")?.join(",") === "flannel,meshcni", 5000, "the .conf turned into a list");
    expect(dirs.file("10-flannel.conf")).toBeUndefined();
    hostWrite("10-flannel.conf", "{ not json");
    // The runtime would pass over the broken .conf and use the stale list: it must not be there.
    await until(() => dirs.file("10-flannel.conflist") === undefined, 5000, "the stale list removed");
    await until(() => pluginTypes(dirs, "20-extra.conflist")?.join(",") === "bridge,meshcni", 5000, "the chain in the next config");
    expect(dirs.file("10-flannel.conf")).toBe("{ not json");
    expect(await running!.stop()).toBe(0);
    expect(dirs.names()).toEqual(["10-flannel.conf", "20-extra.conflist"]);
    expect(dirs.file("10-flannel.conf")).toBe("{ not json");
    expect(dirs.file("20-extra.conflist")).toBe(EXTRA);
  });

  test("a .json written again (it sorts after its .conflist): the list follows the new content, undo gives the last bytes", async () => {
    dirs = new HostDirs();
    hostWrite("10-flannel.json", flannel(true));
    start();
    await until(() => pluginTypes(dirs, "10-flannel.conflist")?.join(",") === "flannel,meshcni", 5000, "the .json turned into a list");
    const last = flannel(false);
    hostWrite("10-flannel.json", last);
    await until(() => {
      const t = dirs.file("10-flannel.conflist");
      return t !== undefined && JSON.parse(t).plugins[0].delegate?.hairpinMode === false && dirs.file("10-flannel.json") === undefined;
    }, 5000, "the list made from the new .json");
    expect(await running!.stop()).toBe(0);
    expect(dirs.names()).toEqual(["10-flannel.json"]);
    expect(dirs.file("10-flannel.json")).toBe(last);
  });
});
