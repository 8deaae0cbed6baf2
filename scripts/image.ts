// bun run image [--arch=amd64,arm64] [--tag=localhost/meshcni:dev] [--outdir=dist/image]
// Builds the DaemonSet image for each architecture, offline, and a manifest list tying them:
//
// 1. the node binary (dist/meshcni's build, cross-compiled with Bun's bun-linux-<arch> target)
//    and its meshcni-installer link go to OUTDIR/<arch>/opt/meshcni/;
// 2. Debian's packages for that architecture, at the versions pinned in DEBIAN_PINS (glibc, and
//    the userland the agent applies rules with: iptables in its nft and legacy variants,
//    nftables, util-linux's nsenter, iproute2's ip, and the libraries they load), come from the
//    package registry (apt-get download, cached under .cache/debs/<arch>) and are unpacked into
//    a sysroot (.cache/sysroot/<arch>);
// 3. internal/agent/install/hostcheck, the same check the agent runs, lists the loader and the
//    libraries each program loads in that sysroot (and each library the programs open at run
//    time: iptables' extensions, libnftables), and exactly those files are copied into
//    OUTDIR/<arch>/ at the paths the loader looks for them, with the programs (USERLAND);
// 4. each program is run inside the staged root (`--version` under chroot; a foreign
//    architecture through qemu-user's binfmt handler when one is registered, else qemu-user
//    with the root as its prefix): a missing library fails the build;
// 5. `podman build --platform linux/<arch>` of the Containerfile (FROM scratch; COPY <arch>/ /)
//    tags TAG-<arch> and adds it to the manifest list TAG.
//
// One image serves every host: the agent installs the plugin with the image's own loader and C
// library beside it (internal/agent/install/private-loader.ts), whatever C library the host has.
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, symlinkSync } from "node:fs";
import { dirname, join } from "node:path";
import { checkBinaryOnHost } from "../internal/agent/install/io/host-root.ts";
import { build } from "./build.ts";

export const ARCHS = {
  amd64: { bun: "bun-linux-x64", debian: "amd64", triplet: "x86_64-linux-gnu", qemu: undefined },
  arm64: { bun: "bun-linux-arm64", debian: "arm64", triplet: "aarch64-linux-gnu", qemu: "qemu-aarch64-static" },
} as const satisfies Record<
  string,
  { bun: Bun.Build.CompileTarget; debian: string; triplet: string; qemu: string | undefined }
>;
export type Arch = keyof typeof ARCHS;

/** At most this many bytes per architecture (podman's uncompressed size). */
export const IMAGE_BUDGET_BYTES = 130 * 1000 * 1000;

/**
 * The Debian packages the image's files come from, at these versions (the same for each
 * architecture; Debian 12). A version the registry no longer serves fails the download, naming
 * it: move the pin to the version `apt-cache policy PACKAGE` offers.
 */
export const DEBIAN_PINS: Record<string, string> = {
  libc6: "2.36-9+deb12u14",
  // iptables: xtables-nft-multi, xtables-legacy-multi, the extensions
  iptables: "1.8.9-2",
  libxtables12: "1.8.9-2",
  libip4tc2: "1.8.9-2",
  libip6tc2: "1.8.9-2",
  libnftnl11: "1.2.4-2",
  libmnl0: "1.0.4-3",
  // nftables: libnftables (the agent's in-process nft) and nft
  libnftables1: "1.0.6-2+deb12u2",
  nftables: "1.0.6-2+deb12u2",
  libjansson4: "2.14-2",
  libgmp10: "2:6.2.1+dfsg1-1.1",
  libedit2: "3.1-20221030-2",
  libbsd0: "0.11.7-2",
  libmd0: "1.0.4-2",
  libtinfo6: "6.4-4",
  // nsenter
  "util-linux": "2.38.1-5+deb12u3",
  libselinux1: "3.4-1+b6",
  "libpcre2-8-0": "10.42-1+deb12u2",
  // ip
  iproute2: "6.1.0-3",
  libbpf1: "1:1.1.2-0+deb12u1",
  libelf1: "0.188-2.1",
  libcap2: "1:2.66-4+deb12u3+b1",
  zlib1g: "1:1.2.13.dfsg-1",
};

