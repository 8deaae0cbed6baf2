// install.sh (run by dash, Debian's POSIX /bin/sh) against a local HTTP server holding a
// release that `bun run release` built (scripts/release.ts, here for linux-amd64 alone, plus
// stand-ins named for the other platforms): it picks the file for the OS and architecture,
// verifies the checksum, installs into ~/.meshcni/bin and says how to add it to PATH; a
// checksum mismatch, a missing file or an unknown platform stop it with a clear message and
// nothing installed.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { release, renderChecksums } from "../../scripts/release.ts";
import { makePki } from "../support/certs.ts";
import { repoPath } from "../support/golden.ts";

let tmp: string;
let releaseDir: string;
let server: ReturnType<typeof Bun.serve>;
/** A plain-HTTP server with the same files: install.sh must never take anything from it. */
let plain: ReturnType<typeof Bun.serve>;
/** curl and wget trust the test CA through these (install.sh takes no option for it). */
let tlsEnv: Record<string, string>;
const requested: string[] = [];
/** What the server sends instead of a release file, per name. */
const overrides = new Map<string, string | number>();

beforeAll(async () => {
  tmp = mkdtempSync(join(tmpdir(), "meshcni-install-sh-"));
  releaseDir = join(tmp, "release");
  await release(releaseDir, ["linux-amd64"], () => {});
  // The other platforms' files, for the download choice (they are not run here).
  for (const p of ["linux-arm64", "darwin-amd64", "darwin-arm64"])
    writeFileSync(join(releaseDir, `meshcnictl-${p}`), `#!/bin/sh\necho "stand-in for ${p}"\n`);
  const files = readdirSync(releaseDir)
    .filter((f) => f.startsWith("meshcnictl-"))
    .sort();
  writeFileSync(
    join(releaseDir, "SHA256SUMS"),
    renderChecksums(files.map((name) => ({ name, bytes: readFileSync(join(releaseDir, name)) }))),
  );
  const pki = makePki();
  writeFileSync(join(tmp, "wgetrc"), `ca_certificate = ${pki.paths.ca}\n`);
  tlsEnv = { CURL_CA_BUNDLE: pki.paths.ca, WGETRC: join(tmp, "wgetrc") };
  plain = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    fetch(req) {
      requested.push(`plain:${new URL(req.url).pathname}`);
      return new Response(Bun.file(join(releaseDir, "meshcnictl-linux-amd64")));
    },
  });
  server = Bun.serve({
    hostname: "127.0.0.1",
    port: 0,
    tls: { cert: pki.serverCert, key: pki.serverKey },
    fetch(req) {
      const url = new URL(req.url);
      // /to-http/...: a redirect to the plain server; /to-https/...: a relative one back to /v0.1.0/.
      if (url.pathname.startsWith("/to-http/"))
        return Response.redirect(`http://127.0.0.1:${plain.port}${url.pathname.slice(8)}`, 302);
      if (url.pathname.startsWith("/to-https/"))
        return new Response(null, { status: 302, headers: { location: `/v0.1.0${url.pathname.slice(9)}` } });
      const name = url.pathname.split("/").pop()!;
      requested.push(name);
      const o = overrides.get(name);
      if (typeof o === "number") return new Response("no", { status: o });
      if (typeof o === "string") return new Response(o);
      const path = join(releaseDir, name);
      return existsSync(path) ? new Response(Bun.file(path)) : new Response("not found", { status: 404 });
    },
  });
});
afterAll(() => {
  server?.stop(true);
  plain?.stop(true);
  rmSync(tmp, { recursive: true, force: true });
});

