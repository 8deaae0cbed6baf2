// Small, valid ELF files for the host check's tests: a 64-bit little-endian header, one PT_LOAD
// covering the file, an optional PT_INTERP, and a PT_DYNAMIC with DT_NEEDED, DT_RUNPATH,
// DT_STRTAB and DT_STRSZ, laid out the way a linker does (readelf -d and -l read them).

export interface ElfSpec {
  machine?: number;
  interpreter?: string;
  needed?: string[];
  runpath?: string;
  /** 32-bit files are written with the same layout (ELFCLASS32). */
  bits?: 32 | 64;
}

export function makeElf(spec: ElfSpec): Uint8Array {
  const wide = (spec.bits ?? 64) === 64;
  const ehsize = wide ? 64 : 52;
  const phentsize = wide ? 56 : 32;
  const dynent = wide ? 16 : 8;
  const enc = new TextEncoder();
  // String table: "\0" then each name.
  const strs: number[] = [0];
  const offsets = new Map<string, number>();
  for (const s of [...(spec.needed ?? []), ...(spec.runpath ? [spec.runpath] : [])]) {
    offsets.set(s, strs.length);
    strs.push(...enc.encode(s), 0);
  }
  const interp = spec.interpreter ? [...enc.encode(spec.interpreter), 0] : [];
  const phnum = 2 + (interp.length ? 1 : 0);
  const interpOff = ehsize + phnum * phentsize;
  const strOff = interpOff + interp.length;
  const dynOff = Math.ceil((strOff + strs.length) / 8) * 8;
  const dyn: [number, number][] = [
    ...(spec.needed ?? []).map((n) => [1, offsets.get(n)!] as [number, number]),
    ...(spec.runpath ? [[29, offsets.get(spec.runpath)!] as [number, number]] : []),
    [5, strOff], // DT_STRTAB: vaddr == file offset (the PT_LOAD maps the file at 0)
    [10, strs.length],
    [0, 0],
  ];
  const size = dynOff + dyn.length * dynent;
  const buf = new Uint8Array(size);
  const v = new DataView(buf.buffer);
  buf.set([0x7f, 0x45, 0x4c, 0x46, wide ? 2 : 1, 1, 1], 0);
  const put = (at: number, n: number, w: boolean) => (w ? v.setBigUint64(at, BigInt(n), true) : v.setUint32(at, n, true));
  v.setUint16(16, 3, true); // ET_DYN
  v.setUint16(18, spec.machine ?? 62, true);
  v.setUint32(20, 1, true);
  put(wide ? 32 : 28, ehsize, wide); // e_phoff
  v.setUint16(wide ? 52 : 40, ehsize, true);
  v.setUint16(wide ? 54 : 42, phentsize, true);
  v.setUint16(wide ? 56 : 44, phnum, true);
  const ph = (i: number, type: number, offset: number, filesz: number) => {
    const at = ehsize + i * phentsize;
    v.setUint32(at, type, true);
    if (wide) {
      put(at + 8, offset, true);
      put(at + 16, offset, true);
      put(at + 24, offset, true);
      put(at + 32, filesz, true);
      put(at + 40, filesz, true);
    } else {
      v.setUint32(at + 4, offset, true);
      v.setUint32(at + 8, offset, true);
      v.setUint32(at + 12, offset, true);
      v.setUint32(at + 16, filesz, true);
      v.setUint32(at + 20, filesz, true);
    }
  };
  let i = 0;
  if (interp.length) ph(i++, 3, interpOff, interp.length);
  ph(i++, 1, 0, size);
  ph(i++, 2, dynOff, dyn.length * dynent);
  buf.set(interp, interpOff);
  buf.set(strs, strOff);
  dyn.forEach(([tag, val], k) => {
    put(dynOff + k * dynent, tag, wide);
    put(dynOff + k * dynent + dynent / 2, val, wide);
  });
  return buf;
}

/** glibc's ld.so.cache in the format ldconfig writes ("glibc-ld.so.cache1.1"). */
export function makeLdCache(entries: { name: string; path: string }[]): Uint8Array {
  const enc = new TextEncoder();
  const header = 48;
  const strBase = header + entries.length * 24;
  const strs: number[] = [];
  const refs = entries.map((e) => {
    const k = strBase + strs.length;
    strs.push(...enc.encode(e.name), 0);
    const p = strBase + strs.length;
    strs.push(...enc.encode(e.path), 0);
    return [k, p] as const;
  });
  const buf = new Uint8Array(strBase + strs.length);
  const v = new DataView(buf.buffer);
  buf.set(enc.encode("glibc-ld.so.cache1.1"), 0);
  v.setUint32(20, entries.length, true);
  v.setUint32(24, strs.length, true);
  refs.forEach(([k, p], i) => {
    const at = header + i * 24;
    v.setInt32(at, 0x0303, true);
    v.setUint32(at + 4, k, true);
    v.setUint32(at + 8, p, true);
  });
  buf.set(strs, strBase);
  return buf;
}

/** A RootView over an in-memory tree: paths to bytes, or { link } for a symbolic link. */
export function memoryRoot(tree: Record<string, Uint8Array | string | { link: string }>) {
  const files = new Map<string, Uint8Array | { link: string }>();
  const dirs = new Set<string>(["/"]);
  for (const [path, what] of Object.entries(tree)) {
    files.set(path, typeof what === "string" ? new TextEncoder().encode(what) : what);
    const parts = path.split("/").filter(Boolean);
    for (let i = 1; i < parts.length; i++) dirs.add(`/${parts.slice(0, i).join("/")}`);
  }
  return {
    entry(path: string) {
      const f = files.get(path);
      if (f instanceof Uint8Array) return { kind: "file" as const, size: f.length };
      if (f) return { kind: "symlink" as const, target: f.link, size: 0 };
      return dirs.has(path) ? { kind: "dir" as const, size: 0 } : undefined;
    },
    reader(path: string) {
      const f = files.get(path) as Uint8Array;
      return (o: number, n: number) => f.subarray(o, o + n);
    },
    readFile(path: string) {
      const f = files.get(path);
      return f instanceof Uint8Array ? f : undefined;
    },
  };
}
