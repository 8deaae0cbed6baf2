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
  const put = (at: number, n: number, w: boolean) =>
    w ? v.setBigUint64(at, BigInt(n), true) : v.setUint32(at, n, true);
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

export interface ExecutableSpec {
  /** e_machine: 62 x86-64 (pages of 4 KiB), 183 aarch64 (64 KiB). */
  machine?: number;
  /** ET_EXEC (2, linked at 0x400000) or ET_DYN (3, a PIE linked at 0). */
  type?: 2 | 3;
  /** No interpreter makes a static executable (no PT_INTERP). */
  interpreter?: string;
  needed?: string[];
  /** A run path, as DT_RUNPATH or, with `rpathTag: 15`, as DT_RPATH. */
  runpath?: string;
  rpathTag?: 15 | 29;
  /** Zero-filled memory after .dynamic in the read-write segment (.bss). */
  bss?: number;
  /** Without PT_DYNAMIC (and without .dynamic). */
  noDynamic?: boolean;
  /** Without PT_PHDR. */
  noPhdr?: boolean;
  /** Extra DT_NULL entries at the end of .dynamic, as some linkers leave. */
  spareDynamic?: number;
}

/** Its whole program: exit(42), as x86-64 and aarch64 instructions. */
const EXIT_42: Record<number, number[]> = {
  62: [0xbf, 42, 0, 0, 0, 0xb8, 60, 0, 0, 0, 0x0f, 0x05], // mov edi, 42; mov eax, 60 (exit); syscall
  183: [0x40, 0x05, 0x80, 0xd2, 0xa8, 0x0b, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4], // mov x0, 42; mov x8, 93; svc 0
};

/**
 * A 64-bit little-endian executable laid out as a linker lays one out: PT_PHDR, PT_INTERP, a
 * read-and-execute PT_LOAD from offset 0 (headers, .interp, .dynstr, the code), a read-write
 * PT_LOAD on the next page (.dynamic, then .bss), PT_DYNAMIC, PT_GNU_STACK, and section headers
 * for .interp, .dynstr, .dynamic and .shstrtab. It runs: the loader maps it and the libraries
 * it names, then its code exits with 42.
 */
