// The agent's steps on real temporary folders, without a process: readiness and its reasons,
// symlinked configs, the plugin's token missing, expired or from an older meshcni, a damaged undo
// record.
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, lstatSync, readFileSync, readlinkSync, symlinkSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { entryFromConfigText } from "../../internal/agent/install/entry.ts";
import type { PluginTokens } from "../../internal/agent/install/deps.ts";
import { Installer } from "../../internal/agent/install/installer.ts";
import type { PluginToken } from "../../internal/agent/install/token.ts";
import { createHostFs } from "../../internal/agent/install/io/fs.ts";
import { repoPath } from "../support/golden.ts";
import { HostDirs } from "./harness.ts";

const CALICO = readFileSync(repoPath("testdata/hosts/calico/10-calico.conflist"), "utf8");

let dirs: HostDirs;
afterEach(() => dirs?.cleanup());

const ACCOUNT = { namespace: "meshcni", name: "meshcni-plugin" };

/** A token source the test sets by hand: `token` is what the kubeconfig should carry now. */
class Tokens implements PluginTokens {
  readonly account = ACCOUNT;
  token?: PluginToken;
  why?: string;
  current = () => this.token;
  problem = () => this.why;
  /** A token of the plugin's account, issued now, living `seconds`. */
  issue(value: string, seconds = 86400): void {
    const now = Date.now();
    this.token = {
      token: value,
      account: ACCOUNT,
      issuedAt: now,
      expiresAt: now + seconds * 1000,
      lifetimeMs: seconds * 1000,
    };
  }
}

function make(extra: Partial<ConstructorParameters<typeof Installer>[0]> = {}) {
  dirs = new HostDirs();
  const plugin = join(dirs.root, "meshcni-build");
  writeFileSync(plugin, "#!/bin/sh\n", { mode: 0o755 });
  const lines: string[] = [];
  const log = {
    debug: () => {},
    info: (m: string) => lines.push(`info ${m}`),
    warn: (m: string) => lines.push(`warn ${m}`),
    error: (m: string) => lines.push(`error ${m}`),
  };
  const tokens = new Tokens();
  tokens.issue("plugin-token-1");
  const inst = new Installer(
    {
      hostNetDir: dirs.net,
      hostBinDir: dirs.bin,
      pluginBinary: plugin,
      serviceAccountDir: dirs.sa,
      entry: entryFromConfigText(undefined, "/etc/cni/net.d"),
      service: { host: "10.96.0.1", port: "443" },
      ...extra,
    },
    { fs: createHostFs(), log, now: () => performance.now(), tokens },
  );
  inst.prepare();
  return { inst, lines, plugin, tokens };
}

