// Gives an ELF executable a loader and a library folder of its own: its program interpreter
// (PT_INTERP, the loader the kernel starts) becomes `interpreter` and its dynamic section gets a
// DT_RPATH of `runPath`, so the node binary runs with the loader and C library installed beside
// it whatever the host carries. Pure, and the same output for the same input.
//
// planElfRewrite reads only the few ranges it needs through `read` (the headers, the interpreter,
// .dynamic, .dynstr, the section headers) and answers what to write: keep the input's first
// `keep` bytes, write a handful of ranges, end at `size`. So the agent can copy a 100 MB
// binary and patch the copy without holding it in memory; buildElfRewrite applies the plan to
// bytes in memory.
//
// DT_RPATH, not DT_RUNPATH: glibc's loader searches DT_RPATH before LD_LIBRARY_PATH, and
// DT_RUNPATH after it, so with DT_RUNPATH a LD_LIBRARY_PATH in the runtime's environment would
// bring the host's libc back. Both come before ld.so.cache and the default folders. An
// executable's DT_RPATH also serves the libraries it loads that have no DT_RUNPATH of their own.
// A DT_RUNPATH the input had is dropped (the loader ignores DT_RPATH when both are there).
//
// Layout. No byte of the input moves: a Bun executable finds its program through a pointer
// (the BUN_COMPILED symbol) to an absolute address inside its read-write PT_LOAD, so its
// segments must keep their file offsets and addresses. Bun's binary has no room in place (no
// DT_RPATH to overwrite, no spare slot in .dynamic, the program headers followed by .interp), so
// the rewrite does what patchelf does for executables: it appends one PT_LOAD segment, page
// aligned, past the end of the file and past every existing segment's memory, holding
//   [program header table (the old entries + the new PT_LOAD)][interpreter][.dynstr][.dynamic]
// - .dynstr is the old table with the run path appended, so every old string offset (symbol
//   names, DT_NEEDED, version needs) stays valid; DT_STRTAB and DT_STRSZ point at the copy;
// - .dynamic is the old entries with DT_RPATH added after the DT_NEEDED ones; the segment is
//   read-write because the loader writes into .dynamic (DT_DEBUG, and relocated d_ptr values);
// - e_phoff, PT_PHDR, PT_INTERP and PT_DYNAMIC point into the segment, and the section headers
//   of .interp, .dynstr and .dynamic too, so readelf and objdump read what the loader reads;
// - the segment's address minus its file offset equals the first PT_LOAD's: kernels before 5.18
//   compute AT_PHDR as (first PT_LOAD's p_vaddr - p_offset) + e_phoff, later ones from the
//   PT_LOAD holding e_phoff; both then agree with PT_PHDR, from which ld.so derives the load bias.
// The old program headers, .interp and .dynamic stay where they were, unreferenced.
//
// An input that already carries this rewrite's segment (the last PT_LOAD, at the end of the
// file, holding the program headers, the interpreter, .dynstr ending in the run path, and
// .dynamic) gets that segment replaced, not a second one: the result is byte for byte what
// rewriting the original gives. The segment counts as this rewrite's only when rebuilding it
// with its own interpreter and run path gives back the input exactly (every byte the plan
// writes is already there, and the file ends where the plan ends); anything else is left as it
// is and a new segment is added.

import { ElfError, type ReadAt } from "./elf.ts";

export interface ElfRewriteOptions {
  /** The loader's absolute path, as the kernel will open it (up to 4095 bytes). */
  interpreter: string;
  /**
   * One absolute folder, searched first for every library (DT_RPATH); or `$ORIGIN/` and a path
   * below the executable's own folder (the loader puts the folder it was started from there),
   * for a folder whose absolute name a run path cannot hold (a ':' or a '$' in it).
   */
  runPath: string;
}

/** The one expansion a run path may carry: the executable's folder, at its start. */
export const ORIGIN = "$ORIGIN";

/** The rewritten file: the input's first `keep` bytes, zeros up to `size`, then `writes` over them. */
export interface ElfRewritePlan {
  keep: number;
  size: number;
  /** In increasing offset order, not overlapping. */
  writes: { offset: number; bytes: Uint8Array }[];
  /** The PT_LOAD segment the rewrite adds: its file offset, address and size in bytes. */
  segment: { offset: number; vaddr: number; size: number };
  /** True when the input carried this rewrite's segment already and it is replaced. */
  replaced: boolean;
}

