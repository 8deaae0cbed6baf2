// `bun run release` publishes the node binary for each Linux architecture, glibc and musl builds,
// with SHA256SUMS: each file is an executable of its architecture asking for its loader, the
// amd64 one runs here, the arm64 one under qemu-user with Debian's arm64 libc6, and the host
// check says what each musl build needs from a host (and that Debian's glibc folders are not it).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { checkBinaryOnHost } from "../../internal/agent/install/io/host-root.ts";
import { parseElf } from "../../internal/agent/install/hostcheck/elf.ts";
import { debianSysroot } from "../../scripts/image.ts";
import { NODE_PLATFORMS, release } from "../../scripts/release.ts";

const QEMU = Bun.which("qemu-aarch64-static");
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "meshcni-release-node-"));
  await release(dir, [], () => {}, Object.keys(NODE_PLATFORMS) as (keyof typeof NODE_PLATFORMS)[]);
}, 300_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const elf = (name: string) => {
  const b = readFileSync(join(dir, name));
  return parseElf((o, n) => b.subarray(o, o + n), b.length);
};

describe("release: the node binaries", () => {
  test("one file per Linux architecture and libc, each in SHA256SUMS, which sha256sum -c accepts", () => {
    const names = [
      "meshcni-linux-amd64",
      "meshcni-linux-amd64-musl",
      "meshcni-linux-arm64",
      "meshcni-linux-arm64-musl",
    ];
    expect(readdirSync(dir).sort()).toEqual([...names, "SHA256SUMS"].sort());
    const sums = readFileSync(join(dir, "SHA256SUMS"), "utf8");
    expect(
      sums
        .trim()
        .split("\n")
        .map((l) => l.split("  ")[1])
        .sort(),
    ).toEqual(names);
    const r = Bun.spawnSync(["sha256sum", "-c", "SHA256SUMS"], { cwd: dir, stdout: "pipe", stderr: "pipe" });
    expect(r.stderr.toString()).toBe("");
    expect(r.exitCode).toBe(0);
  });

  test("each asks for the loader of its architecture and libc", () => {
    expect([elf("meshcni-linux-amd64").machine, elf("meshcni-linux-amd64").interpreter]).toEqual([
      62,
      "/lib64/ld-linux-x86-64.so.2",
    ]);
    expect([elf("meshcni-linux-arm64").machine, elf("meshcni-linux-arm64").interpreter]).toEqual([
      183,
      "/lib/ld-linux-aarch64.so.1",
    ]);
    expect([elf("meshcni-linux-amd64-musl").machine, elf("meshcni-linux-amd64-musl").interpreter]).toEqual([
      62,
      "/lib/ld-musl-x86_64.so.1",
    ]);
    expect([elf("meshcni-linux-arm64-musl").machine, elf("meshcni-linux-arm64-musl").interpreter]).toEqual([
      183,
      "/lib/ld-musl-aarch64.so.1",
    ]);
    // The musl builds load libstdc++ from the host: Bun links it dynamically there.
    expect(elf("meshcni-linux-amd64-musl").needed).toContain("libstdc++.so.6");
  });

  test.skipIf(process.arch !== "x64")("the amd64 build answers VERSION here, and is the plugin and the agent", () => {
    const v = Bun.spawnSync([join(dir, "meshcni-linux-amd64")], {
      env: { CNI_COMMAND: "VERSION" },
      stdin: "ignore",
      stdout: "pipe",
    });
    expect(JSON.parse(v.stdout.toString()).cniVersion).toBe("1.1.0");
    const h = Bun.spawnSync([join(dir, "meshcni-linux-amd64"), "installer", "--help"], { stdout: "pipe" });
    expect(h.stdout.toString()).toStartWith("meshcni-installer:");
  });

  test.skipIf(QEMU === null)("the arm64 build answers VERSION under qemu-user with Debian's arm64 libc6", () => {
    const root = debianSysroot("arm64");
    const v = Bun.spawnSync([QEMU!, "-L", root, join(dir, "meshcni-linux-arm64")], {
      env: { CNI_COMMAND: "VERSION" },
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
    });
    expect(v.stderr.toString()).toBe("");
    expect(JSON.parse(v.stdout.toString()).cniVersion).toBe("1.1.0");
  });

  test.skipIf(process.arch !== "x64")(
    "the musl build needs musl's loader and a libstdc++ built for musl: this Debian root has neither",
    () => {
      // Debian ships musl's loader (package musl) but no libstdc++ built for musl.
      const v = checkBinaryOnHost("/", join(dir, "meshcni-linux-amd64-musl"), "meshcni-linux-amd64-musl");
      expect(v.ok).toBe(false);
      // With Debian's musl package installed the loader is there; without it, that is what is missing first.
      const expected = existsSync("/lib/ld-musl-x86_64.so.1")
        ? "the host has no libstdc++.so.6 for x86-64, which meshcni-linux-amd64-musl loads"
        : "the host has no /lib/ld-musl-x86_64.so.1 (musl's loader for x86-64)";
      expect(v.ok === false && v.problems[0]).toContain(expected);
      // musl's path file is in /etc, outside what the check sees: it says it took musl's defaults.
      if (existsSync("/lib/ld-musl-x86_64.so.1"))
        expect(v.ok === false && v.problems[0]).toContain("/etc/ld-musl-x86_64.path, which can name other folders");
    },
  );
});