export function makeExecutable(spec: ExecutableSpec): Uint8Array {
  const page = spec.machine === 183 ? 0x10000 : 0x1000;
  const base = (spec.type ?? 2) === 2 ? 0x400000 : 0;
  const enc = new TextEncoder();
  const strs: number[] = [0];
  const offsets = new Map<string, number>();
  for (const s of [...(spec.needed ?? []), ...(spec.runpath ? [spec.runpath] : [])]) {
    offsets.set(s, strs.length);
    strs.push(...enc.encode(s), 0);
  }
  const interp = spec.interpreter !== undefined ? [...enc.encode(spec.interpreter), 0] : [];
  const dynamic = !spec.noDynamic;
  const types = [...(spec.noPhdr ? [] : [6]), ...(interp.length ? [3] : []), 1, 1, ...(dynamic ? [2] : []), 0x6474e551];
  const phoff = 64;
  const interpOff = phoff + types.length * 56;
  const strOff = interpOff + interp.length;
  const code = EXIT_42[spec.machine ?? 62] ?? [];
  // A symbol table of the null symbol alone: glibc's loader reads DT_SYMTAB when it relocates.
  const symOff = Math.ceil((strOff + strs.length) / 8) * 8;
  const codeOff = Math.ceil((symOff + 24) / 16) * 16;
  const roEnd = codeOff + code.length;
  const dynOff = Math.ceil(roEnd / 16) * 16;
  const dynVaddr = base + page + dynOff;
  const dyn: [number, number][] = dynamic
    ? [
        ...(spec.needed ?? []).map((n) => [1, offsets.get(n)!] as [number, number]),
        ...(spec.runpath ? [[spec.rpathTag ?? 29, offsets.get(spec.runpath)!] as [number, number]] : []),
        [5, base + strOff],
        [10, strs.length],
        [6, base + symOff],
        [11, 24],
        [21, 0], // DT_DEBUG: the loader writes its r_debug here
        [0, 0],
        ...Array.from({ length: spec.spareDynamic ?? 0 }, () => [0, 0] as [number, number]),
      ]
    : [];
  const dynSize = dyn.length * 16;
  const names = "\0.interp\0.dynstr\0.dynamic\0.shstrtab\0";
  const shstrOff = dynOff + dynSize;
  const shoff = Math.ceil((shstrOff + names.length) / 8) * 8;
  const sections = [
    [0, 0, 0, 0, 0, 0, 0, 0],
    ...(interp.length ? [[1, 1, 2, base + interpOff, interpOff, interp.length, 0, 1]] : []),
    [9, 3, 2, base + strOff, strOff, strs.length, 0, 1],
    ...(dynamic ? [[17, 6, 3, dynVaddr, dynOff, dynSize, interp.length ? 2 : 1, 8]] : []),
    [26, 3, 0, 0, shstrOff, names.length, 0, 1],
  ];
  const size = shoff + sections.length * 64;
  const buf = new Uint8Array(size);
  const v = new DataView(buf.buffer);
  const put = (at: number, n: number) => v.setBigUint64(at, BigInt(n), true);
  buf.set([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1], 0);
  v.setUint16(16, spec.type ?? 2, true);
  v.setUint16(18, spec.machine ?? 62, true);
  v.setUint32(20, 1, true);
  put(24, base + codeOff); // e_entry
  put(32, phoff);
  put(40, shoff);
  v.setUint16(52, 64, true);
  v.setUint16(54, 56, true);
  v.setUint16(56, types.length, true);
  v.setUint16(58, 64, true);
  v.setUint16(60, sections.length, true);
  v.setUint16(62, sections.length - 1, true);
  type Fields = [flags: number, offset: number, vaddr: number, filesz: number, memsz: number, align: number];
  const segment: Record<number, Fields> = {
    6: [4, phoff, base + phoff, types.length * 56, types.length * 56, 8],
    3: [4, interpOff, base + interpOff, interp.length, interp.length, 1],
    2: [6, dynOff, dynVaddr, dynSize, dynSize, 8],
    1685382481: [6, 0, 0, 0, 0, 16],
  };
  let loads = 0;
  types.forEach((t, i) => {
    const at = phoff + i * 56;
    const rx: Fields = [5, 0, base, roEnd, roEnd, page];
    const rw: Fields = [6, dynOff, dynVaddr, dynSize, dynSize + (spec.bss ?? 0), page];
    const [flags, offset, vaddr, filesz, memsz, align] = t === 1 ? (loads++ === 0 ? rx : rw) : segment[t]!;
    v.setUint32(at, t, true);
    v.setUint32(at + 4, flags, true);
    put(at + 8, offset);
    put(at + 16, vaddr);
    put(at + 24, vaddr);
    put(at + 32, filesz);
    put(at + 40, memsz);
    put(at + 48, align);
  });
  buf.set(interp, interpOff);
  buf.set(strs, strOff);
  buf.set(code, codeOff);
  dyn.forEach(([tag, val], k) => {
    put(dynOff + k * 16, tag);
    put(dynOff + k * 16 + 8, val);
  });
  buf.set(enc.encode(names), shstrOff);
  sections.forEach(([name, type, flags, addr, offset, sz, link, align], i) => {
    const at = shoff + i * 64;
    v.setUint32(at, name!, true);
    v.setUint32(at + 4, type!, true);
    put(at + 8, flags!);
    put(at + 16, addr!);
    put(at + 24, offset!);
    put(at + 32, sz!);
    v.setUint32(at + 40, link!, true);
    put(at + 48, align!);
    if (type === 6) put(at + 56, 16);
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