export interface ElfRewrite {
  bytes: Uint8Array;
  segment: ElfRewritePlan["segment"];
  replaced: boolean;
}

const EM_X86_64 = 62;
const EM_AARCH64 = 183;
/** The largest page size each machine's kernels use: segments are aligned to it. */
const PAGE: Record<number, number> = { [EM_X86_64]: 0x1000, [EM_AARCH64]: 0x10000 };
const ET_EXEC = 2;
const ET_DYN = 3;
const PHENT = 56;
const SHENT = 64;
const DYNENT = 16;
const PT_LOAD = 1;
const PT_DYNAMIC = 2;
const PT_INTERP = 3;
const PT_PHDR = 6;
const PF_W = 2;
const PF_R = 4;
const DT_NULL = 0n;
const DT_NEEDED = 1n;
const DT_STRTAB = 5n;
const DT_STRSZ = 10n;
const DT_RPATH = 15n;
const DT_RUNPATH = 29n;
const SHT_STRTAB = 3;
const SHT_DYNAMIC = 6;
const SHT_NOBITS = 8;
/** The kernel refuses a longer PT_INTERP (PATH_MAX, with its NUL). */
const INTERP_MAX = 4096;
/** The most of .dynstr read (Bun's is 23 KB). */
const DYNSTR_MAX = 16 << 20;

interface Phdr {
  type: number;
  offset: number;
  vaddr: number;
  filesz: number;
  memsz: number;
  align: number;
  /** The entry as the input has it (flags, paddr and the rest are kept from here). */
  raw: Uint8Array;
}

interface Dyn {
  tag: bigint;
  raw: Uint8Array;
}

/** What the rewrite builds from: the bytes kept and the tables it writes anew. */
interface Base {
  machine: number;
  /** The input's first `keep` bytes stay, but for the header fields and section headers patched. */
  keep: number;
  /** The program headers kept, in order (the added PT_LOAD goes after the last PT_LOAD). */
  phdrs: Phdr[];
  /** The dynamic entries before DT_NULL. */
  dyn: Dyn[];
  dynstr: Uint8Array;
  /** e_shoff, the number of section headers, and the indexes of those that name what moves. */
  shoff: number;
  shnum: number;
  sections: { interp?: number; dynstr?: number; dynamic?: number };
}

interface Parsed extends Base {
  size: number;
  interpreter: string;
  /** The DT_RPATH or DT_RUNPATH entry's string: its offset in .dynstr and its text. */
  rpath?: { tag: bigint; offset: number; value: string };
  /** e_phoff. */
  phoff: number;
}

const enc = new TextEncoder();
const dec = new TextDecoder();
const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

/**
 * The rewrite of the ELF file of `size` bytes that `read` reads (an ELF64 little-endian x86-64 or
 * aarch64 executable); refuses, with an ElfError saying why, what it does not understand.
 */
export function planElfRewrite(read: ReadAt, size: number, opts: ElfRewriteOptions): ElfRewritePlan {
  checkPath(opts.interpreter, "interpreter", INTERP_MAX - 1);
  const below = opts.runPath.startsWith(`${ORIGIN}/`) ? opts.runPath.slice(ORIGIN.length) : opts.runPath;
  checkPath(below, "run path", INTERP_MAX - 1 - (opts.runPath.length - below.length));
  if (opts.runPath.includes(":")) {
    throw new ElfError(`run path ${JSON.stringify(opts.runPath)}: a ':' would split it in two`);
  }
  if (below.includes("$")) {
    throw new ElfError(
      `run path ${JSON.stringify(opts.runPath)}: the loader expands '$' ($ORIGIN, $LIB, $PLATFORM) ` +
        "anywhere but a leading $ORIGIN",
    );
  }
  const parsed = parseForRewrite(read, size);
  const own = ownSegment(read, parsed);
  return { ...layout(own ?? parsed, opts.interpreter, opts.runPath), replaced: own !== undefined };
}