/** A program of the userland: where it is in the image, where in the sysroot, its other names. */
interface Program {
  path: string;
  from?: string;
  links?: string[];
  /** How to ask it its version, and what the answer holds. */
  version: { args: string[]; says: string };
  /**
   * Opens a netlink socket before anything else, which qemu-user does not emulate for
   * nftables: under emulation the loader lists what it loads instead (`ld.so --list`).
   */
  netlinkFirst?: boolean;
}

const variants = (v: "nft" | "legacy") =>
  ["iptables", "ip6tables"].flatMap((t) => [`${t}-${v}`, `${t}-${v}-restore`, `${t}-${v}-save`]);

/** The userland the agent applies rules with (issue "agent applies"), each at its Debian path. */
export const USERLAND: Program[] = [
  {
    path: "/usr/sbin/xtables-nft-multi",
    links: variants("nft"),
    version: { args: ["iptables-nft-restore", "--version"], says: "v1.8.9 (nf_tables)" },
  },
  {
    path: "/usr/sbin/xtables-legacy-multi",
    links: variants("legacy"),
    version: { args: ["iptables-legacy-restore", "--version"], says: "v1.8.9 (legacy)" },
  },
  { path: "/usr/sbin/nft", version: { args: ["nft", "--version"], says: "nftables v1.0.6" }, netlinkFirst: true },
  { path: "/usr/bin/nsenter", version: { args: ["nsenter", "--version"], says: "nsenter from util-linux 2.38.1" } },
  { path: "/usr/bin/ip", from: "/bin/ip", version: { args: ["ip", "-V"], says: "iproute2-6.1.0" } },
];

/**
 * iptables' extensions the image carries (it opens lib{xt,ipt,ip6t}_NAME.so for each match and
 * target a rule names): those meshcni's rules and Istio's and Linkerd's use, and the common ones
 * next to them. Not all 122: on arm64 each is a 64 KB page-aligned file, 8.3 MB for all of them,
 * which would put that image over its budget.
 */
export const XTABLES_EXTENSIONS = [
  "standard",
  "comment",
  "tcp",
  "udp",
  "icmp",
  "icmp6",
  "multiport",
  "owner",
  "mark",
  "MARK",
  "connmark",
  "CONNMARK",
  "conntrack",
  "state",
  "CT",
  "NOTRACK",
  "REDIRECT",
  "TPROXY",
  "socket",
  "addrtype",
  "DNAT",
  "SNAT",
  "MASQUERADE",
  "REJECT",
  "LOG",
];

/** Libraries opened at run time (dlopen), not named by any program: each goes in with what it loads. */
function opened(arch: Arch, sysroot: string): string[] {
  const lib = `/usr/lib/${ARCHS[arch].triplet}`;
  const extensions = XTABLES_EXTENSIONS.flatMap((x) =>
    ["xt", "ipt", "ip6t"].map((f) => `${lib}/xtables/lib${f}_${x}.so`),
  );
  return [`${lib}/libnftables.so.1`, ...extensions.filter((p) => existsSync(join(sysroot, p)))];
}

const REPO = join(import.meta.dir, "..");
const CACHE = join(REPO, ".cache");

