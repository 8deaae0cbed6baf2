// meshcnictl's own surface: version, --help on every command, and shell completion that bash
// and zsh load and answer with (zsh is installed from Debian when missing, as CI runs as root).
import { beforeAll, describe, expect, test } from "bun:test";
import pkg from "../../package.json" with { type: "json" };
import { COMMAND_SPECS } from "../../internal/cli/main.ts";
import { CLI, ensureCli, runCli } from "./support.ts";

beforeAll(async () => {
  await ensureCli();
});

function have(cmd: string): boolean {
  return Bun.spawnSync(["sh", "-c", `command -v ${cmd}`]).exitCode === 0;
}

function ensureZsh(): void {
  if (have("zsh")) return;
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  let r = Bun.spawnSync(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "zsh"], {
    env,
    stdout: "pipe",
    stderr: "pipe",
  });
  if (r.exitCode !== 0) {
    Bun.spawnSync(["apt-get", "update", "-qq"], { env });
    r = Bun.spawnSync(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "zsh"], {
      env,
      stdout: "pipe",
      stderr: "pipe",
    });
  }
  if (r.exitCode !== 0)
    throw new Error(`zsh is needed for the completion test and apt-get could not install it: ${r.stderr}`);
}

describe("version", () => {
  test("prints the compiled version", () => {
    const r = runCli(["version"]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(`^meshcnictl ${pkg.version.replaceAll(".", "\\.")}(\\+[0-9a-f]+(\\.dirty)?)?\\n$`),
    );
    expect(runCli(["version", "--short"]).stdout).toBe(r.stdout.slice("meshcnictl ".length));
    expect(JSON.parse(runCli(["version", "-o", "json"]).stdout).client.version).toBe(r.stdout.trim().split(" ")[1]);
    expect(runCli(["--version"]).stdout).toBe(r.stdout);
  });
});

describe("help", () => {
  test("the main help lists every command", () => {
    const r = runCli(["--help"]);
    expect(r.code).toBe(0);
    for (const s of COMMAND_SPECS) expect(r.stdout).toContain(`  ${s.name} `);
    const bare = runCli([]);
    expect(bare.code).toBe(2);
    expect(bare.stdout).toBe(r.stdout);
  });

  for (const spec of COMMAND_SPECS) {
    test(`${spec.name} --help shows every flag with its default`, () => {
      const r = runCli([spec.name, "--help"]);
      expect(r.code).toBe(0);
      expect(r.stderr).toBe("");
      expect(runCli(["help", spec.name]).stdout).toBe(r.stdout);
      expect(runCli([spec.name, "-h"]).stdout).toBe(r.stdout);
      for (const [name, o] of Object.entries(spec.options)) {
        expect(r.stdout).toContain(`--${name}`);
        if (o.default !== undefined) expect(r.stdout.replace(/\s+/g, " ")).toContain(`(default ${o.default})`);
      }
    });
  }

  test("install-cni's help shows the defaults the issue names", () => {
    const text = runCli(["install-cni", "--help"]).stdout.replace(/\s+/g, " ");
    expect(text).toContain("--dest-cni-net-dir DIR");
    expect(text).toContain("(default /etc/cni/net.d)");
    expect(text).toContain("(default /opt/cni/bin)");
    expect(text).toContain(
      "--mesh MESH the mesh whose sidecar proxy takes the traffic; one of linkerd, istio (default linkerd)",
    );
  });

  test("an unknown command is named", () => {
    const r = runCli(["instal-cni"]);
    expect([r.code, r.stdout]).toEqual([2, ""]);
    expect(r.stderr).toContain('unknown command "instal-cni"');
  });
});

describe("completion", () => {
  function bashComplete(line: string): string[] {
    const words = line.split(" ");
    const script = [
      "set -e",
      'source <("$CLI" completion bash)',
      `COMP_WORDS=(${words.map((w) => `'${w}'`).join(" ")})`,
      `COMP_CWORD=${words.length - 1}`,
      "_meshcnictl",
      'printf "%s\\n" "${COMPREPLY[@]}"',
    ].join("\n");
    const r = Bun.spawnSync(["bash", "-c", script], { env: { ...process.env, CLI }, stdout: "pipe", stderr: "pipe" });
    if (r.exitCode !== 0) throw new Error(`bash completion failed: ${r.stderr}`);
    return r.stdout.toString().split("\n").filter(Boolean);
  }

  test("bash completes commands, flags and flag values", () => {
    expect(bashComplete("meshcnictl in")).toEqual(["install-cni"]);
    expect(bashComplete("meshcnictl install-cni --dest-cni")).toEqual(["--dest-cni-net-dir", "--dest-cni-bin-dir"]);
    expect(bashComplete("meshcnictl install-cni --mesh ")).toEqual(["linkerd", "istio"]);
    expect(bashComplete("meshcnictl install-cni --platform o")).toEqual(["openshift"]);
    expect(bashComplete("meshcnictl check --pr")).toEqual(["--pre"]);
    expect(bashComplete("meshcnictl check --pod")).toEqual(["--pods", "--pods-namespace"]);
    expect(bashComplete("meshcnictl check -o ")).toEqual(["text", "json"]);
    expect(bashComplete("meshcnictl completion z")).toEqual(["zsh"]);
  });

  test("zsh loads the script and registers it", () => {
    ensureZsh();
    const r = Bun.spawnSync(
      [
        "zsh",
        "-c",
        'autoload -U compinit; compinit -u -D; source <("$CLI" completion zsh); ' +
          "print -r -- $_comps[meshcnictl]; whence -w _meshcnictl_install_cni",
      ],
      {
        env: { ...process.env, CLI },
        stdout: "pipe",
        stderr: "pipe",
      },
    );
    expect(r.stderr.toString()).toBe("");
    expect(r.stdout.toString()).toBe("_meshcnictl\n_meshcnictl_install_cni: function\n");
  });

  test("an unknown shell is refused", () => {
    const r = runCli(["completion", "fish"]);
    expect([r.code, r.stdout]).toEqual([2, ""]);
    expect(r.stderr).toContain("completion needs one shell: bash or zsh");
  });
});
