/**
 * The simulation's one random source: mulberry32, a 32-bit generator small enough to read.
 * Every choice of a run (delays, which event goes next, faults and when, the library's own
 * jitter and tokens through its `random` option) is drawn from one of these, seeded by the
 * scenario's seed, so a run is a pure function of its seed.
 */
export class Random {
  private s: number;

  constructor(seed: number) {
    this.s = seed >>> 0;
  }

  /** [0, 1). */
  next(): number {
    this.s = (this.s + 0x6d2b79f5) >>> 0;
    let t = this.s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }

  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  /** A float in [lo, hi). */
  between(lo: number, hi: number): number {
    return lo + this.next() * (hi - lo);
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  pick<T>(items: readonly T[]): T {
    const item = items[Math.floor(this.next() * items.length)];
    if (item === undefined) throw new Error('pick from an empty list');
    return item;
  }

  /** A generator of its own, seeded from this one (a stream per purpose keeps runs comparable). */
  fork(): Random {
    return new Random(Math.floor(this.next() * 4294967296));
  }
}
