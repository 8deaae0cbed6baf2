// Can a host run this binary? The kernel starts the ELF interpreter named in the binary (its
// PT_INTERP path, on the host), and that loader finds each DT_NEEDED library in its cache or its
// default folders. This follows the same steps through a view of the host's root folder (the
// installer sees it mounted read-only; the image build uses it on a Debian sysroot) and says
// exactly what is missing, or lists every file the binary loads. Pure: files are seen through
// RootView; symbolic links are resolved inside the root, as the host would resolve them.
//
// On a node the agent sees only some of the host's paths (HOST_CHECK_PATHS, each mounted
// read-only at the same path under its host root; limitView). A path outside them is "unseen":
// where the answer depends on one (a link that leads out, a folder the loader may also search),
// the check says it was skipped and why, rather than guess.
import { type ElfInfo, ElfError, isElf, machineName, parseElf, type ReadAt } from "./elf.ts";
import { parseLdCache } from "./ldcache.ts";

export type EntryKind = "file" | "dir" | "symlink" | "other" | "unseen";

/**
 * The host paths the check reads, and the only ones the DaemonSet mounts for it: the loader and
 * libraries live in /usr, /lib and /lib64 (or links to them), and glibc's loader reads
 * /etc/ld.so.cache first. Never /etc, /var or /proc.
 */
export const HOST_CHECK_PATHS = ["/usr", "/lib", "/lib64", "/etc/ld.so.cache"] as const;

export interface RootView {
  /** The entry at `path` (absolute, inside the root), symbolic links not followed. */
  entry(path: string): { kind: EntryKind; target?: string; size: number } | undefined;
  /** Reads a regular file (a path already resolved). */
  reader(path: string): ReadAt;
  /** A small file's bytes (ld.so.cache, musl's path file); undefined when absent. */
  readFile(path: string): Uint8Array | undefined;
  /** The paths this view shows, when it shows only some of the root (see limitView). */
  sees?: readonly string[];
}

const within = (path: string, top: string) => top === "/" || path === top || path.startsWith(`${top}/`);

/**
 * `view` showing only `paths` (and the folders leading to them): anything else is an entry of
 * kind "unseen", never read. What the agent sees of a node's host root is such a view.
 */
export function limitView(view: RootView, paths: readonly string[] = HOST_CHECK_PATHS): RootView {
  const seen = (path: string) => paths.some((p) => within(path, p));
  const leadsTo = (path: string) => path === "/" || paths.some((p) => p.startsWith(`${path}/`));
  return {
    entry(path) {
      if (seen(path)) return view.entry(path);
      if (leadsTo(path)) return { kind: "dir", size: 0 };
      return { kind: "unseen", size: 0 };
    },
    reader: (path) => {
      if (!seen(path)) throw new Error(`${path} is outside the host paths this view shows`);
      return view.reader(path);
    },
    readFile: (path) => (seen(path) ? view.readFile(path) : undefined),
    sees: paths,
  };
}

export type Libc = "glibc" | "musl" | "unknown" | "static";

export interface LoadedFile {
  /** As the binary or the loader asks for it: the interpreter's path, or folder/name. */
  path: string;
  /** Where it really is, symbolic links resolved. */
  real: string;
}

export type HostVerdict =
  | { ok: true; libc: Libc; machine: string; files: LoadedFile[] }
  | { ok: false; libc: Libc; machine: string; problems: string[] }
  /** Not known: the answer depends on host paths outside the view (`skipped` says which and why). */
  | { ok: null; libc: Libc; machine: string; skipped: string[] };

const MAX_LINKS = 40;

/**
 * Resolves `path` inside the root, following symbolic links; undefined when it does not exist.
 * Kind "unseen" (with `real` the path as far as it was resolved) when it leads outside the view.
 */
export function resolveInRoot(
  view: RootView,
  path: string,
): { real: string; kind: EntryKind; size: number } | undefined {
  let todo = path.split("/").filter((c) => c !== "" && c !== ".");
  let done: string[] = [];
  let links = 0;
  while (todo.length > 0) {
    const c = todo.shift()!;
    if (c === "..") {
      done.pop();
      continue;
    }
    const here = `/${[...done, c].join("/")}`;
    const e = view.entry(here);
    if (!e) return undefined;
    if (e.kind === "unseen") return { real: `/${[...done, c, ...todo].join("/")}`, kind: "unseen", size: 0 };
    if (e.kind === "symlink") {
      if (++links > MAX_LINKS || e.target === undefined) return undefined;
      const t = e.target.split("/").filter((x) => x !== "" && x !== ".");
      if (e.target.startsWith("/")) done = [];
      todo = [...t, ...todo];
      continue;
    }
    if (todo.length > 0 && e.kind !== "dir") return undefined;
    done.push(c);
  }
  const real = `/${done.join("/")}`;
  const e = view.entry(real);
  return e ? { real, kind: e.kind, size: e.size } : undefined;
}

