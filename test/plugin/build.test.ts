// The compiled binaries: they carry their version, and a stray .env or bunfig.toml in the
// directory a runtime starts them in changes nothing.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
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

  test("the plugin carries its version (shown when run by hand)", () => {
    const r = Bun.spawnSync([PLUGIN], { stdout: "pipe", stderr: "pipe", stdin: "ignore" });
    expect(r.exitCode).toBe(1);
    expect(r.stderr.toString()).toContain(`meshcni ${pkg.version}`);
    expect(JSON.parse(r.stdout.toString()).code).toBe(4);
  });

  test("a .env and a bunfig.toml in the working directory are not read", () => {
    const marker = join(dir, "preloaded");
    const dry = join(dir, "dry-run");
    writeFileSync(join(dir, ".env"), `MESHCNI_DRY_RUN_FILE=${dry}\n`);
    writeFileSync(join(dir, "evil.ts"), `require("node:fs").writeFileSync(${JSON.stringify(marker)}, "x");\n`);
    writeFileSync(join(dir, "bunfig.toml"), `preload = ["./evil.ts"]\n`);
    // ADD for a container outside Kubernetes: had .env been read, the plugin would have written
    // its (empty) dry-run payload; had bunfig.toml been read, the preload would leave a marker.
    const r = Bun.spawnSync([PLUGIN], {
      cwd: dir,
      env: { PATH: Bun.env.PATH!, ...cniEnv("ADD") },
      stdin: new TextEncoder().encode(JSON.stringify({ cniVersion: "1.0.0", name: "n" })),
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(r.exitCode).toBe(0);
    expect(JSON.parse(r.stdout.toString())).toEqual({ cniVersion: "1.0.0", dns: {} });
    expect(existsSync(marker)).toBe(false);
    expect(existsSync(dry)).toBe(false);
  });
});