export type Podman = (args: string[]) => { code: number; stdout: string; stderr: string };
export const podman: Podman = (args) => {
  const r = Bun.spawnSync(["podman", ...args], { stdout: "pipe", stderr: "pipe" });
  return { code: r.exitCode, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
};

function run(argv: string[], cwd?: string): string {
  const r = Bun.spawnSync(argv, { cwd, stdout: "pipe", stderr: "pipe" });
  if (r.exitCode !== 0) throw new Error(`${argv.join(" ")}: ${r.stderr.toString().trim() || `exit ${r.exitCode}`}`);
  return r.stdout.toString();
}

/** The .deb of `pkg` at `version` in `dir`, by its control fields (apt names the file with the epoch escaped). */
function findDeb(dir: string, pkg: string, version: string): string | undefined {
  return readdirSync(dir)
    .filter((f) => f.startsWith(`${pkg}_`) && f.endsWith(".deb"))
    .find((f) => {
      const fields = run(["dpkg-deb", "-f", join(dir, f), "Package", "Version"]);
      return fields.includes(`Package: ${pkg}\n`) && fields.includes(`Version: ${version}\n`);
    });
}

/**
 * Debian's pinned packages (DEBIAN_PINS) for `arch`, unpacked into one folder. Downloads what
 * the cache lacks; apt needs `dpkg --add-architecture arm64` and an apt-get update for a foreign
 * architecture (scripts/setup.sh does both).
 */
export function debianSysroot(arch: Arch, log: (l: string) => void = () => {}): string {
  return debianRoot(arch, DEBIAN_PINS, join(CACHE, "sysroot", arch), log);
}

/** Debian packages `pins` for `arch` (downloaded once, as debianSysroot's) unpacked into `root`. */
export function debianRoot(
  arch: Arch,
  pins: Record<string, string>,
  root: string,
  log: (l: string) => void = () => {},
): string {
  const debs = join(CACHE, "debs", arch);
  mkdirSync(debs, { recursive: true });
  const files: string[] = [];
  for (const [pkg, version] of Object.entries(pins)) {
    let deb = findDeb(debs, pkg, version);
    if (!deb) {
      const want = `${pkg}:${ARCHS[arch].debian}=${version}`;
      log(`image: apt-get download ${want}`);
      try {
        run(["apt-get", "download", want], debs);
      } catch (e) {
        throw new Error(
          `${(e as Error).message}\n(the pin in scripts/image.ts DEBIAN_PINS; ` +
            `\`apt-cache policy ${pkg}\` shows what the registry offers)`,
        );
      }
      deb = findDeb(debs, pkg, version);
      if (!deb) throw new Error(`apt-get download ${want} wrote no package into ${debs}`);
    }
    files.push(deb);
  }
  const marker = join(root, "DEBIAN-PACKAGES");
  const want = `${files.sort().join("\n")}\n`;
  if (!existsSync(marker) || readFileSync(marker, "utf8") !== want) {
    rmSync(root, { recursive: true, force: true });
    mkdirSync(root, { recursive: true });
    for (const deb of files) run(["dpkg-deb", "-x", join(debs, deb), root]);
    Bun.write(marker, want);
  }
  return root;
}

export interface StagedArch {
  arch: Arch;
  dir: string;
  /** Files in the image: the path inside it and its size. */
  files: { path: string; bytes: number }[];
  /** The loader and libraries copied from the sysroot (paths inside the image). */
  libraries: string[];
  /** The userland's programs and the libraries opened at run time (paths inside the image). */
  userland: string[];
  /** Each userland program's answer to its version question, run inside the staged root. */
  versions: { argv: string[]; output: string }[];
}

/** Copies `rel` (a file, or a folder's files) from the sysroot into the staged root; returns the files copied. */
function copyIn(sysroot: string, dir: string, rel: string, to = rel): string[] {
  const src = join(sysroot, rel);
  if (!existsSync(src)) throw new Error(`the sysroot has no ${rel} (a package missing from DEBIAN_PINS?)`);
  if (statSync(src).isDirectory()) {
    return readdirSync(src)
      .sort()
      .flatMap((n) => copyIn(sysroot, dir, `${rel}/${n}`, `${to}/${n}`));
  }
  mkdirSync(dirname(join(dir, to)), { recursive: true });
  copyFileSync(src, join(dir, to));
  return [to];
}

/**
 * Runs each program inside `dir` (chroot; through qemu-user where the machine is another) and
 * returns what it said; throws when one does not run.
 */
function runInside(arch: Arch, dir: string, loader: string, log: (l: string) => void): StagedArch["versions"] {
  const qemu = ARCHS[arch].qemu;
  const emulated = qemu !== undefined && process.arch !== "arm64";
  const binfmt = "/proc/sys/fs/binfmt_misc/qemu-aarch64";
  const viaBinfmt = emulated && existsSync(binfmt) && /^flags: \S*F/m.test(readFileSync(binfmt, "utf8"));
  const exec = (argv0: string, path: string, args: string[]) => {
    const cmd =
      !emulated || viaBinfmt
        ? ["chroot", dir, path, ...args]
        : // Without a registered handler: qemu-user with the staged root as its prefix (this
          // machine has no libraries of that architecture to fall back on).
          [Bun.which(qemu!) ?? qemu!, "-L", dir, "-0", argv0, join(dir, path), ...args];
    const r = Bun.spawnSync(cmd, { env: { PATH: "/usr/sbin:/usr/bin" }, stdout: "pipe", stderr: "pipe" });
    return { code: r.exitCode, output: r.stdout.toString() + r.stderr.toString() };
  };
  const versions: StagedArch["versions"] = [];
  for (const p of USERLAND) {
    const [name, ...args] = p.version.args as [string, ...string[]];
    const path = `${dirname(p.path)}/${name}`;
    if (emulated && p.netlinkFirst) {
      const r = exec(loader, loader, ["--list", path]);
      if (r.code !== 0 || r.output.includes("not found"))
        throw new Error(`${loader} --list ${path} inside the ${arch} image root: exit ${r.code}: ${r.output.trim()}`);
      versions.push({ argv: [loader, "--list", path], output: r.output.trim() });
      continue;
    }
    const r = exec(name, path, args);
    if (r.code !== 0 || !r.output.includes(p.version.says))
      throw new Error(`${p.version.args.join(" ")} inside the ${arch} image root: exit ${r.code}: ${r.output.trim()}`);
    versions.push({ argv: p.version.args, output: r.output.trim() });
  }
  const how = !emulated ? "chroot" : viaBinfmt ? "chroot, qemu-user's binfmt handler" : "qemu-user -L";
  log(
    `image: ${arch} userland runs inside the image root (${how}): ` +
      versions.map((v) => v.output.split("\n")[0]).join("; "),
  );
  return versions;
}

/** Stages OUTDIR/<arch>/: the node binary, its link, the userland, and exactly the libraries they load. */
export async function stageArch(
  arch: Arch,
  outdir: string,
  opts: { log?: (l: string) => void } = {},
): Promise<StagedArch> {
  const log = opts.log ?? (() => {});
  const dir = join(outdir, arch);
  rmSync(dir, { recursive: true, force: true });
  const bin = join(dir, "opt/meshcni");
  mkdirSync(bin, { recursive: true });
  await build(["meshcni"], { outdir: bin, target: ARCHS[arch].bun, log });
  const sysroot = debianSysroot(arch, log);

  const userland: string[] = [];
  for (const p of USERLAND) {
    userland.push(...copyIn(sysroot, dir, p.from ?? p.path, p.path));
    for (const l of p.links ?? []) {
      symlinkSync(p.path.slice(p.path.lastIndexOf("/") + 1), join(dir, dirname(p.path), l));
      userland.push(`${dirname(p.path)}/${l}`);
    }
  }
  const openedFiles = opened(arch, sysroot).flatMap((rel) => copyIn(sysroot, dir, rel));
  userland.push(...openedFiles);

  // What each loads, found in the sysroot as the loader finds it.
  const node = checkBinaryOnHost(sysroot, join(bin, "meshcni"), `the ${arch} node binary`);
  if (node.ok !== true) {
    const why = node.ok === false ? node.problems : node.skipped;
    throw new Error(`Debian's libc6 for ${arch} does not satisfy the node binary: ${why.join("; ")}`);
  }
  const loader = node.files[0]!.path;
  const libraries = new Map(node.files.map((f) => [f.path, f.real]));
  for (const p of [...USERLAND.map((u) => u.path), ...openedFiles]) {
    const v = checkBinaryOnHost(sysroot, join(dir, p), `${p} (${arch})`, undefined, loader);
    if (v.ok !== true) {
      const why = v.ok === false ? v.problems : v.skipped;
      throw new Error(`the sysroot does not satisfy ${p}: ${why.join("; ")} (a package missing from DEBIAN_PINS?)`);
    }
    for (const f of v.files) if (!openedFiles.includes(f.path)) libraries.set(f.path, f.real);
  }
  for (const [path, real] of libraries) {
    if (existsSync(join(dir, path))) continue;
    mkdirSync(dirname(join(dir, path)), { recursive: true });
    copyFileSync(join(sysroot, real), join(dir, path));
  }

  // Each program, inside the staged root.
  const versions = runInside(arch, dir, loader, log);
  return {
    arch,
    dir,
    files: listFiles(dir),
    libraries: [...libraries.keys()].sort(),
    userland: userland.sort(),
    versions,
  };
}

/** Regular files and links under `dir`, as paths inside the image. */
export function listFiles(dir: string, prefix = ""): { path: string; bytes: number }[] {
  const out: { path: string; bytes: number }[] = [];
  for (const e of readdirSync(join(dir, prefix), { withFileTypes: true })) {
    const rel = `${prefix}/${e.name}`;
    if (e.isDirectory()) out.push(...listFiles(dir, rel));
    else out.push({ path: rel, bytes: e.isSymbolicLink() ? 0 : statSync(join(dir, rel)).size });
  }
  return out.sort((a, b) => a.path.localeCompare(b.path));
}

export interface BuiltImage {
  arch: Arch;
  tag: string;
  /** podman's size of the image (uncompressed). */
  bytes: number;
  staged: StagedArch;
}

/** Stages and builds each architecture, adding each image to the manifest list `tag`. */
export async function buildImages(opts: {
  archs: readonly Arch[];
  tag: string;
  outdir: string;
  podman?: Podman;
  log?: (l: string) => void;
}): Promise<BuiltImage[]> {
  const pm = opts.podman ?? podman;
  const log = opts.log ?? (() => {});
  const list = opts.tag;
  pm(["manifest", "rm", list]); // a rebuild starts a fresh list
  const out: BuiltImage[] = [];
  for (const arch of opts.archs) {
    const staged = await stageArch(arch, opts.outdir, { log });
    const tag = `${list}-${arch}`;
    const r = pm([
      "build",
      "--platform",
      `linux/${arch}`,
      "-t",
      tag,
      "--manifest",
      list,
      "-f",
      join(REPO, "Containerfile"),
      opts.outdir,
    ]);
    if (r.code !== 0) throw new Error(`podman build for ${arch}: ${r.stderr}`);
    const size = pm(["image", "inspect", "--format", "{{.Size}}", tag]);
    const bytes = Number(size.stdout.trim());
    const over = bytes > IMAGE_BUDGET_BYTES ? ` (over the ${IMAGE_BUDGET_BYTES / 1e6} MB budget)` : "";
    log(`image: ${tag} ${(bytes / 1e6).toFixed(1)} MB${over}`);
    out.push({ arch, tag, bytes, staged });
  }
  log(`image: manifest list ${list} (${opts.archs.map((a) => `linux/${a}`).join(", ")})`);
  return out;
}

if (import.meta.main) {
  const args = Bun.argv.slice(2);
  const opt = (name: string) => args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
  const archs = (opt("arch")?.split(",") ?? Object.keys(ARCHS)) as Arch[];
  for (const a of archs) {
    if (!(a in ARCHS)) {
      console.error(`image: unknown architecture ${a}; one of ${Object.keys(ARCHS).join(", ")}`);
      process.exit(2);
    }
  }
  const built = await buildImages({
    archs,
    tag: opt("tag") ?? "localhost/meshcni:dev",
    outdir: opt("outdir") ?? join(REPO, "dist/image"),
    log: console.log,
  });
  if (built.some((b) => b.bytes > IMAGE_BUDGET_BYTES)) process.exitCode = 1;
}