const TRIPLETS: Record<number, { gnu: string; musl: string }> = {
  62: { gnu: "x86_64-linux-gnu", musl: "x86_64" },
  183: { gnu: "aarch64-linux-gnu", musl: "aarch64" },
  3: { gnu: "i386-linux-gnu", musl: "i386" },
  40: { gnu: "arm-linux-gnueabihf", musl: "armhf" },
};

export function libcOf(info: ElfInfo): Libc {
  if (!info.interpreter) return "static";
  const base = info.interpreter.slice(info.interpreter.lastIndexOf("/") + 1);
  if (base.startsWith("ld-musl-")) return "musl";
  if (base.startsWith("ld-linux") || base.startsWith("ld64.so") || base === "ld.so.1") return "glibc";
  return "unknown";
}

/** musl's path file for `machine`: when present, it replaces musl's default folders. */
export function muslPathFile(machine: number): string | undefined {
  const t = TRIPLETS[machine];
  return t && `/etc/ld-musl-${t.musl}.path`;
}

/** The folders the loader searches after its cache, as glibc (Debian's multiarch build included) and musl do. */
export function defaultLibraryDirs(view: RootView, info: ElfInfo, libc: Libc): string[] {
  const t = TRIPLETS[info.machine];
  if (libc === "musl") {
    const path = muslPathFile(info.machine);
    const file = path && view.readFile(path);
    if (file)
      return new TextDecoder()
        .decode(file)
        .split(/[:\n]/)
        .map((s) => s.trim())
        .filter((s) => s.startsWith("/"));
    return ["/lib", "/usr/local/lib", "/usr/lib"];
  }
  return [
    ...(t ? [`/lib/${t.gnu}`, `/usr/lib/${t.gnu}`] : []),
    ...(info.bits === 64 ? ["/lib64", "/usr/lib64"] : []),
    "/lib",
    "/usr/lib",
  ];
}

/** Names musl's loader answers itself: its libc, and the libraries glibc splits off. */
const MUSL_BUILTIN = /^lib(c|pthread|rt|m|dl|util|xnet|resolv|crypt)\.(so|musl)/;

function describeLoader(interp: string, libc: Libc, machine: string): string {
  return libc === "glibc"
    ? `glibc's loader for ${machine}`
    : libc === "musl"
      ? `musl's loader for ${machine}`
      : `the loader it names (${interp})`;
}

/**
 * Checks through `view` that the binary read by `read` can run on that root. `label` names the
 * binary in the problems (for instance /opt/meshcni/meshcni); `rootLabel` names the root.
 * `loadedBy`: for a shared library (which names no loader), the loader that will load it (its
 * libraries are then found and listed as that loader would).
 */
