// Holds a character loop to the RegExp it replaces (the plugin's hot path checks text with loops:
// a fresh process compiles each RegExp on its first use). The strings the two disagree on, so a
// test can expect none.

export interface Agreement {
  /** Characters for the exhaustive part: every string of up to `depth` of them is tried. */
  alphabet: readonly string[];
  /** How long the exhaustive strings get (4 unless told). */
  depth?: number;
  /** Characters the RegExp accepts, mostly used for the random strings so they get long. */
  valid: string;
  /**
   * Lengths the RegExp bounds (e.g. 1 and 29 for {0,28} after one character): random strings are
   * tried one either side.
   */
  bounds: readonly number[];
  seed?: number;
}

/** Calls `visit` with every string of 1 to `depth` characters over `alphabet` (not the empty one). */
export function everyString(alphabet: readonly string[], depth: number, visit: (s: string) => void): void {
  let level = [""];
  for (let n = 0; n < depth; n++) {
    const next: string[] = [];
    for (const p of level) for (const c of alphabet) next.push(p + c);
    for (const s of next) visit(s);
    level = next;
  }
}

/**
 * A seeded generator: `rnd(n)` is 0 to n-1. 32-bit arithmetic (Math.imul) and the high bits: a
 * float product past 2^53 loses the low bits, and an LCG's low bits cycle, so the "random"
 * strings once collapsed to a few dozen.
 */
export function seededRandom(seed: number): (n: number) => number {
  let x = seed;
  return (n) => {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    return (x >>> 16) % n;
  };
}

/** The strings (at most 20) on which `loop(s)` and `re.test(s)` differ. */
export function disagreements(loop: (s: string) => boolean, re: RegExp, o: Agreement): string[] {
  if (re.global || re.sticky) throw new Error("a global or sticky RegExp keeps state between tests");
  const out: string[] = [];
  const agree = (s: string) => {
    if (out.length < 20 && loop(s) !== re.test(s)) out.push(s);
  };
  // Every string of up to `depth` characters over the alphabet.
  agree("");
  everyString(o.alphabet, o.depth ?? 4, agree);
  // Every UTF-16 code unit alone, first, last and in the middle of valid text.
  const v = o.valid[0]!;
  for (let code = 0; code <= 0xffff; code++) {
    const c = String.fromCharCode(code);
    agree(c);
    agree(v + c);
    agree(c + v);
    agree(v + c + v);
  }
  // Seeded random strings, short and one either side of each bound, mostly of valid characters.
  const rnd = seededRandom(o.seed ?? 7);
  for (let i = 0; i < 6000; i++) {
    const b = o.bounds[rnd(o.bounds.length)]!;
    const len = rnd(3) === 0 ? rnd(12) : Math.max(0, b - 1 + rnd(3));
    let s = "";
    for (let j = 0; j < len; j++)
      s += rnd(len + 4) === 0 ? o.alphabet[rnd(o.alphabet.length)] : o.valid[rnd(o.valid.length)];
    agree(s);
  }
  return out;
}
