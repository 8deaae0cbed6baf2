// The installer's steps on real temporary folders, without a process: readiness and its reasons,
// symlinked configs, missing service account files, a damaged undo record.
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, lstatSync, readFileSync, readlinkSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { entryFromConfigText } from "../../internal/installer/entry.ts";
import { Installer } from "../../internal/installer/installer.ts";
import { createHostFs } from "../../internal/io/installer-fs.ts";
import { repoPath } from "../support/golden.ts";
import { HostDirs } from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");

let dirs: HostDirs;
afterEach(() => dirs?.cleanup());

function make(extra: Partial<ConstructorParameters<typeof Installer>[0]> = {}) {
  dirs = new HostDirs();
  const plugin = join(dirs.root, "meshcni-build");
  writeFileSync(plugin, "#!/bin/sh\n", { mode: 0o755 });
  const lines: string[] = [];
  const log = { debug: () => {}, info: (m: string) => lines.push(`info ${m}`), warn: (m: string) => lines.push(`warn ${m}`), error: (m: string) => lines.push(`error ${m}`) };
  const inst = new Installer({
    hostNetDir: dirs.net, hostBinDir: dirs.bin, pluginBinary: plugin, serviceAccountDir: dirs.sa,
    entry: entryFromConfigText(undefined, "/etc/cni/net.d"), service: { host: "10.96.0.1", port: "443" }, ...extra,
  }, { fs: createHostFs(), log, now: () => performance.now() });
  inst.prepare();
  return { inst, lines, plugin };
}

describe("Installer", () => {
  test("readiness names what is missing, and is ready once all of it is in place", () => {
    const { inst, plugin } = make();
    expect(inst.check()).toEqual({
      ready: false,
      problems: [`no CNI network config in ${dirs.net} yet`, `${dirs.bin}/meshcni is missing`, `${dirs.net}/ZZZ-meshcni-kubeconfig is missing`],
    });
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    expect(inst.reconcile()).toEqual({ kind: "chained", file: "10-calico.conflist" });
    expect(inst.check()).toEqual({ ready: true, problems: [] });
    expect(inst.reconcile()).toEqual({ kind: "in-place", file: "10-calico.conflist" });

    writeFileSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"), "stale");
    writeFileSync(join(dirs.bin, "meshcni"), "another build");
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    expect(inst.check().problems).toEqual([
      `meshcni is not chained in ${dirs.net}/10-calico.conflist`,
      `${dirs.bin}/meshcni is not the installed meshcni binary`,
      `${dirs.net}/ZZZ-meshcni-kubeconfig is out of date`,
    ]);
    inst.reconcile();
    expect(inst.check().ready).toBe(true);
    expect(readFileSync(join(dirs.bin, "meshcni"), "utf8")).toBe(readFileSync(plugin, "utf8"));
  });

  test("a symlinked config is chained where the link points, and the link stays", () => {
    const { inst } = make();
    const real = join(dirs.root, "calico-managed.conflist");
    writeFileSync(real, CALICO);
    symlinkSync(real, join(dirs.net, "10-calico.conflist"));
    expect(inst.reconcile().kind).toBe("chained");
    expect(lstatSync(join(dirs.net, "10-calico.conflist")).isSymbolicLink()).toBe(true);
    expect(readlinkSync(join(dirs.net, "10-calico.conflist"))).toBe(real);
    expect(JSON.parse(readFileSync(real, "utf8")).plugins.at(-1).type).toBe("meshcni");
    inst.uninstall();
    expect(readFileSync(real, "utf8")).toBe(CALICO);
    expect(lstatSync(join(dirs.net, "10-calico.conflist")).isSymbolicLink()).toBe(true);
  });

  test("a missing token is reported once, not fatal, and the kubeconfig appears when it does", () => {
    const { inst, lines } = make();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    unlinkSync(join(dirs.sa, "token"));
    inst.reconcile();
    inst.reconcile();
    expect(lines.filter((l) => l.includes("no service account token"))).toEqual([`error no service account token at ${dirs.sa}/token (see --service-account-dir)`]);
    expect(inst.check().problems).toEqual([`no service account token at ${dirs.sa}/token (see --service-account-dir)`]);
    symlinkSync("..data/token", join(dirs.sa, "token"));
    inst.reconcile();
    expect(existsSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"))).toBe(true);
    expect(inst.check().ready).toBe(true);
  });

  test("a config meshcni cannot chain into is reported, left as it is, and not ready", () => {
    const { inst, lines } = make();
    const weave = '{"name":"weave","plugins":[{"type":"weave-net"}]}';
    writeFileSync(join(dirs.net, "10-weave.conflist"), weave);
    expect(inst.reconcile().kind).toBe("blocked");
    expect(lines.some((l) => l.startsWith("error cannot chain meshcni into 10-weave.conflist: it has no cniVersion"))).toBe(true);
    expect(readFileSync(join(dirs.net, "10-weave.conflist"), "utf8")).toBe(weave);
    expect(inst.check().ready).toBe(false);
  });

  test("a damaged undo record is reported and ignored; undo still removes meshcni's entries", () => {
    const { inst, lines } = make();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    inst.reconcile();
    writeFileSync(join(dirs.net, "ZZZ-meshcni-undo"), "{ torn");
    inst.uninstall();
    expect(lines.some((l) => l.startsWith("error ZZZ-meshcni-undo is not JSON"))).toBe(true);
    const left = readFileSync(join(dirs.net, "10-calico.conflist"), "utf8");
    expect(JSON.parse(left)).toEqual(JSON.parse(CALICO));
    expect(dirs.names()).toEqual(["10-calico.conflist"]);
  });
});
