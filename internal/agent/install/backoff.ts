// When something keeps taking meshcni's entry out of a file (a CNI agent that owns the folder,
// such as Cilium with cni.exclusive=true), re-chaining at once every time would make the two
// fight forever. Re-chains beyond a budget wait longer and longer, until the file has been
// left alone for a while. Pure: the caller passes the clock.

export interface BackoffOptions {
  /** Re-chains of one file allowed within `windowMs` before backing off. */
  budget: number;
  windowMs: number;
  /** First wait once backing off; each further re-chain doubles it, up to maxMs. */
  baseMs: number;
  maxMs: number;
  /** A file left alone this long starts afresh. */
  quietMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = {
  budget: 40,
  windowMs: 5_000,
  baseMs: 100,
  maxMs: 10_000,
  quietMs: 30_000,
};

export interface RechainVerdict {
  /** Wait this long before the next re-chain of the file. */
  delayMs: number;
  /** True when this re-chain started backing off (log a warning once). */
  startedBackoff: boolean;
}

interface FileHistory {
  times: number[];
  level: number;
  last: number;
}

export class RechainBackoff {
  private readonly files = new Map<string, FileHistory>();
  constructor(private readonly opts: BackoffOptions = DEFAULT_BACKOFF) {}

  /** Notes a re-chain of `file` at `now` (ms). */
  note(file: string, now: number): RechainVerdict {
    let h = this.files.get(file);
    if (!h || now - h.last >= this.opts.quietMs) h = { times: [], level: 0, last: now };
    this.files.set(file, h);
    h.last = now;
    h.times = h.times.filter((t) => now - t < this.opts.windowMs);
    h.times.push(now);
    let startedBackoff = false;
    if (h.level > 0) h.level++;
    else if (h.times.length > this.opts.budget) {
      h.level = 1;
      startedBackoff = true;
    }
    return { delayMs: this.delay(h), startedBackoff };
  }

  /** How long a re-chain of `file` must still wait at `now`. */
  waitFor(file: string, now: number): number {
    const h = this.files.get(file);
    if (!h || h.level === 0) return 0;
    if (now - h.last >= this.opts.quietMs) return 0;
    return Math.max(0, h.last + this.delay(h) - now);
  }

  private delay(h: FileHistory): number {
    return h.level === 0 ? 0 : Math.min(this.opts.maxMs, this.opts.baseMs * 2 ** (h.level - 1));
  }
}
