// glibc's /etc/ld.so.cache (written by ldconfig): where the loader finds a library by name
// before it looks in its default folders. Pure: parses the bytes of the file. Only the format
// glibc has written since 2.32 ("glibc-ld.so.cache1.1", possibly after an old "ld.so-1.7.0"
// part); anything else yields no entries, and the caller falls back to the default folders.

export interface CacheEntry {
  name: string;
  path: string;
}

const NEW_MAGIC = "glibc-ld.so.cache1.1";
const OLD_MAGIC = "ld.so-1.7.0";
const NEW_HEADER = 48;
const NEW_ENTRY = 24;

export function parseLdCache(bytes: Uint8Array): CacheEntry[] {
  const ascii = (at: number, n: number) => String.fromCharCode(...bytes.subarray(at, at + n));
  let base = 0;
  if (ascii(0, OLD_MAGIC.length) === OLD_MAGIC && bytes.length >= 16) {
    const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const nOld = dv.getUint32(12, true);
    base = 16 + nOld * 12;
    base = (base + 7) & ~7;
  }
  if (base + NEW_HEADER > bytes.length || ascii(base, NEW_MAGIC.length) !== NEW_MAGIC) return [];
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const nlibs = dv.getUint32(base + 20, true);
  const str = (off: number): string | undefined => {
    const at = base + off;
    if (off <= 0 || at >= bytes.length) return undefined;
    const end = bytes.indexOf(0, at);
    return new TextDecoder().decode(bytes.subarray(at, end < 0 ? bytes.length : end));
  };
  const out: CacheEntry[] = [];
  for (let i = 0; i < nlibs; i++) {
    const at = base + NEW_HEADER + i * NEW_ENTRY;
    if (at + NEW_ENTRY > bytes.length) break;
    const name = str(dv.getUint32(at + 4, true));
    const path = str(dv.getUint32(at + 8, true));
    if (name && path?.startsWith("/")) out.push({ name, path });
  }
  return out;
}
