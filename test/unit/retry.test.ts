import { describe, expect, it } from 'vitest';
import { DecorrelatedJitter, ExponentialBackoff, FixedInterval, type RetryContext } from '../../src/index.js';

const ctx = (attempt: number, previousDelayMs: number | null = null): RetryContext => ({
  attempt,
  elapsedMs: 0,
  lastError: null,
  previousDelayMs,
});

/** A deterministic [0, 1) source (mulberry32). */
function seeded(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('ExponentialBackoff', () => {
  it('defaults: 1 s doubling, capped at 30 s', () => {
    const b = new ExponentialBackoff();
    expect([1, 2, 3, 4, 5, 6, 7, 20].map((n) => b.nextDelayMs(ctx(n)))).toEqual([
      1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000,
    ]);
  });
  it('custom base, multiplier and cap', () => {
    const b = new ExponentialBackoff({ baseMs: 10, maxMs: 100, multiplier: 3 });
    expect([1, 2, 3, 4].map((n) => b.nextDelayMs(ctx(n)))).toEqual([10, 30, 90, 100]);
  });
  it('rejects bad options naming the option and value', () => {
    expect(() => new ExponentialBackoff({ baseMs: -1 })).toThrow(/ExponentialBackoff.baseMs.*-1/);
    expect(() => new ExponentialBackoff({ multiplier: 0.5 })).toThrow(/multiplier.*0.5/);
    expect(() => new ExponentialBackoff({ baseMs: 10, maxMs: 5 })).toThrow(RangeError);
  });
});

describe('FixedInterval', () => {
  it('defaults to 5 s, always', () => {
    const f = new FixedInterval();
    expect([1, 2, 50].map(() => f.nextDelayMs())).toEqual([5000, 5000, 5000]);
    expect(new FixedInterval({ intervalMs: 7 }).nextDelayMs()).toBe(7);
  });
  it('rejects a non-finite interval', () => {
    expect(() => new FixedInterval({ intervalMs: Number.POSITIVE_INFINITY })).toThrow(/intervalMs.*Infinity/);
  });
});

describe('DecorrelatedJitter', () => {
  it('stays within [base, min(max, prev * 3)] over many draws (seeded)', () => {
    const j = new DecorrelatedJitter({ baseMs: 100, maxMs: 5000, random: seeded(42) });
    let prev: number | null = null;
    for (let n = 1; n <= 1000; n++) {
      const d = j.nextDelayMs(ctx(n, prev));
      const upper = Math.min(5000, Math.max(100, (prev ?? 100) * 3));
      expect(d).toBeGreaterThanOrEqual(100);
      expect(d).toBeLessThanOrEqual(upper);
      prev = d;
    }
  });
  it('is deterministic with the same seed and spans the range at the extremes', () => {
    const a = new DecorrelatedJitter({ random: seeded(7) });
    const b = new DecorrelatedJitter({ random: seeded(7) });
    expect([1, 2, 3].map((n) => a.nextDelayMs(ctx(n, 1000)))).toEqual(
      [1, 2, 3].map((n) => b.nextDelayMs(ctx(n, 1000))),
    );
    expect(new DecorrelatedJitter({ random: () => 0 }).nextDelayMs(ctx(1, 10_000))).toBe(1000);
    expect(new DecorrelatedJitter({ random: () => 0.999999 }).nextDelayMs(ctx(1, 20_000))).toBe(30_000);
  });
  it('rejects a non-function random source', () => {
    expect(() => new DecorrelatedJitter({ random: 4 as unknown as () => number })).toThrow(TypeError);
  });
});