export function checkHostCanRun(
  view: RootView,
  read: ReadAt,
  size: number,
  label: string,
  rootLabel: string,
  loadedBy?: string,
): HostVerdict {
  let info: ElfInfo;
  try {
    info = parseElf(read, size);
    if (!info.interpreter && loadedBy !== undefined && info.needed.length > 0)
      info = { ...info, interpreter: loadedBy };
  } catch (e) {
    if (!(e instanceof ElfError)) throw e;
    return {
      ok: false,
      libc: "unknown",
      machine: "unknown",
      problems: [`${label} is not an executable this check understands: ${e.message}`],
    };
  }
  const machine = machineName(info.machine);
  const libc = libcOf(info);
  const fail = (problems: string[]): HostVerdict => ({ ok: false, libc, machine, problems });
  if (!info.interpreter) return { ok: true, libc, machine, files: [] };

  const files: LoadedFile[] = [];
  const problems: string[] = [];
  const sameKind = (real: string): string | undefined => {
    const r = view.reader(real);
    const e = view.entry(real)!;
    const head = r(0, Math.min(16, e.size));
    if (!isElf(head)) return "is not an ELF file";
    try {
      const lib = parseElf(r, e.size);
      if (lib.machine !== info.machine || lib.bits !== info.bits)
        return `is for ${machineName(lib.machine)} (${lib.bits}-bit), not ${machine} (${info.bits}-bit)`;
    } catch (err) {
      if (!(err instanceof ElfError)) throw err;
      return `cannot be read as ELF: ${err.message}`;
    }
    return undefined;
  };

  const outside =
    `outside what the agent sees of the host ` +
    `(${view.sees ? `${view.sees.join(", ")} through ${rootLabel}` : rootLabel})`;
  const interp = resolveInRoot(view, info.interpreter);
  const loader = describeLoader(info.interpreter, libc, machine);
  if (interp?.kind === "unseen") {
    return {
      ok: null,
      libc,
      machine,
      skipped: [`${label} starts with ${info.interpreter} (${loader}), which leads to ${interp.real}, ${outside}`],
    };
  }
  if (interp?.kind !== "file") {
    return fail([
      `the host has no ${info.interpreter} (${loader}), which ${label} needs to start: ` +
        `every ADD would fail with "no such file or directory" (looked through ${rootLabel})`,
    ]);
  }
  const wrong = sameKind(interp.real);
  if (wrong)
    return fail([`the host's ${info.interpreter} ${wrong}: ${label} needs ${loader} (looked through ${rootLabel})`]);
  files.push({ path: info.interpreter, real: interp.real });
  const interpName = info.interpreter.slice(info.interpreter.lastIndexOf("/") + 1);

  // Where the loader's search may lead that the view does not show: its cache, musl's path file.
  const unseenSources: string[] = [];
  const unseen = (path: string) => resolveInRoot(view, path)?.kind === "unseen";
  const cachePath = "/etc/ld.so.cache";
  if (libc === "glibc" && unseen(cachePath)) unseenSources.push(cachePath);
  // musl's path file replaces its default folders when present. It lives in /etc, which a node
  // does not mount: the check then takes the defaults, which is what a host without that file
  // (Alpine's default) has, and says so when a library is missing.
  const pathFile = libc === "musl" ? muslPathFile(info.machine) : undefined;
  const pathFileNote =
    pathFile && unseen(pathFile)
      ? `; ${pathFile}, which can name other folders, is ${outside}: these are musl's defaults`
      : "";
  const cache = libc === "glibc" ? parseLdCache(view.readFile(cachePath) ?? new Uint8Array()) : [];
  const dirs = defaultLibraryDirs(view, info, libc);
  const skipped: string[] = [];
  const seen = new Set<string>([interpName]);
  const queue: { name: string; by: string; runpath: string[] }[] = info.needed.map((name) => ({
    name,
    by: label,
    runpath: info.runpath,
  }));
  while (queue.length > 0) {
    const { name, by, runpath } = queue.shift()!;
    if (seen.has(name)) continue;
    seen.add(name);
    if (libc === "musl" && MUSL_BUILTIN.test(name)) continue;
    const candidates = name.includes("/")
      ? [name]
      : [
          ...runpath.map((d) => `${d}/${name}`),
          ...cache.filter((c) => c.name === name).map((c) => c.path),
          ...dirs.map((d) => `${d}/${name}`),
        ];
    let found: { path: string; real: string } | undefined;
    const rejected: string[] = [];
    const out: string[] = [];
    for (const path of candidates) {
      const r = resolveInRoot(view, path);
      if (r?.kind === "unseen") {
        out.push(r.real === path ? path : `${path} (-> ${r.real})`);
        continue;
      }
      if (r?.kind !== "file") continue;
      const why = sameKind(r.real);
      if (why) {
        rejected.push(`${path} ${why}`);
        continue;
      }
      found = { path, real: r.real };
      break;
    }
    const who = by === label ? label : `${by} (needed by ${label})`;
    if (!found) {
      const where = libc === "musl" ? dirs.join(", ") : `ld.so.cache, ${dirs.join(", ")}`;
      const passed = rejected.length ? `; passed over ${rejected.join("; ")}` : "";
      if (out.length > 0 || unseenSources.length > 0) {
        skipped.push(
          `${name}, which ${who} loads, is not in ${where} as the agent sees them${passed}; ` +
            `the loader may also find it through ${[...out, ...unseenSources].join(", ")}, ${outside}`,
        );
      } else {
        problems.push(
          `the host has no ${name} for ${machine}, which ${who} loads ` +
            `(looked in ${where} through ${rootLabel}${passed}${pathFileNote})`,
        );
      }
      continue;
    }
    files.push(found);
    const e = view.entry(found.real)!;
    try {
      const lib = parseElf(view.reader(found.real), e.size);
      for (const n of lib.needed) queue.push({ name: n, by: name, runpath: lib.runpath });
    } catch (err) {
      if (!(err instanceof ElfError)) throw err;
    }
  }
  if (problems.length === 0 && skipped.length > 0) return { ok: null, libc, machine, skipped };
  return problems.length ? fail(problems) : { ok: true, libc, machine, files };
}

/** Where each C library keeps its loader, for each machine (by name, as machineName gives it). */
const LOADERS: Record<string, { glibc: string; musl: string }> = {
  "x86-64": { glibc: "/lib64/ld-linux-x86-64.so.2", musl: "/lib/ld-musl-x86_64.so.1" },
  aarch64: { glibc: "/lib/ld-linux-aarch64.so.1", musl: "/lib/ld-musl-aarch64.so.1" },
};

/**
 * The C libraries a host has for `machine`, in words: whose loader is at its usual path (glibc's,
 * musl's, both, neither), or that the path leads outside the view.
 */
export function describeHostLibc(view: RootView, machine: string): string {
  const paths = LOADERS[machine];
  if (!paths) return `not looked at for ${machine}`;
  const found: string[] = [];
  const unseen: string[] = [];
  for (const libc of ["glibc", "musl"] as const) {
    const r = resolveInRoot(view, paths[libc]);
    if (r?.kind === "file") found.push(`${libc} (${paths[libc]})`);
    else if (r?.kind === "unseen") unseen.push(`${paths[libc]} leads to ${r.real}, which the agent does not see`);
  }
  const what =
    found.length > 0 ? found.join(" and ") : `neither glibc's loader (${paths.glibc}) nor musl's (${paths.musl})`;
  return unseen.length > 0 ? `${what}; ${unseen.join("; ")}` : what;
}