describe("Installer", () => {
  test("readiness names what is missing, and is ready once all of it is in place", () => {
    const { inst, plugin } = make();
    expect(inst.check()).toEqual({
      ready: false,
      problems: [
        `no CNI network config in ${dirs.net} yet`,
        `${dirs.bin}/meshcni is missing`,
        `${dirs.net}/ZZZ-meshcni-kubeconfig is missing`,
      ],
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

  test("a missing CA is reported once, not fatal, and the kubeconfig appears when it does", () => {
    const { inst, lines } = make();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    unlinkSync(join(dirs.sa, "ca.crt"));
    inst.reconcile();
    inst.reconcile();
    expect(lines.filter((l) => l.includes("no cluster CA"))).toEqual([
      `error no cluster CA at ${dirs.sa}/ca.crt (see --service-account-dir)`,
    ]);
    expect(inst.check().problems).toEqual([`no cluster CA at ${dirs.sa}/ca.crt (see --service-account-dir)`]);
    symlinkSync("..data/ca.crt", join(dirs.sa, "ca.crt"));
    inst.reconcile();
    expect(existsSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"))).toBe(true);
    expect(inst.check().ready).toBe(true);
  });

  test("the kubeconfig carries the plugin's token, never the agent's own; none yet: not ready, saying why, nothing written", () => {
    const { inst, lines, tokens } = make();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    tokens.token = undefined;
    tokens.why =
      "cannot get a token of meshcni/meshcni-plugin from https://10.96.0.1:443: the API server did not answer: refused";
    inst.reconcile();
    expect(existsSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"))).toBe(false);
    expect(inst.check().problems).toEqual([
      `no token of meshcni/meshcni-plugin for the plugin's kubeconfig yet (${tokens.why})`,
    ]);
    // The token source says why in the log; the agent does not repeat it at each look.
    expect(lines.filter((l) => l.includes("no token of"))).toEqual([]);
    tokens.issue("plugin-token-2");
    tokens.why = undefined;
    inst.reconcile();
    const text = readFileSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"), "utf8");
    expect(text).toContain('token: "plugin-token-2"');
    expect(text).toContain("# meshcni-plugin-token: account=meshcni/meshcni-plugin expires=");
    // The agent's own token (the service account folder's) is not in it.
    expect(text).not.toContain("token-one");
    expect(inst.check().ready).toBe(true);
    expect(inst.status().kubeconfig.token).toEqual({
      account: "meshcni/meshcni-plugin",
      expiresAt: expect.stringMatching(/^\d{4}-.*Z$/),
      expired: false,
    });
    // A new token: the file is rewritten with it.
    tokens.issue("plugin-token-3");
    expect(inst.check().problems).toEqual([`${dirs.net}/ZZZ-meshcni-kubeconfig is out of date`]);
    inst.reconcile();
    expect(readFileSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"), "utf8")).toContain('token: "plugin-token-3"');
    expect(
      lines.some((l) =>
        l.startsWith(
          "info rewrote the plugin's kubeconfig with a new token for " +
            "https://10.96.0.1:443 (service account meshcni/meshcni-plugin, valid until ",
        ),
      ),
    ).toBe(true);
  });

  test("a kubeconfig whose token expired is not current", () => {
    const { inst, tokens } = make();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const now = Date.now();
    tokens.token = {
      token: "short",
      account: ACCOUNT,
      issuedAt: now - 10_000,
      expiresAt: now - 1000,
      lifetimeMs: 9000,
    };
    tokens.why = "cannot get a token of meshcni/meshcni-plugin: the API server did not answer";
    inst.reconcile();
    const r = inst.check();
    expect(r.ready).toBe(false);
    expect(r.problems).toEqual([
      expect.stringMatching(
        /^the plugin's token in \S+ZZZ-meshcni-kubeconfig \(meshcni\/meshcni-plugin\) expired at \S+Z: cannot get a token of meshcni\/meshcni-plugin: the API server did not answer; the plugin's fallback fails closed until the agent gets a new one$/,
      ),
    ]);
    expect(inst.status().kubeconfig.token!.expired).toBe(true);
  });

  test("a kubeconfig an older meshcni wrote (the agent's token) is out of date and rewritten, saying so", () => {
    const { inst, lines } = make();
    writeFileSync(join(dirs.net, "10-calico.conflist"), CALICO);
    const old = readFileSync(repoPath("testdata/installer/kubeconfig-agent-token.old"), "utf8");
    writeFileSync(join(dirs.net, "ZZZ-meshcni-kubeconfig"), old, { mode: 0o600 });
    expect(inst.readWrittenToken()).toBeUndefined();
    expect(inst.check().problems).toContain(`${dirs.net}/ZZZ-meshcni-kubeconfig is out of date`);
    inst.reconcile();
    expect(inst.check().ready).toBe(true);
    expect(inst.readWrittenToken()).toEqual({
      token: "plugin-token-1",
      account: ACCOUNT,
      expiresAt: expect.any(Number),
    });
    expect(lines.filter((l) => l.includes("which held no token of the plugin's own account"))).toHaveLength(1);
  });

  test("a config meshcni cannot chain into is reported, left as it is, and not ready", () => {
    const { inst, lines } = make();
    const weave = '{"name":"weave","plugins":[{"type":"weave-net"}]}';
    writeFileSync(join(dirs.net, "10-weave.conflist"), weave);
    expect(inst.reconcile().kind).toBe("blocked");
    expect(
      lines.some((l) => l.startsWith("error cannot chain meshcni into 10-weave.conflist: it has no cniVersion")),
    ).toBe(true);
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
