// The compiled binaries: they carry their version, a stray .env or bunfig.toml in the directory
// a runtime starts them in changes nothing, and dist/meshcni is the plugin and (run as
// meshcni-installer or with `installer` first) the agent, whose code the plugin never loads.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  existsSync,
  lstatSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pkg from "../../package.json" with { type: "json" };
import { repoPath } from "../support/golden.ts";
import { cniEnv, PLUGIN } from "../support/plugin-run.ts";

describe("compiled binaries", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), "meshcni-cwd-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test("all three exist", () => {
    for (const b of ["meshcni", "meshcni-installer", "meshcnictl"]) expect(existsSync(repoPath("dist", b))).toBe(true);
  });

  test("meshcni-installer is a link to the one node binary, and the name chooses the program", () => {
    expect(lstatSync(repoPath("dist/meshcni-installer")).isSymbolicLink()).toBe(true);
    expect(readlinkSync(repoPath("dist/meshcni-installer"))).toBe("meshcni");
    const run = (argv: string[], argv0?: string) => {
      const r = Bun.spawnSync(argv, {
        stdout: "pipe",
        stderr: "pipe",
        stdin: "ignore",
        ...(argv0 ? { argv0 } : {}),
        env: { PATH: Bun.env.PATH! },
      });
      return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
    };
    const usage = "meshcni-installer: installs the meshcni CNI plugin";
    expect(run([repoPath("dist/meshcni-installer"), "--help"]).out).toStartWith(usage);
    expect(run([PLUGIN, "installer", "--help"]).out).toStartWith(usage);
    // Any other link name is the plugin, as is the plugin's own name with any other argument.
    const other = join(dir, "some-cni");
    symlinkSync(PLUGIN, other);
    for (const r of [run([other, "--help"]), run([PLUGIN, "--help"])]) {
      expect(r.code).toBe(1);
      expect(JSON.parse(r.out).code).toBe(4);
    }
    // The agent's flag errors come from the agent, with its exit code for bad usage.
    const bad = run([PLUGIN, "installer", "--no-such-flag"]);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain("meshcni-installer:");
  });

  test("the plugin's path loads no code of the agent, DEL none of ADD's, and VERSION nothing but the entry and the CNI spec", async () => {
    const out = join(dir, "chunks");
    const r = await Bun.build({
      entrypoints: [repoPath("cmd/node.ts")],
      target: "bun",
      format: "esm",
      minify: true,
      splitting: true,
      outdir: out,
      naming: { chunk: "[name]-[hash].[ext]" },
    });
    expect(r.success).toBe(true);
    const code = (name: string) => readFileSync(join(out, name), "utf8");
    const imports = (name: string, dynamic: boolean) =>
      [
        ...code(name).matchAll(
          dynamic
            ? /import\(\s*["']\.\/([^"']+)["']\s*\)/g
            : /(?:import|export)\s*(?:[^"'();]*?from\s*)?["']\.\/([^"']+)["']/g,
        ),
      ].map((m) => m[1]!);
    /** Chunks loaded from `start`: static imports always, dynamic ones when `follow` says so. */
    const closure = (start: string, follow: (chunk: string) => boolean) => {
      const seen = new Set<string>();
      const visit = (n: string) => {
        if (seen.has(n)) return;
        seen.add(n);
        for (const i of imports(n, false)) visit(i);
        for (const i of imports(n, true)) if (follow(i)) visit(i);
      };
      visit(start);
      return [...seen];
    };
    const entryDynamic = imports("node.js", true);
    const agentChunk = entryDynamic.find((n) => n.startsWith("installer-"));
    const pluginChunk = entryDynamic.find((n) => n.startsWith("plugin-"));
    expect([agentChunk !== undefined, pluginChunk !== undefined]).toEqual([true, true]);
    // VERSION: the entry and what it imports statically.
    const version = closure("node.js", () => false);
    // The plugin's commands: also its own chunk and everything it imports, never the agent's chunk.
    const pluginPath = closure("node.js", (c) => c !== agentChunk);
    const text = (names: string[]) => names.map(code).join("\n");
    const all = text(readdirSync(out));
    // Strings only the agent's code holds: its usage text and its flags.
    for (const marker of ["keeps it chained", "host-net-dir", "service-account-dir"]) {
      expect(all.includes(marker)).toBe(true);
      expect({ marker, onPluginPath: text(pluginPath).includes(marker) }).toEqual({ marker, onPluginPath: false });
    }
    for (const heavy of ["node:fs", 'from"fs"', "consola"]) {
      expect({ heavy, onPluginPath: text(pluginPath).includes(heavy) }).toEqual({ heavy, onPluginPath: false });
    }
    // A warm ADD (the node agent answers) loads no fetch or TLS code: the kubeconfig client's
    // chunks are imported only for the fallback.
    const kubeChunks = new Set(readdirSync(out).filter((n) => code(n).includes("rejectUnauthorized")));
    expect(kubeChunks.size).toBeGreaterThan(0);
    const warmAdd = closure("node.js", (c) => c !== agentChunk && !kubeChunks.has(c) && !/^kube(-http)?-/.test(c));
    expect(warmAdd.filter((c) => kubeChunks.has(c))).toEqual([]);
    expect(text(warmAdd).includes("fetch(")).toBe(false);
    expect(text(pluginPath).includes("fetch(")).toBe(true);
    // An ADD of a pod that is not meshed (and a DEL decided by its record) loads the plugin's
    // commands and its deps, but none of the backends' code: that is imported once rules are due.
    const marked = (marker: string) => readdirSync(out).filter((n) => code(n).includes(marker));
    const runChunks = marked("dry_run needs MESHCNI_DRY_RUN_FILE");
    const depsChunks = marked("sent something that is not a Pod");
    expect([runChunks.length, depsChunks.length]).toEqual([1, 1]);
    // run.ts is shared with the agent (which plans ADDs with it), so the plugin reaches it through
    // a small facade chunk named after it.
    const noRules = closure(
      "node.js",
      (c) => c === pluginChunk || c === runChunks[0] || c === depsChunks[0] || /^(run|plugin-deps)-/.test(c),
    );
    expect(noRules).toContain(runChunks[0]!);
    for (const backend of ["--noflush", "libnftables.so"]) {
      expect(text(pluginPath).includes(backend)).toBe(true);
      expect({ backend, withoutRules: text(noRules).includes(backend) }).toEqual({ backend, withoutRules: false });
    }
    // A DEL decided by its record parses the entry and the record and report code, none of the
    // plugin's chunk or of ADD's: not the agent's ADD client, not the pod lookup's target.
    const reportChunk = entryDynamic.find((c) => code(c).includes("runDel"));
    expect(reportChunk).toBeDefined();
    const del = closure("node.js", (c) => c === reportChunk);
    expect(text(del)).toContain("answerDel");
    expect(del).not.toContain(pluginChunk!);
    // Nor the full path's record code (records.ts and the deps it imports).
    expect(text(pluginPath).includes("NotPlannable")).toBe(true);
    expect(text(del).includes("NotPlannable")).toBe(false);
    for (const addOnly of ["the plugin runs this ADD itself", "one of meshcni's own DaemonSet pods"]) {
      expect(text(pluginPath).includes(addOnly)).toBe(true);
      expect({ addOnly, onDelPath: text(del).includes(addOnly) }).toEqual({ addOnly, onDelPath: false });
    }
    // VERSION parses no plugin code either: not even the pod lookup that ADD starts first.
    expect(version.length).toBeLessThanOrEqual(3);
    expect(text(version).includes("kubeconfig")).toBe(false);
    expect(text(version)).toContain("supportedVersions");
  });

  test("the plugin carries its version (shown when run by hand)", () => {
    const r = Bun.spawnSync([PLUGIN], { stdout: "pipe", stderr: "pipe", stdin: "ignore" });
    expect(r.exitCode).toBe(1);
    expect(r.stderr.toString()).toContain(`meshcni ${pkg.version}`);
    expect(JSON.parse(r.stdout.toString()).code).toBe(4);
  });

  test("BUN_OPTIONS in the runtime's environment runs no other code: preloads, a bunfig's preload and the debugger are refused, and the command fails", () => {
    const marker = join(dir, "preloaded-by-options");
    const evil = join(dir, "evil-options.js");
    writeFileSync(evil, `require("node:fs").writeFileSync(${JSON.stringify(marker)}, "x");\n`);
    const bunfig = join(dir, "evil-options.toml");
    writeFileSync(bunfig, `preload = [${JSON.stringify(evil)}]\n`);
    const stdin = new TextEncoder().encode(JSON.stringify({ cniVersion: "1.0.0", name: "n" }));
    const run = (argv: string[], extra: Record<string, string>) => {
      const r = Bun.spawnSync(argv, {
        env: { PATH: Bun.env.PATH!, ...cniEnv("ADD"), ...extra },
        stdin,
        stdout: "pipe",
        stderr: "pipe",
        cwd: dir,
      });
      return { code: r.exitCode, out: r.stdout.toString(), err: r.stderr.toString() };
    };
    for (const opts of [
      `--preload ${evil}`,
      `--preload=${evil}`,
      `-r ${evil}`,
      `--require ${evil}`,
      `--import ${evil}`,
      `--config=${bunfig}`,
    ]) {
      for (const argv of [[PLUGIN], [PLUGIN, "installer", "--help"]]) {
        const r = run(argv, { BUN_OPTIONS: opts });
        // A failed command, with no result: the runtime fails the ADD (and no agent starts).
        expect({ opts, argv: argv.length, code: r.code, out: r.out, ran: existsSync(marker) }).toEqual({
          opts,
          argv: argv.length,
          code: 1,
          out: "",
          ran: false,
        });
        expect(r.err).toContain("Code generation from strings disallowed");
      }
    }
    // The inspector evaluates what its client sends: refused too.
    expect(run([PLUGIN], { BUN_INSPECT: "ws://127.0.0.1:1/x" })).toMatchObject({ code: 1, out: "" });
    // Flags that run no code leave the plugin as it is.
    const plain = run([PLUGIN], { BUN_OPTIONS: "--smol" });
    expect({ code: plain.code, result: JSON.parse(plain.out) }).toEqual({
      code: 0,
      result: { cniVersion: "1.0.0", dns: {} },
    });
  });

  test("a .env and a bunfig.toml in the working directory are not read", () => {
    const marker = join(dir, "preloaded");
    const dry = join(dir, "dry-run");
    writeFileSync(join(dir, ".env"), `MESHCNI_DRY_RUN_FILE=${dry}\n`);
    writeFileSync(join(dir, "evil.ts"), `require("node:fs").writeFileSync(${JSON.stringify(marker)}, "x");\n`);
    writeFileSync(join(dir, "bunfig.toml"), `preload = ["./evil.ts"]\n`);
    // ADD for a container outside Kubernetes: had .env been read, the plugin would have said so
    // (the variable without "dry_run" in the entry); had bunfig.toml been read, the preload would
    // leave a marker.
    const r = Bun.spawnSync([PLUGIN], {
      cwd: dir,
      env: { PATH: Bun.env.PATH!, ...cniEnv("ADD") },
      stdin: new TextEncoder().encode(JSON.stringify({ cniVersion: "1.0.0", name: "n", log_level: "debug" })),
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(r.exitCode).toBe(0);
    expect(JSON.parse(r.stdout.toString())).toEqual({ cniVersion: "1.0.0", dns: {} });
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(dry)).toBe(false);
    // Had .env been read, the plugin would have warned that the variable is set without "dry_run".
    expect(r.stderr.toString()).not.toContain("MESHCNI_DRY_RUN_FILE");
  });
});
