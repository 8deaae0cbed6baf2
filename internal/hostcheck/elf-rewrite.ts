// Gives an ELF executable a loader and a library folder of its own: its program interpreter
// (PT_INTERP, the loader the kernel starts) becomes `interpreter` and its dynamic section gets a
// DT_RPATH of `runPath`, so the node binary runs with the loader and C library installed beside
// it whatever the host carries. Pure: bytes in, bytes out, the same output for the same input.
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
// with its own interpreter and run path gives back the input exactly; anything else is left as
// it is and a new segment is added.

import { ElfError } from "./elf.ts";

export interface ElfRewriteOptions {
  /** The loader's absolute path, as the kernel will open it (up to 4095 bytes). */
  interpreter: string;
  /** One absolute folder, searched first for every library (DT_RPATH). */
  runPath: string;
}

export interface ElfRewrite {
  bytes: Uint8Array;
  /** The PT_LOAD segment the rewrite added: its file offset, address and size in bytes. */
  segment: { offset: number; vaddr: number; size: number };
  /** True when the input carried this rewrite's segment already and it was replaced. */
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
  /** The file bytes kept as they are, but for the header fields and section headers patched. */
  head: Uint8Array;
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
  interpreter: string;
  /** The DT_RPATH or DT_RUNPATH entry's string: its offset in .dynstr and its text. */
  rpath?: { tag: bigint; offset: number; value: string };
  /** e_phoff. */
  phoff: number;
}

const enc = new TextEncoder();
const dec = new TextDecoder();
const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

/** Rewrites `input` (an ELF64 little-endian x86-64 or aarch64 executable); refuses what it does not understand. */
export function buildElfRewrite(input: Uint8Array, opts: ElfRewriteOptions): ElfRewrite {
  checkPath(opts.interpreter, "interpreter", INTERP_MAX - 1);
  checkPath(opts.runPath, "run path", INTERP_MAX - 1);
  if (opts.runPath.includes(":")) {
    throw new ElfError(`run path ${JSON.stringify(opts.runPath)}: a ':' would split it in two`);
  }
  if (opts.runPath.includes("$")) {
    throw new ElfError(`run path ${JSON.stringify(opts.runPath)}: the loader expands '$' ($ORIGIN, $LIB, $PLATFORM)`);
  }
  const parsed = parseForRewrite(input);
  const own = ownSegment(input, parsed);
  const out = layout(own ?? parsed, opts.interpreter, opts.runPath);
  return { ...out, replaced: own !== undefined };
}

function checkPath(path: string, what: string, max: number): void {
  if (!path.startsWith("/")) throw new ElfError(`${what} ${JSON.stringify(path)}: not an absolute path`);
  if (path.includes("\0")) throw new ElfError(`${what} ${JSON.stringify(path)}: holds a NUL byte`);
  const bytes = enc.encode(path).length;
  if (bytes > max) throw new ElfError(`${what} of ${bytes} bytes: at most ${max}`);
}