/** `input` rewritten (see planElfRewrite). */
export function buildElfRewrite(input: Uint8Array, opts: ElfRewriteOptions): ElfRewrite {
  const plan = planElfRewrite((o, n) => input.subarray(o, o + n), input.length, opts);
  return { bytes: applyElfRewrite(input, plan), segment: plan.segment, replaced: plan.replaced };
}

/** The bytes `plan` describes, from the input it was planned on. */
export function applyElfRewrite(input: Uint8Array, plan: ElfRewritePlan): Uint8Array {
  const out = new Uint8Array(plan.size);
  out.set(input.subarray(0, plan.keep));
  for (const w of plan.writes) out.set(w.bytes, w.offset);
  return out;
}

function checkPath(path: string, what: string, max: number): void {
  if (!path.startsWith("/")) throw new ElfError(`${what} ${JSON.stringify(path)}: not an absolute path`);
  if (path.includes("\0")) throw new ElfError(`${what} ${JSON.stringify(path)}: holds a NUL byte`);
  const bytes = enc.encode(path).length;
  if (bytes > max) throw new ElfError(`${what} of ${bytes} bytes: at most ${max}`);
}

function parseForRewrite(read: ReadAt, size: number): Parsed {
  // Copies: a reader may hand out views of a buffer it reuses (a Node Buffer's pool, too).
  const bytes = (offset: number, length: number, what: string): Uint8Array => {
    if (offset < 0 || length < 0 || offset + length > size) {
      throw new ElfError(`truncated: ${what} (${length} bytes at ${offset}) past the end of the file (${size} bytes)`);
    }
    const b = read(offset, length);
    if (b.length < length) throw new ElfError(`truncated: a short read of ${what} at ${offset}`);
    return new Uint8Array(b.subarray(0, length));
  };
  const viewOf = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset, b.byteLength);
  const u64 = (v: DataView, at: number, what: string): number => {
    const n = v.getBigUint64(at, true);
    if (n > BigInt(Number.MAX_SAFE_INTEGER)) throw new ElfError(`${what} out of range: ${n}`);
    return Number(n);
  };

  const ident = read(0, Math.min(16, size));
  if (ident.length < 16 || ident[0] !== 0x7f || ident[1] !== 0x45 || ident[2] !== 0x4c || ident[3] !== 0x46) {
    throw new ElfError("not an ELF file");
  }
  if (ident[4] === 1) throw new ElfError("a 32-bit ELF file (ELFCLASS32): only 64-bit executables are rewritten");
  if (ident[4] !== 2) throw new ElfError(`unknown ELF class ${ident[4]}`);
  if (ident[5] === 2) throw new ElfError("a big-endian ELF file: only little-endian executables are rewritten");
  if (ident[5] !== 1) throw new ElfError(`unknown ELF byte order ${ident[5]}`);
  const eh = viewOf(bytes(0, 64, "the ELF header"));
  const type = eh.getUint16(16, true);
  const machine = eh.getUint16(18, true);
  if (type !== ET_EXEC && type !== ET_DYN) throw new ElfError(`ELF type ${type}: not an executable`);
  if (PAGE[machine] === undefined) {
    throw new ElfError(`machine ${machine}: only x86-64 and aarch64 executables are rewritten`);
  }
  const phoff = u64(eh, 32, "e_phoff");
  const shoff = u64(eh, 40, "e_shoff");
  const phentsize = eh.getUint16(54, true);
  const phnum = eh.getUint16(56, true);
  const shentsize = eh.getUint16(58, true);
  let shnum = eh.getUint16(60, true);
  if (phnum === 0 || phnum === 0xffff) throw new ElfError(`${phnum} program headers`);
  if (phentsize !== PHENT) throw new ElfError(`program header entries of ${phentsize} bytes`);

  const table = bytes(phoff, phnum * PHENT, "the program headers");
  const tv = viewOf(table);
  const phdrs: Phdr[] = [];
  for (let i = 0; i < phnum; i++) {
    const at = i * PHENT;
    phdrs.push({
      type: tv.getUint32(at, true),
      offset: u64(tv, at + 8, "p_offset"),
      vaddr: u64(tv, at + 16, "p_vaddr"),
      filesz: u64(tv, at + 32, "p_filesz"),
      memsz: u64(tv, at + 40, "p_memsz"),
      align: u64(tv, at + 48, "p_align"),
      raw: table.slice(at, at + PHENT),
    });
  }
  const one = (t: number, name: string, missing: string): Phdr => {
    const found = phdrs.filter((p) => p.type === t);
    if (found.length === 0) throw new ElfError(`no ${name}: ${missing}`);
    if (found.length > 1) throw new ElfError(`${found.length} ${name} entries`);
    return found[0]!;
  };
  const interp = one(
    PT_INTERP,
    "PT_INTERP",
    "a statically linked executable or a shared library has no loader to replace",
  );
  const dynamic = one(PT_DYNAMIC, "PT_DYNAMIC", "a statically linked executable has no libraries to look for");
  one(PT_PHDR, "PT_PHDR", "the loader could not find the program headers once they move");
  const loads = phdrs.filter((p) => p.type === PT_LOAD);
  if (loads.length === 0) throw new ElfError("no PT_LOAD segment");
  for (const [i, l] of loads.entries()) {
    if (l.offset + l.filesz > size) throw new ElfError("truncated: a PT_LOAD segment past the end of the file");
    if (l.filesz > l.memsz) throw new ElfError("a PT_LOAD segment larger in the file than in memory");
    if (i > 0 && l.vaddr < loads[i - 1]!.vaddr + loads[i - 1]!.memsz) {
      throw new ElfError("PT_LOAD segments out of address order or overlapping");
    }
  }

  if (interp.filesz > INTERP_MAX) throw new ElfError(`an interpreter path of ${interp.filesz} bytes`);
  const interpBytes = bytes(interp.offset, interp.filesz, "the interpreter");
  const nul = interpBytes.indexOf(0);
  if (nul < 0) throw new ElfError("an interpreter path without its NUL");
  const interpreter = dec.decode(interpBytes.subarray(0, nul));

  const dynBytes = bytes(dynamic.offset, Math.floor(dynamic.filesz / DYNENT) * DYNENT, "the dynamic section");
  const dyn: Dyn[] = [];
  let ended = false;
  for (let at = 0; at + DYNENT <= dynBytes.length; at += DYNENT) {
    const tag = viewOf(dynBytes).getBigInt64(at, true);
    if (tag === DT_NULL) {
      ended = true;
      break;
    }
    dyn.push({ tag, raw: dynBytes.slice(at, at + DYNENT) });
  }
  if (!ended) throw new ElfError("a dynamic section without DT_NULL");
  const value = (d: Dyn, what: string) => u64(viewOf(d.raw), 8, what);
  const strtabEntry = dyn.find((d) => d.tag === DT_STRTAB);
  const strszEntry = dyn.find((d) => d.tag === DT_STRSZ);
  if (!strtabEntry || !strszEntry) throw new ElfError("a dynamic section without DT_STRTAB and DT_STRSZ");
  const strtab = value(strtabEntry, "DT_STRTAB");
  const strsz = value(strszEntry, "DT_STRSZ");
  if (strsz > DYNSTR_MAX) throw new ElfError(`a dynamic string table of ${strsz} bytes`);
  const seg = loads.find((l) => strtab >= l.vaddr && strtab + strsz <= l.vaddr + l.filesz);
  if (!seg) throw new ElfError("the dynamic string table is in no loaded segment");
  const dynstr = bytes(seg.offset + (strtab - seg.vaddr), strsz, "the dynamic string table");
  const pathEntry = dyn.find((d) => d.tag === DT_RPATH || d.tag === DT_RUNPATH);
  let rpath: Parsed["rpath"];
  if (pathEntry) {
    const offset = value(pathEntry, "DT_RPATH");
    const end = offset < dynstr.length ? dynstr.indexOf(0, offset) : -1;
    if (end < 0) throw new ElfError("a run path past the dynamic string table");
    rpath = { tag: pathEntry.tag, offset, value: dec.decode(dynstr.subarray(offset, end)) };
  }

  // Section headers are optional (the loader never reads them); when present, the ones that
  // name the interpreter, the dynamic strings and the dynamic section follow them.
  const sections: Base["sections"] = {};
  if (shoff === 0) shnum = 0;
  else {
    if (shentsize !== SHENT) throw new ElfError(`section header entries of ${shentsize} bytes`);
    if (shoff < 64) throw new ElfError(`section headers at ${shoff}, inside the ELF header`);
    if (shnum === 0) shnum = u64(viewOf(bytes(shoff, SHENT, "the section headers")), 32, "the section count");
    if (shnum > 0xffffff) throw new ElfError(`${shnum} section headers`);
    const sv = viewOf(bytes(shoff, shnum * SHENT, "the section headers"));
    for (let i = 1; i < shnum; i++) {
      const at = i * SHENT;
      const stype = sv.getUint32(at + 4, true);
      const addr = u64(sv, at + 16, "sh_addr");
      const offset = u64(sv, at + 24, "sh_offset");
      const ssize = u64(sv, at + 32, "sh_size");
      if (stype === SHT_NOBITS || ssize === 0) continue;
      if (stype === SHT_DYNAMIC && addr === dynamic.vaddr) sections.dynamic ??= i;
      else if (stype === SHT_STRTAB && addr === strtab) sections.dynstr ??= i;
      else if (addr === interp.vaddr && offset === interp.offset && ssize === interp.filesz) sections.interp ??= i;
    }
  }
  return {
    machine,
    keep: size,
    size,
    phdrs,
    dyn,
    dynstr,
    shoff,
    shnum,
    sections,
    interpreter,
    phoff,
    ...(rpath ? { rpath } : {}),
  };
}

