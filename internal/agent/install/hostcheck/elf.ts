// What an ELF executable or shared library asks of the system that runs it: its machine and
// class, its program interpreter (PT_INTERP, the loader the kernel starts) and the libraries it
// names (DT_NEEDED), with DT_RUNPATH/DT_RPATH. Pure: the file is read through `read`, only the
// few ranges needed (the header, the program headers, the interpreter, the dynamic section and
// the strings it points at), so a 100 MB Bun binary costs a few reads.

export type ReadAt = (offset: number, length: number) => Uint8Array;

export interface ElfInfo {
  bits: 32 | 64;
  littleEndian: boolean;
  /** e_machine: 62 x86-64, 183 aarch64, 3 i386, 40 arm. */
  machine: number;
  interpreter?: string;
  needed: string[];
  runpath: string[];
}

export class ElfError extends Error {}

export const MACHINES: Record<number, string> = {
  3: "i386",
  40: "arm",
  62: "x86-64",
  183: "aarch64",
  243: "riscv",
  21: "ppc64",
  22: "s390",
};
export const machineName = (m: number) => MACHINES[m] ?? `machine ${m}`;

const PT_LOAD = 1;
const PT_DYNAMIC = 2;
const PT_INTERP = 3;
const DT_NULL = 0;
const DT_NEEDED = 1;
const DT_STRTAB = 5;
const DT_STRSZ = 10;
const DT_RPATH = 15;
const DT_RUNPATH = 29;

/** True when the bytes start like an ELF file. */
export function isElf(head: Uint8Array): boolean {
  return head.length >= 4 && head[0] === 0x7f && head[1] === 0x45 && head[2] === 0x4c && head[3] === 0x46;
}

export function parseElf(read: ReadAt, size: number): ElfInfo {
  const ident = read(0, 16);
  if (!isElf(ident)) throw new ElfError("not an ELF file");
  const cls = ident[4];
  const data = ident[5];
  if (cls !== 1 && cls !== 2) throw new ElfError(`unknown ELF class ${cls}`);
  if (data !== 1 && data !== 2) throw new ElfError(`unknown ELF byte order ${data}`);
  const bits = cls === 2 ? 64 : 32;
  const le = data === 1;
  const view = (offset: number, length: number): DataView => {
    if (offset < 0 || length < 0 || offset + length > size)
      throw new ElfError(`truncated: ${length} bytes at ${offset} are past the end (${size} bytes)`);
    const b = read(offset, length);
    if (b.length < length) throw new ElfError(`truncated: short read at ${offset}`);
    return new DataView(b.buffer, b.byteOffset, b.byteLength);
  };
  const word = (v: DataView, at: number, wide: boolean): number => {
    if (!wide) return v.getUint32(at, le);
    const n = v.getBigUint64(at, le);
    if (n > BigInt(Number.MAX_SAFE_INTEGER)) throw new ElfError("offset out of range");
    return Number(n);
  };
  const wide = bits === 64;
  const hdr = view(0, wide ? 64 : 52);
  const machine = hdr.getUint16(18, le);
  const phoff = word(hdr, wide ? 32 : 28, wide);
  const phentsize = hdr.getUint16(wide ? 54 : 42, le);
  const phnum = hdr.getUint16(wide ? 56 : 44, le);
  if (phnum > 0 && phentsize < (wide ? 56 : 32)) throw new ElfError(`program header entries of ${phentsize} bytes`);

  const loads: { vaddr: number; offset: number; filesz: number }[] = [];
  let interp: { offset: number; size: number } | undefined;
  let dynamic: { offset: number; size: number } | undefined;
  const ph = phnum > 0 ? view(phoff, phnum * phentsize) : undefined;
  for (let i = 0; ph && i < phnum; i++) {
    const at = i * phentsize;
    const type = ph.getUint32(at, le);
    const offset = wide ? word(ph, at + 8, true) : ph.getUint32(at + 4, le);
    const vaddr = wide ? word(ph, at + 16, true) : ph.getUint32(at + 8, le);
    const filesz = wide ? word(ph, at + 32, true) : ph.getUint32(at + 16, le);
    if (type === PT_LOAD) loads.push({ vaddr, offset, filesz });
    else if (type === PT_INTERP) interp = { offset, size: filesz };
    else if (type === PT_DYNAMIC) dynamic = { offset, size: filesz };
  }

  const cstring = (bytes: Uint8Array): string => {
    const end = bytes.indexOf(0);
    return new TextDecoder().decode(end >= 0 ? bytes.subarray(0, end) : bytes);
  };
  const info: ElfInfo = { bits, littleEndian: le, machine, needed: [], runpath: [] };
  if (interp) {
    if (interp.size > 4096) throw new ElfError(`an interpreter path of ${interp.size} bytes`);
    const v = view(interp.offset, interp.size);
    info.interpreter = cstring(new Uint8Array(v.buffer, v.byteOffset, v.byteLength));
  }
  if (!dynamic) return info;

  const entsize = wide ? 16 : 8;
  const dyn = view(dynamic.offset, Math.floor(dynamic.size / entsize) * entsize);
  const entries: [tag: number, value: number][] = [];
  for (let at = 0; at + entsize <= dyn.byteLength; at += entsize) {
    const tag = wide ? Number(dyn.getBigInt64(at, le)) : dyn.getInt32(at, le);
    if (tag === DT_NULL) break;
    entries.push([tag, word(dyn, at + entsize / 2, wide)]);
  }
  const strtabAddr = entries.find(([t]) => t === DT_STRTAB)?.[1];
  const strsz = entries.find(([t]) => t === DT_STRSZ)?.[1];
  const named = entries.filter(([t]) => t === DT_NEEDED || t === DT_RPATH || t === DT_RUNPATH);
  if (named.length === 0) return info;
  if (strtabAddr === undefined || strsz === undefined) throw new ElfError("a dynamic section without a string table");
  const seg = loads.find((l) => strtabAddr >= l.vaddr && strtabAddr < l.vaddr + l.filesz);
  if (!seg) throw new ElfError("the string table is in no loaded segment");
  const strv = view(seg.offset + (strtabAddr - seg.vaddr), strsz);
  const strtab = new Uint8Array(strv.buffer, strv.byteOffset, strv.byteLength);
  const str = (off: number) => {
    if (off >= strtab.length) throw new ElfError(`a string at ${off} past the string table`);
    return cstring(strtab.subarray(off));
  };
  for (const [tag, value] of named) {
    if (tag === DT_NEEDED) info.needed.push(str(value));
    else
      info.runpath.push(
        ...str(value)
          .split(":")
          .filter((p) => p !== ""),
      );
  }
  return info;
}
