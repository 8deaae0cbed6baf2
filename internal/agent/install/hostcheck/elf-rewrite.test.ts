// The ELF rewrite on small executables laid out as a linker lays them out (test/support/
// elf-builder.ts): what the loader and the kernel read afterwards, what stays byte for byte,
// the same output for the same input, a rewritten file rewritten again, and what it refuses.
// The compiled node binary, run with a private loader, is test/agent/elf-rewrite.test.ts.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ExecutableSpec, makeExecutable } from "../../../../test/support/elf-builder.ts";
import { parseElf } from "./elf.ts";
import { applyElfRewrite, buildElfRewrite, planElfRewrite } from "./elf-rewrite.ts";

const X86 = 62;
const ARM = 183;
const LOADER = "/lib64/ld-linux-x86-64.so.2";
const PRIVATE = "/opt/cni/bin/meshcni.d";
const opts = { interpreter: `${PRIVATE}/ld-linux-x86-64.so.2`, runPath: PRIVATE };

interface Ph {
  type: number;
  flags: number;
  offset: number;
  vaddr: number;
  filesz: number;
  memsz: number;
  align: number;
}

/** The program headers, read here without the code under test. */
function programHeaders(b: Uint8Array): { phoff: number; list: Ph[] } {
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const n = (at: number) => Number(v.getBigUint64(at, true));
  const phoff = n(32);
  const list = Array.from({ length: v.getUint16(56, true) }, (_, i) => {
    const at = phoff + i * 56;
    return {
      type: v.getUint32(at, true),
      flags: v.getUint32(at + 4, true),
      offset: n(at + 8),
      vaddr: n(at + 16),
      filesz: n(at + 32),
      memsz: n(at + 40),
      align: n(at + 48),
    };
  });
  return { phoff, list };
}

/** The dynamic entries [tag, value] up to DT_NULL, read through PT_DYNAMIC. */
function dynamicEntries(b: Uint8Array): [number, number][] {
  const dyn = programHeaders(b).list.find((p) => p.type === 2)!;
  const v = new DataView(b.buffer, b.byteOffset, b.byteLength);
  const out: [number, number][] = [];
  for (let at = dyn.offset; at < dyn.offset + dyn.filesz; at += 16) {
    const tag = Number(v.getBigInt64(at, true));
    if (tag === 0) break;
    out.push([tag, Number(v.getBigUint64(at + 8, true))]);
  }
  return out;
}

const info = (b: Uint8Array) => parseElf((o, n) => b.subarray(o, o + n), b.length);
const exe = (spec: ExecutableSpec = {}) =>
  makeExecutable({ interpreter: LOADER, needed: ["libc.so.6", "libm.so.6"], ...spec });

