// A small seeded PRNG (sfc32, seeded through splitmix32) so that every fuzz case is a pure
// function of (seed, case index): `bun run fuzz --seed N --case K` rebuilds case K exactly.

export interface Rng {
  /** A float in [0, 1). */
  next(): number;
  /** An integer in [0, n). */
  int(n: number): number;
  /** An integer in [lo, hi] (both included). */
  range(lo: number, hi: number): number;
  pick<T>(items: readonly T[]): T;
  chance(p: number): boolean;
  shuffle<T>(items: readonly T[]): T[];
}

function splitmix32(state: number): () => number {
  let s = state >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

export function createRng(seed: number): Rng {
  const init = splitmix32(seed);
  let a = init(),
    b = init(),
    c = init(),
    d = init();
  const u32 = (): number => {
    const t = (((a + b) >>> 0) + d) >>> 0;
    d = (d + 1) >>> 0;
    a = b ^ (b >>> 9);
    b = (c + (c << 3)) >>> 0;
    c = ((c << 21) | (c >>> 11)) >>> 0;
    c = (c + t) >>> 0;
    return t;
  };
  for (let i = 0; i < 12; i++) u32();
  const rng: Rng = {
    next: () => u32() / 4294967296,
    int: (n) => Math.floor(rng.next() * n),
    range: (lo, hi) => lo + rng.int(hi - lo + 1),
    pick: (items) => {
      if (items.length === 0) throw new Error("pick from an empty list");
      return items[rng.int(items.length)]!;
    },
    chance: (p) => rng.next() < p,
    shuffle: (items) => {
      const out = [...items];
      for (let i = out.length - 1; i > 0; i--) {
        const j = rng.int(i + 1);
        [out[i], out[j]] = [out[j]!, out[i]!];
      }
      return out;
    },
  };
  return rng;
}

/** The seed of case `index` of a run seeded with `seed`. */
export function caseSeed(seed: number, index: number): number {
  const mix = splitmix32((seed >>> 0) ^ Math.imul(index + 1, 0x27d4eb2d));
  mix();
  return mix();
}