function parseForRewrite(input: Uint8Array): Parsed {
  const size = input.length;
  // Copies, not views: a Node Buffer's slice() is a view into a pooled buffer.
  const copy = (from: number, to: number) => new Uint8Array(input.subarray(from, to));
  const view = new DataView(input.buffer, input.byteOffset, input.byteLength);
  const need = (offset: number, length: number, what: string) => {
    if (offset < 0 || length < 0 || offset + length > size) {
      throw new ElfError(`truncated: ${what} (${length} bytes at ${offset}) past the end of the file (${size} bytes)`);
    }
  };
  const u64 = (at: number, what: string): number => {
    const n = view.getBigUint64(at, true);
    if (n > BigInt(Number.MAX_SAFE_INTEGER)) throw new ElfError(`${what} out of range: ${n}`);
    return Number(n);
  };

  if (size < 16 || input[0] !== 0x7f || input[1] !== 0x45 || input[2] !== 0x4c || input[3] !== 0x46) {
    throw new ElfError("not an ELF file");
  }
  if (input[4] === 1) throw new ElfError("a 32-bit ELF file (ELFCLASS32): only 64-bit executables are rewritten");
  if (input[4] !== 2) throw new ElfError(`unknown ELF class ${input[4]}`);
  if (input[5] === 2) throw new ElfError("a big-endian ELF file: only little-endian executables are rewritten");
  if (input[5] !== 1) throw new ElfError(`unknown ELF byte order ${input[5]}`);
  need(0, 64, "the ELF header");
  const type = view.getUint16(16, true);
  const machine = view.getUint16(18, true);
  if (type !== ET_EXEC && type !== ET_DYN) throw new ElfError(`ELF type ${type}: not an executable`);
  if (PAGE[machine] === undefined) {
    throw new ElfError(`machine ${machine}: only x86-64 and aarch64 executables are rewritten`);
  }
  const phoff = u64(32, "e_phoff");
  const shoff = u64(40, "e_shoff");
  const phentsize = view.getUint16(54, true);
  const phnum = view.getUint16(56, true);
  const shentsize = view.getUint16(58, true);
  let shnum = view.getUint16(60, true);
  if (phnum === 0 || phnum === 0xffff) throw new ElfError(`${phnum} program headers`);
  if (phentsize !== PHENT) throw new ElfError(`program header entries of ${phentsize} bytes`);
  need(phoff, phnum * PHENT, "the program headers");

  const phdrs: Phdr[] = [];
  for (let i = 0; i < phnum; i++) {
    const at = phoff + i * PHENT;
    phdrs.push({
      type: view.getUint32(at, true),
      offset: u64(at + 8, "p_offset"),
      vaddr: u64(at + 16, "p_vaddr"),
      filesz: u64(at + 32, "p_filesz"),
      memsz: u64(at + 40, "p_memsz"),
      align: u64(at + 48, "p_align"),
      raw: copy(at, at + PHENT),
    });
  }
  const one = (t: number, name: string, missing: string): Phdr => {
    const found = phdrs.filter((p) => p.type === t);
    if (found.length === 0) throw new ElfError(`no ${name}: ${missing}`);
    if (found.length > 1) throw new ElfError(`${found.length} ${name} entries`);
    return found[0]!;
  };
  const interp = one(PT_INTERP, "PT_INTERP",
    "a statically linked executable or a shared library has no loader to replace");
  const dynamic = one(PT_DYNAMIC, "PT_DYNAMIC", "a statically linked executable has no libraries to look for");
  one(PT_PHDR, "PT_PHDR", "the loader could not find the program headers once they move");
  const loads = phdrs.filter((p) => p.type === PT_LOAD);
  if (loads.length === 0) throw new ElfError("no PT_LOAD segment");
  for (const [i, l] of loads.entries()) {
    need(l.offset, l.filesz, "a PT_LOAD segment");
    if (l.filesz > l.memsz) throw new ElfError("a PT_LOAD segment larger in the file than in memory");
    if (i > 0 && l.vaddr < loads[i - 1]!.vaddr + loads[i - 1]!.memsz) {
      throw new ElfError("PT_LOAD segments out of address order or overlapping");
    }
  }

  need(interp.offset, interp.filesz, "the interpreter");
  const interpBytes = input.subarray(interp.offset, interp.offset + interp.filesz);
  const nul = interpBytes.indexOf(0);
  if (nul < 0) throw new ElfError("an interpreter path without its NUL");
  const interpreter = dec.decode(interpBytes.subarray(0, nul));

  need(dynamic.offset, dynamic.filesz, "the dynamic section");
  const dyn: Dyn[] = [];
  let ended = false;
  for (let at = dynamic.offset; at + DYNENT <= dynamic.offset + dynamic.filesz; at += DYNENT) {
    const tag = view.getBigInt64(at, true);
    if (tag === DT_NULL) {
      ended = true;
      break;
    }
    dyn.push({ tag, raw: copy(at, at + DYNENT) });
  }
  if (!ended) throw new ElfError("a dynamic section without DT_NULL");
  const value = (d: Dyn, what: string): number => {
    const n = new DataView(d.raw.buffer).getBigUint64(8, true);
    if (n > BigInt(Number.MAX_SAFE_INTEGER)) throw new ElfError(`${what} out of range: ${n}`);
    return Number(n);
  };
  const strtabEntry = dyn.find((d) => d.tag === DT_STRTAB);
  const strszEntry = dyn.find((d) => d.tag === DT_STRSZ);
  if (!strtabEntry || !strszEntry) throw new ElfError("a dynamic section without DT_STRTAB and DT_STRSZ");
  const strtab = value(strtabEntry, "DT_STRTAB");
  const strsz = value(strszEntry, "DT_STRSZ");
  const seg = loads.find((l) => strtab >= l.vaddr && strtab + strsz <= l.vaddr + l.filesz);
  if (!seg) throw new ElfError("the dynamic string table is in no loaded segment");
  const dynstr = copy(seg.offset + (strtab - seg.vaddr), seg.offset + (strtab - seg.vaddr) + strsz);
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
  if (shoff !== 0) {
    if (shentsize !== SHENT) throw new ElfError(`section header entries of ${shentsize} bytes`);
    need(shoff, SHENT, "the section headers");
    if (shnum === 0) shnum = u64(shoff + 32, "the section count");
    need(shoff, shnum * SHENT, "the section headers");
    for (let i = 1; i < shnum; i++) {
      const at = shoff + i * SHENT;
      const stype = view.getUint32(at + 4, true);
      const addr = u64(at + 16, "sh_addr");
      const offset = u64(at + 24, "sh_offset");
      const ssize = u64(at + 32, "sh_size");
      if (stype === SHT_NOBITS || ssize === 0) continue;
      if (stype === SHT_DYNAMIC && addr === dynamic.vaddr) sections.dynamic ??= i;
      else if (stype === SHT_STRTAB && addr === strtab) sections.dynstr ??= i;
      else if (addr === interp.vaddr && offset === interp.offset && ssize === interp.filesz) sections.interp ??= i;
    }
  }
  if (shoff === 0) shnum = 0;
  return {
    machine, head: input, phdrs, dyn, dynstr, shoff, shnum, sections, interpreter, ...(rpath ? { rpath } : {}), phoff,
  };
}