/** Runs install.sh with a fresh HOME, and a fake uname when os/arch are given. */
async function install(opts: { os?: string; arch?: string; path?: string; url?: string } = {}) {
  const home = mkdtempSync(join(tmp, "home-"));
  let path = process.env.PATH ?? "/usr/bin:/bin";
  if (opts.os || opts.arch) {
    const fake = join(home, "fakebin");
    mkdirSync(fake);
    writeFileSync(
      join(fake, "uname"),
      `#!/bin/sh\ncase "$1" in -s) echo ${opts.os ?? "Linux"} ;; ` +
        `-m) echo ${opts.arch ?? "x86_64"} ;; *) exec /bin/uname "$@" ;; esac\n`,
    );
    chmodSync(join(fake, "uname"), 0o755);
    path = `${fake}:${path}`;
  }
  if (opts.path) path = `${opts.path}:${path}`;
  requested.length = 0;
  const p = Bun.spawn(["dash", repoPath("install.sh")], {
    env: {
      HOME: home,
      PATH: path,
      ...tlsEnv,
      MESHCNI_RELEASE_URL: opts.url ?? `https://127.0.0.1:${server.port}/v0.1.0/`,
    },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [code, stdout, stderr] = await Promise.all([
    p.exited,
    new Response(p.stdout).text(),
    new Response(p.stderr).text(),
  ]);
  const bin = join(home, ".meshcni/bin/meshcnictl");
  return {
    code,
    stdout,
    stderr,
    home,
    bin,
    installed: existsSync(bin),
    leftovers: existsSync(join(home, ".meshcni/bin")) ? readdirSync(join(home, ".meshcni/bin")) : [],
  };
}

describe("release", () => {
  test("SHA256SUMS is what sha256sum -c reads", () => {
    const r = Bun.spawnSync(["sha256sum", "-c", "SHA256SUMS"], { cwd: releaseDir, stdout: "pipe", stderr: "pipe" });
    expect(r.stderr.toString()).toBe("");
    expect(r.stdout.toString()).toContain("meshcnictl-linux-amd64: OK");
    expect(r.exitCode).toBe(0);
  });
  test("the built binary runs", () => {
    const r = Bun.spawnSync([join(releaseDir, "meshcnictl-linux-amd64"), "version"], { stdout: "pipe" });
    expect(r.stdout.toString()).toStartWith("meshcnictl 0.1.0");
  });
});

describe("install.sh", () => {
  test("installs the verified binary for this machine and explains PATH", async () => {
    const r = await install();
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(requested).toEqual(["meshcnictl-linux-amd64", "SHA256SUMS"]);
    expect(readFileSync(r.bin)).toEqual(readFileSync(join(releaseDir, "meshcnictl-linux-amd64")));
    const v = Bun.spawnSync([r.bin, "version"], { stdout: "pipe" }).stdout.toString();
    expect(r.stdout).toContain(`installed ${v.trim()} into ${r.bin} (checksum verified)`);
    expect(r.stdout).toContain(`export PATH="${join(r.home, ".meshcni/bin")}:$PATH"`);
    expect(r.leftovers).toEqual(["meshcnictl"]);
  });

  test("says nothing about PATH when the folder is on it already", async () => {
    const home = mkdtempSync(join(tmp, "pathhome-"));
    const p = Bun.spawn(["dash", repoPath("install.sh")], {
      env: {
        HOME: home,
        PATH: `${home}/.meshcni/bin:${process.env.PATH}`,
        ...tlsEnv,
        MESHCNI_RELEASE_URL: `https://127.0.0.1:${server.port}`,
      },
      stdout: "pipe",
      stderr: "pipe",
    });
    const [code, out] = await Promise.all([p.exited, new Response(p.stdout).text()]);
    expect(code).toBe(0);
    expect(out).not.toContain("export PATH");
  });

  for (const [os, arch, file] of [
    ["Linux", "aarch64", "meshcnictl-linux-arm64"],
    ["Darwin", "arm64", "meshcnictl-darwin-arm64"],
    ["Darwin", "x86_64", "meshcnictl-darwin-amd64"],
  ] as const) {
    test(`${os} ${arch} downloads ${file}`, async () => {
      const r = await install({ os, arch });
      expect(r.code).toBe(0);
      expect(requested[0]).toBe(file);
      expect(readFileSync(r.bin, "utf8")).toContain("stand-in for");
    });
  }

  const sums = () => readFileSync(join(releaseDir, "SHA256SUMS"), "utf8");
  const refusals: [string, () => [string, string | number], string[]][] = [
    [
      "a checksum mismatch",
      () => ["SHA256SUMS", sums().replace(/^[0-9a-f]{64}(?= {2}meshcnictl-linux-amd64$)/m, "0".repeat(64))],
      [`checksum mismatch for meshcnictl-linux-amd64: SHA256SUMS says ${"0".repeat(64)}`, "nothing was installed"],
    ],
    [
      "a tampered binary",
      () => ["meshcnictl-linux-amd64", "#!/bin/sh\necho pwned\n"],
      ["checksum mismatch", "nothing was installed"],
    ],
    [
      "SHA256SUMS without the file's line",
      () => ["SHA256SUMS", `${"a".repeat(64)}  meshcnictl-other\n`],
      ["SHA256SUMS has no line for meshcnictl-linux-amd64"],
    ],
    [
      "a missing release file",
      () => ["meshcnictl-linux-amd64", 404],
      ["cannot download https://127.0.0.1:", "/v0.1.0/meshcnictl-linux-amd64"],
    ],
  ];
  for (const [what, override, messages] of refusals) {
    test(`${what} installs nothing`, async () => {
      overrides.set(...override());
      try {
        const r = await install();
        expect(r.code).toBe(1);
        for (const m of messages) expect(r.stderr).toContain(m);
        expect(r.installed).toBe(false);
        expect(r.leftovers).toEqual([]);
      } finally {
        overrides.clear();
      }
    });
  }

  for (const [os, arch, message] of [
    ["FreeBSD", "amd64", "unsupported operating system FreeBSD: meshcnictl is built for Linux and macOS"],
    ["Linux", "riscv64", "unsupported architecture riscv64: meshcnictl is built for amd64 (x86_64) and arm64"],
  ] as const) {
    test(`${os} ${arch} stops before downloading`, async () => {
      const r = await install({ os, arch });
      expect(r.code).toBe(1);
      expect(r.stderr).toContain(message);
      expect(requested).toEqual([]);
      expect(r.installed).toBe(false);
    });
  }

  test("works with wget when there is no curl", async () => {
    const have = Bun.spawnSync(["sh", "-c", "command -v wget"]).exitCode === 0;
    if (!have) {
      const r = Bun.spawnSync(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "wget"], {
        env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
      });
      if (r.exitCode !== 0) throw new Error("wget is needed for this test and apt-get could not install it");
    }
    // A PATH with the tools install.sh uses, but no curl.
    const bin = mkdtempSync(join(tmp, "nocurl-"));
    for (const tool of [
      "wget",
      "sha256sum",
      "awk",
      "cut",
      "mktemp",
      "mkdir",
      "chmod",
      "mv",
      "rm",
      "uname",
      "sed",
      "tr",
      "tail",
      "dash",
    ]) {
      const found = Bun.spawnSync(["sh", "-c", `command -v ${tool}`], { stdout: "pipe" })
        .stdout.toString()
        .trim();
      if (found) copyFileSync(found, join(bin, tool));
      if (found) chmodSync(join(bin, tool), 0o755);
    }
    const viaWget = async (url: string) => {
      const home = mkdtempSync(join(tmp, "wgethome-"));
      requested.length = 0;
      const p = Bun.spawn([join(bin, "dash"), repoPath("install.sh")], {
        env: { HOME: home, PATH: bin, ...tlsEnv, MESHCNI_RELEASE_URL: url },
        stdout: "pipe",
        stderr: "pipe",
      });
      const [code, stderr] = await Promise.all([p.exited, new Response(p.stderr).text()]);
      return { code, stderr, installed: existsSync(join(home, ".meshcni/bin/meshcnictl")) };
    };
    const ok = await viaWget(`https://127.0.0.1:${server.port}`);
    expect(ok.stderr).toBe("");
    expect([ok.code, ok.installed]).toEqual([0, true]);
    // A redirect to https is followed, checked; one to http is refused and never fetched.
    const redirected = await viaWget(`https://127.0.0.1:${server.port}/to-https`);
    expect([redirected.code, redirected.installed]).toEqual([0, true]);
    const downgraded = await viaWget(`https://127.0.0.1:${server.port}/to-http`);
    expect(downgraded.stderr).toContain(
      `refusing the redirect from https://127.0.0.1:${server.port}/to-http/meshcnictl-linux-amd64 to http://`,
    );
    expect([downgraded.code, downgraded.installed]).toEqual([1, false]);
    expect(requested.filter((r) => r.startsWith("plain:"))).toEqual([]);
  });

  test("anything but https is refused, redirects included (curl)", async () => {
    const http = await install({ url: `http://127.0.0.1:${plain.port}/v0.1.0` });
    expect(http.stderr).toContain(
      `refusing to download http://127.0.0.1:${plain.port}/v0.1.0/meshcnictl-linux-amd64: only https:// is allowed`,
    );
    expect([http.code, http.installed]).toEqual([1, false]);
    const downgraded = await install({ url: `https://127.0.0.1:${server.port}/to-http/v0.1.0` });
    expect(downgraded.stderr).toContain("cannot download");
    expect([downgraded.code, downgraded.installed]).toEqual([1, false]);
    expect(requested.filter((r) => r.startsWith("plain:"))).toEqual([]);
    const redirected = await install({ url: `https://127.0.0.1:${server.port}/to-https` });
    expect([redirected.code, redirected.installed]).toEqual([0, true]);
  });
});