describe("a rewritten executable", () => {
  test("names the new loader and searches the run path, libraries unchanged", () => {
    for (const spec of [{}, { runpath: "/usr/local/lib" }, { runpath: "/usr/local/lib", rpathTag: 15 as const }]) {
      const out = buildElfRewrite(exe(spec), opts).bytes;
      expect(info(out)).toEqual({
        bits: 64,
        littleEndian: true,
        machine: X86,
        interpreter: opts.interpreter,
        needed: ["libc.so.6", "libm.so.6"],
        runpath: [PRIVATE],
      });
      const tags = dynamicEntries(out).map(([t]) => t);
      expect(tags.filter((t) => t === 15)).toHaveLength(1); // one DT_RPATH
      expect(tags).not.toContain(29); // and no DT_RUNPATH, which would make the loader ignore it
      expect(tags.slice(0, 3)).toEqual([1, 1, 15]); // after the DT_NEEDED entries
    }
  });

  test("keeps every byte of the input but the header's program header fields and three section headers", () => {
    const input = exe({ runpath: "/usr/local/lib", bss: 0x3000 });
    const out = buildElfRewrite(input, opts).bytes;
    const v = new DataView(input.buffer);
    const shoff = Number(v.getBigUint64(40, true));
    // e_phoff, e_phnum, and sh_addr/sh_offset/sh_size of sections 1-3 (.interp, .dynstr, .dynamic)
    const allowed = new Set<number>();
    const range = (from: number, n: number) => Array.from({ length: n }, (_, i) => allowed.add(from + i));
    range(32, 8);
    range(56, 2);
    for (const s of [1, 2, 3]) range(shoff + s * 64 + 16, 24);
    const changed = [...input.keys()].filter((i) => input[i] !== out[i]);
    expect(changed.length).toBeGreaterThan(0);
    expect(changed.filter((i) => !allowed.has(i))).toEqual([]);
  });

  test("adds one read-write PT_LOAD past the file and past all memory, mapped where the kernel puts AT_PHDR", () => {
    for (const [machine, page] of [
      [X86, 0x1000],
      [ARM, 0x10000],
    ] as const) {
      for (const type of [2, 3] as const) {
        const input = exe({ machine, type, bss: 0x23456 });
        const before = programHeaders(input).list;
        const { bytes: out, segment } = buildElfRewrite(input, opts);
        const { phoff, list } = programHeaders(out);
        expect(list).toHaveLength(before.length + 1);
        const loads = list.filter((p) => p.type === 1);
        const added = loads.at(-1)!;
        expect(loads.slice(0, -1)).toEqual(before.filter((p) => p.type === 1));
        expect(added).toEqual({
          type: 1,
          flags: 6,
          offset: segment.offset,
          vaddr: segment.vaddr,
          filesz: segment.size,
          memsz: segment.size,
          align: page,
        });
        expect(segment.offset % page).toBe(0);
        expect(segment.offset).toBeGreaterThanOrEqual(input.length);
        expect(segment.offset + segment.size).toBe(out.length);
        const memEnd = Math.max(...before.filter((p) => p.type === 1).map((p) => p.vaddr + p.memsz));
        expect(segment.vaddr).toBeGreaterThanOrEqual(Math.ceil(memEnd / page) * page);
        // PT_LOAD entries in address order, the new one last in the table among them
        expect(loads.map((l) => l.vaddr)).toEqual([...loads.map((l) => l.vaddr)].sort((a, b) => a - b));
        // AT_PHDR: before Linux 5.18, first PT_LOAD's p_vaddr - p_offset + e_phoff; since, the PT_LOAD
        // holding e_phoff. Both must be PT_PHDR's p_vaddr (ld.so takes its load bias from it).
        const phdr = list.find((p) => p.type === 6)!;
        const old = loads[0]!.vaddr - loads[0]!.offset + phoff;
        const holder = loads.find((l) => l.offset <= phoff && phoff < l.offset + l.filesz)!;
        expect(phdr).toMatchObject({ offset: phoff, vaddr: old, filesz: list.length * 56 });
        expect(holder.vaddr + (phoff - holder.offset)).toBe(old);
        expect(list[0]!.type).toBe(6); // PT_PHDR and PT_INTERP still before any PT_LOAD
        expect(list[1]!.type).toBe(3);
        // the interpreter, .dynstr (DT_STRTAB) and .dynamic inside the added segment
        const inside = (vaddr: number, size: number) =>
          vaddr >= added.vaddr && vaddr + size <= added.vaddr + added.filesz;
        const interp = list.find((p) => p.type === 3)!;
        const dyn = list.find((p) => p.type === 2)!;
        const strtab = dynamicEntries(out).find(([t]) => t === 5)![1];
        const strsz = dynamicEntries(out).find(([t]) => t === 10)![1];
        expect([inside(interp.vaddr, interp.filesz), inside(dyn.vaddr, dyn.filesz), inside(strtab, strsz)]).toEqual([
          true,
          true,
          true,
        ]);
        expect(info(out).interpreter).toBe(opts.interpreter);
      }
    }
  });

  test("an interpreter path of any length up to the kernel's 4095 bytes", () => {
    for (const len of [1, 27, 28, 200, 1000, 4095]) {
      const interpreter = `/${"x".repeat(len - 1)}`;
      const out = buildElfRewrite(exe(), { interpreter, runPath: "/r" }).bytes;
      expect(info(out).interpreter).toBe(interpreter);
      const interp = programHeaders(out).list.find((p) => p.type === 3)!;
      expect(interp.filesz).toBe(len + 1); // the kernel wants the NUL at p_filesz - 1
    }
    expect(() => buildElfRewrite(exe(), { interpreter: `/${"x".repeat(4095)}`, runPath: "/r" })).toThrow(
      "interpreter of 4096 bytes: at most 4095",
    );
  });

  test("readelf reads it without a warning", () => {
    const dir = mkdtempSync(join(tmpdir(), "meshcni-elf-"));
    try {
      const file = join(dir, "exe");
      writeFileSync(file, buildElfRewrite(exe({ runpath: "/usr/local/lib", bss: 0x3000 }), opts).bytes);
      const r = Bun.spawnSync(["readelf", "-lSdW", file], { stdout: "pipe", stderr: "pipe" });
      expect(r.stderr.toString()).toBe("");
      expect(r.exitCode).toBe(0);
      const text = r.stdout.toString();
      expect(text).toContain(`[Requesting program interpreter: ${opts.interpreter}]`);
      expect(text).toContain(`Library rpath: [${PRIVATE}]`);
      expect(text).not.toContain("runpath");
      // the section headers follow what moved: .interp, .dynstr and .dynamic in the new segment
      const mapping = text.slice(text.indexOf("Section to Segment mapping"));
      expect(mapping).toMatch(/\n\s+\d+\s+\.interp \.dynstr \.dynamic \n/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("the plan", () => {
  test("reads a few ranges and writes a few, in order, the input's bytes kept before them", () => {
    const input = exe({ runpath: "/usr/local/lib", bss: 0x3000 });
    const reads: [number, number][] = [];
    const plan = planElfRewrite(
      (o, n) => {
        reads.push([o, n]);
        return input.subarray(o, o + n);
      },
      input.length,
      opts,
    );
    expect(reads.length).toBeLessThan(12);
    expect(plan.keep).toBe(input.length);
    const ends = plan.writes.map((w) => [w.offset, w.offset + w.bytes.length]);
    for (let i = 1; i < ends.length; i++) expect(ends[i]![0]!).toBeGreaterThanOrEqual(ends[i - 1]![1]!);
    expect(ends.at(-1)).toEqual([plan.segment.offset, plan.size]);
    expect(Bun.deepEquals(applyElfRewrite(input, plan), buildElfRewrite(input, opts).bytes)).toBe(true);
  });

  test("a short read is a truncated file, not a wrong one", () => {
    const input = exe();
    const short = (o: number, n: number) => input.subarray(o, o + Math.min(n, 100));
    expect(() => planElfRewrite(short, input.length, opts)).toThrow("truncated: a short read");
  });
});

describe("rewriting again", () => {
  test("the same input gives the same bytes", () => {
    const input = exe({ runpath: "/usr/local/lib", bss: 0x3000 });
    const a = buildElfRewrite(input, opts).bytes;
    const b = buildElfRewrite(new Uint8Array(input), opts).bytes;
    expect(Bun.deepEquals(a, b)).toBe(true);
  });

  test("rewritten again to another path: the segment is replaced, as if the original were rewritten", () => {
    for (const spec of [{}, { runpath: "/usr/local/lib" }, { spareDynamic: 3 }, { machine: ARM, type: 3 as const }]) {
      const input = exe(spec);
      const long = { interpreter: `/${"a".repeat(300)}/ld.so`, runPath: `/${"a".repeat(300)}` };
      const once = buildElfRewrite(input, long);
      expect(once.replaced).toBe(false);
      const other = { interpreter: "/b/ld.so", runPath: "/b" };
      const twice = buildElfRewrite(once.bytes, other);
      expect(twice.replaced).toBe(true);
      expect(Bun.deepEquals(twice.bytes, buildElfRewrite(input, other).bytes)).toBe(true);
      expect(programHeaders(twice.bytes).list).toHaveLength(programHeaders(once.bytes).list.length);
      // and the same paths again change nothing
      expect(Bun.deepEquals(buildElfRewrite(once.bytes, long).bytes, once.bytes)).toBe(true);
    }
  });

  test("a last segment that is not exactly this rewrite's is kept, and another is added after it", () => {
    const once = buildElfRewrite(exe(), opts).bytes;
    // one more byte in the segment, as another tool might have put there
    const grown = new Uint8Array(once.length + 1);
    grown.set(once);
    grown[once.length] = 0x5a;
    const { phoff, list } = programHeaders(once);
    const lastLoad = phoff + list.findLastIndex((p) => p.type === 1) * 56;
    const v = new DataView(grown.buffer);
    v.setBigUint64(lastLoad + 32, v.getBigUint64(lastLoad + 32, true) + 1n, true);
    v.setBigUint64(lastLoad + 40, v.getBigUint64(lastLoad + 40, true) + 1n, true);
    const again = buildElfRewrite(grown, { interpreter: "/b/ld.so", runPath: "/b" });
    expect(again.replaced).toBe(false);
    expect(again.segment.offset).toBeGreaterThanOrEqual(grown.length);
    expect(again.bytes[once.length]).toBe(0x5a);
    expect(programHeaders(again.bytes).list).toHaveLength(list.length + 1);
    expect(info(again.bytes)).toMatchObject({ interpreter: "/b/ld.so", runpath: ["/b"] });
  });
});

describe("refused", () => {
  const base = exe();
  const patched = (at: number, byte: number) => {
    const b = new Uint8Array(base);
    b[at] = byte;
    return b;
  };
  test.each([
    ["text", new TextEncoder().encode("#!/bin/sh\n"), "not an ELF file"],
    ["ELF32", patched(4, 1), "a 32-bit ELF file (ELFCLASS32): only 64-bit executables are rewritten"],
    ["big endian", patched(5, 2), "a big-endian ELF file: only little-endian executables are rewritten"],
    ["a relocatable object", patched(16, 1), "ELF type 1: not an executable"],
    ["i386", exe({ machine: 3 }), "machine 3: only x86-64 and aarch64 executables are rewritten"],
    ["riscv", exe({ machine: 243 }), "machine 243: only x86-64 and aarch64 executables are rewritten"],
    ["static", makeExecutable({ needed: [] }), "no PT_INTERP: a statically linked executable or a shared library"],
    ["no dynamic section", exe({ noDynamic: true }), "no PT_DYNAMIC: a statically linked executable"],
    ["no PT_PHDR", exe({ noPhdr: true }), "no PT_PHDR"],
    ["truncated", base.subarray(0, 200), "truncated"],
  ])("%s", (_, bytes, message) => {
    expect(() => buildElfRewrite(bytes, opts)).toThrow(message);
  });

  test.each([
    [{ interpreter: "lib/ld.so", runPath: "/r" }, 'interpreter "lib/ld.so": not an absolute path'],
    [{ interpreter: "/a\0b", runPath: "/r" }, "holds a NUL byte"],
    [{ interpreter: "/l", runPath: "r" }, 'run path "r": not an absolute path'],
    [{ interpreter: "/l", runPath: "/a:/b" }, "a ':' would split it in two"],
    [{ interpreter: "/l", runPath: "/$ORIGIN/lib" }, "the loader expands '$'"],
    [{ interpreter: "/l", runPath: "$ORIGIN/a/$LIB" }, "anywhere but a leading $ORIGIN"],
    [{ interpreter: "/l", runPath: "$ORIGINlib" }, 'run path "$ORIGINlib": not an absolute path'],
  ])("paths %j", (o, message) => {
    expect(() => buildElfRewrite(base, o)).toThrow(message);
  });

  test("but a run path below the executable's own folder ($ORIGIN/...) is taken", () => {
    const r = buildElfRewrite(base, { interpreter: "/opt/cni:bin/meshcni.d/x/ld.so", runPath: "$ORIGIN/meshcni.d/x" });
    expect(new TextDecoder().decode(r.bytes)).toContain("$ORIGIN/meshcni.d/x\0");
  });
});