/** The input without this rewrite's segment, when the input carries one (see the top). */
function ownSegment(input: Uint8Array, p: Parsed): Base | undefined {
  const loads = p.phdrs.filter((x) => x.type === PT_LOAD);
  const last = loads.at(-1)!;
  const phdr = p.phdrs.find((x) => x.type === PT_PHDR)!;
  if (!p.rpath || p.rpath.tag !== DT_RPATH || loads.length < 2) return undefined;
  if (p.rpath.offset + enc.encode(p.rpath.value).length + 1 !== p.dynstr.length) return undefined;
  if (p.phoff !== last.offset || phdr.offset !== last.offset) return undefined;
  if (last.offset + last.filesz !== input.length || last.filesz !== last.memsz) return undefined;
  if (loads.some((l) => l !== last && l.offset + l.filesz > last.offset)) return undefined;
  if (p.shoff + p.shnum * SHENT > last.offset) return undefined;
  const base: Base = {
    machine: p.machine,
    head: input.subarray(0, last.offset),
    phdrs: p.phdrs.filter((x) => x !== last),
    dyn: p.dyn,
    dynstr: p.dynstr.subarray(0, p.rpath.offset),
    shoff: p.shoff,
    shnum: p.shnum,
    sections: p.sections,
  };
  try {
    return equalBytes(layout(base, p.interpreter, p.rpath.value).bytes, input) ? base : undefined;
  } catch (e) {
    if (e instanceof ElfError) return undefined;
    throw e;
  }
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  // Four bytes at a time where both views allow it: a Bun binary is about 100 MB.
  let i = 0;
  if (a.byteOffset % 4 === 0 && b.byteOffset % 4 === 0) {
    const words = a.length >>> 2;
    const x = new Int32Array(a.buffer, a.byteOffset, words);
    const y = new Int32Array(b.buffer, b.byteOffset, words);
    for (; i < words; i++) if (x[i] !== y[i]) return false;
    i = words * 4;
  }
  for (; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

function layout(base: Base, interpreter: string, runPath: string): Omit<ElfRewrite, "replaced"> {
  const loads = base.phdrs.filter((x) => x.type === PT_LOAD);
  const page = Math.max(PAGE[base.machine]!, ...loads.map((l) => l.align));
  const first = loads[0]!;
  const delta = first.vaddr - first.offset;
  if (delta < 0 || delta % page !== 0) {
    throw new ElfError(
      `the first PT_LOAD maps offset ${first.offset} at ${first.vaddr}: not a whole number of pages apart`);
  }
  const memEnd = Math.max(...loads.map((l) => l.vaddr + l.memsz));
  const offset = alignUp(Math.max(base.head.length, memEnd - delta), page);
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

  const out = new Uint8Array(offset + size);
  out.set(base.head);
  const v = new DataView(out.buffer);
  const put64 = (pos: number, n: number | bigint) => v.setBigUint64(pos, BigInt(n), true);
  put64(32, offset); // e_phoff
  v.setUint16(56, phnum, true);

  // Program headers: the kept ones in order, the moved ones pointing into the segment, and the
  // new PT_LOAD after the last PT_LOAD (PT_LOAD entries stay in address order).
  const lastLoad = base.phdrs.lastIndexOf(loads.at(-1)!);
  const place = (pos: number, raw: Uint8Array, within?: { at: number; size: number }) => {
    out.set(raw, pos);
    if (!within) return;
    put64(pos + 8, offset + within.at);
    put64(pos + 16, vaddr + within.at);
    put64(pos + 24, vaddr + within.at);
    put64(pos + 32, within.size);
    put64(pos + 40, within.size);
  };
  let pos = offset;
  for (const [i, ph] of base.phdrs.entries()) {
    const within = ph.type === PT_PHDR ? { at: 0, size: phnum * PHENT }
      : ph.type === PT_INTERP ? { at: interpAt, size: interpBytes.length }
      : ph.type === PT_DYNAMIC ? { at: dynAt, size: dynSize }
      : undefined;
    place(pos, ph.raw, within);
    pos += PHENT;
    if (i !== lastLoad) continue;
    const load = new Uint8Array(PHENT);
    const lv = new DataView(load.buffer);
    lv.setUint32(0, PT_LOAD, true);
    lv.setUint32(4, PF_R | PF_W, true);
    lv.setBigUint64(48, BigInt(page), true);
    place(pos, load, { at: 0, size });
    pos += PHENT;
  }

  out.set(interpBytes, offset + interpAt);
  out.set(base.dynstr, offset + strAt);
  out.set(pathBytes, offset + strAt + rpathOffset);
  for (const [i, d] of dyn.entries()) {
    const p = offset + dynAt + i * DYNENT;
    out.set(d.raw, p);
    if (d === rpathEntry) {
      put64(p, DT_RPATH);
      put64(p + 8, rpathOffset);
    } else if (d.tag === DT_STRTAB) put64(p + 8, vaddr + strAt);
    else if (d.tag === DT_STRSZ) put64(p + 8, strsz);
  }
  // (the DT_NULL entry after them is zeros already)

  const section = (index: number | undefined, at: number, length: number) => {
    if (index === undefined) return;
    const sh = base.shoff + index * SHENT;
    put64(sh + 16, vaddr + at);
    put64(sh + 24, offset + at);
    put64(sh + 32, length);
  };
  section(base.sections.interp, interpAt, interpBytes.length);
  section(base.sections.dynstr, strAt, strsz);
  section(base.sections.dynamic, dynAt, dynSize);
  return { bytes: out, segment: { offset, vaddr, size } };
}