/** The input without this rewrite's segment, when the input carries one (see the top). */
function ownSegment(read: ReadAt, p: Parsed): Base | undefined {
  const loads = p.phdrs.filter((x) => x.type === PT_LOAD);
  const last = loads.at(-1)!;
  const phdr = p.phdrs.find((x) => x.type === PT_PHDR)!;
  if (!p.rpath || p.rpath.tag !== DT_RPATH || loads.length < 2) return undefined;
  if (p.rpath.offset + enc.encode(p.rpath.value).length + 1 !== p.dynstr.length) return undefined;
  if (p.phoff !== last.offset || phdr.offset !== last.offset) return undefined;
  if (last.offset + last.filesz !== p.size || last.filesz !== last.memsz) return undefined;
  if (loads.some((l) => l !== last && l.offset + l.filesz > last.offset)) return undefined;
  if (p.shoff + p.shnum * SHENT > last.offset) return undefined;
  const base: Base = {
    machine: p.machine,
    keep: last.offset,
    phdrs: p.phdrs.filter((x) => x !== last),
    dyn: p.dyn,
    dynstr: p.dynstr.subarray(0, p.rpath.offset),
    shoff: p.shoff,
    shnum: p.shnum,
    sections: p.sections,
  };
  let again: ReturnType<typeof layout>;
  try {
    again = layout(base, p.interpreter, p.rpath.value);
  } catch (e) {
    if (e instanceof ElfError) return undefined;
    throw e;
  }
  // Rebuilt on the kept bytes, the file must come out as it is: same end, same bytes written.
  if (again.size !== p.size || again.segment.offset !== last.offset) return undefined;
  for (const w of again.writes) {
    if (!equalBytes(read(w.offset, w.bytes.length), w.bytes)) return undefined;
  }
  return base;
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function layout(base: Base, interpreter: string, runPath: string): Omit<ElfRewritePlan, "replaced"> {
  const loads = base.phdrs.filter((x) => x.type === PT_LOAD);
  const page = Math.max(PAGE[base.machine]!, ...loads.map((l) => l.align));
  const first = loads[0]!;
  const delta = first.vaddr - first.offset;
  if (delta < 0 || delta % page !== 0) {
    throw new ElfError(
      `the first PT_LOAD maps offset ${first.offset} at ${first.vaddr}: not a whole number of pages apart`,
    );
  }
  const memEnd = Math.max(...loads.map((l) => l.vaddr + l.memsz));
  const offset = alignUp(Math.max(base.keep, memEnd - delta), page);
  const vaddr = delta + offset;

  const phnum = base.phdrs.length + 1;
  if (phnum >= 0xffff) throw new ElfError(`${phnum} program headers`);
  const interpBytes = enc.encode(`${interpreter}\0`);
  const pathBytes = enc.encode(`${runPath}\0`);
  const rpathOffset = base.dynstr.length;
  const strsz = base.dynstr.length + pathBytes.length;
  const kept = base.dyn.filter((d) => d.tag !== DT_RPATH && d.tag !== DT_RUNPATH);
  const at = kept.findLastIndex((d) => d.tag === DT_NEEDED) + 1;
  const rpathEntry = { tag: DT_RPATH, raw: new Uint8Array(DYNENT) };
  const dyn = [...kept.slice(0, at), rpathEntry, ...kept.slice(at)];

  const interpAt = phnum * PHENT;
  const strAt = interpAt + interpBytes.length;
  const dynAt = alignUp(strAt + strsz, 8);
  const dynSize = (dyn.length + 1) * DYNENT;
  const size = dynAt + dynSize;

  const seg = new Uint8Array(size);
  const sv = new DataView(seg.buffer);
  const put64 = (v: DataView, pos: number, n: number | bigint) => v.setBigUint64(pos, BigInt(n), true);

  // Program headers: the kept ones in order, the moved ones pointing into the segment, and the
  // new PT_LOAD after the last PT_LOAD (PT_LOAD entries stay in address order).
  const lastLoad = base.phdrs.lastIndexOf(loads.at(-1)!);
  const place = (pos: number, raw: Uint8Array, within?: { at: number; size: number }) => {
    seg.set(raw, pos);
    if (!within) return;
    put64(sv, pos + 8, offset + within.at);
    put64(sv, pos + 16, vaddr + within.at);
    put64(sv, pos + 24, vaddr + within.at);
    put64(sv, pos + 32, within.size);
    put64(sv, pos + 40, within.size);
  };
  let pos = 0;
  for (const [i, ph] of base.phdrs.entries()) {
    const within =
      ph.type === PT_PHDR
        ? { at: 0, size: phnum * PHENT }
        : ph.type === PT_INTERP
          ? { at: interpAt, size: interpBytes.length }
          : ph.type === PT_DYNAMIC
            ? { at: dynAt, size: dynSize }
            : undefined;
    place(pos, ph.raw, within);
    pos += PHENT;
    if (i !== lastLoad) continue;
    const load = new Uint8Array(PHENT);
    const lv = new DataView(load.buffer);
    lv.setUint32(0, PT_LOAD, true);
    lv.setUint32(4, PF_R | PF_W, true);
    put64(lv, 48, page);
    place(pos, load, { at: 0, size });
    pos += PHENT;
  }

  seg.set(interpBytes, interpAt);
  seg.set(base.dynstr, strAt);
  seg.set(pathBytes, strAt + rpathOffset);
  for (const [i, d] of dyn.entries()) {
    const p = dynAt + i * DYNENT;
    seg.set(d.raw, p);
    if (d === rpathEntry) {
      put64(sv, p, DT_RPATH);
      put64(sv, p + 8, rpathOffset);
    } else if (d.tag === DT_STRTAB) put64(sv, p + 8, vaddr + strAt);
    else if (d.tag === DT_STRSZ) put64(sv, p + 8, strsz);
  }
  // (the DT_NULL entry after them is zeros already)

  const writes: ElfRewritePlan["writes"] = [];
  const field = (at: number, length: number, fill: (v: DataView) => void) => {
    const b = new Uint8Array(length);
    fill(new DataView(b.buffer));
    writes.push({ offset: at, bytes: b });
  };
  field(32, 8, (v) => put64(v, 0, offset)); // e_phoff
  field(56, 2, (v) => v.setUint16(0, phnum, true)); // e_phnum
  const moved: [index: number | undefined, at: number, length: number][] = [
    [base.sections.interp, interpAt, interpBytes.length],
    [base.sections.dynstr, strAt, strsz],
    [base.sections.dynamic, dynAt, dynSize],
  ];
  for (const [index, at, length] of moved.filter(([i]) => i !== undefined).sort((a, b) => a[0]! - b[0]!)) {
    field(base.shoff + index! * SHENT + 16, 24, (v) => {
      // sh_addr, sh_offset, sh_size
      put64(v, 0, vaddr + at);
      put64(v, 8, offset + at);
      put64(v, 16, length);
    });
  }
  writes.push({ offset, bytes: seg });
  return { keep: base.keep, size: offset + size, writes, segment: { offset, vaddr, size } };
}
