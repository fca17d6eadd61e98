import { describe, expect, it } from 'vitest';
import { RetryCycle } from '../../src/core/retry.js';
import {
  ConnectionError,
  DecorrelatedJitter,
  ExponentialBackoff,
  FixedInterval,
  type RetryContext,
} from '../../src/index.js';

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
  it('defaults: 100 ms doubling, capped at 30 s, each delay drawn from [d/2, d] (jitter 0.5)', () => {
    const at = (r: number) => new ExponentialBackoff({ random: () => r });
    const d = [100, 200, 400, 800, 1600, 3200, 6400, 12_800, 25_600, 30_000, 30_000];
    const n = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20];
    expect(n.map((a) => at(0).nextDelayMs(ctx(a)))).toEqual(d);
    expect(n.map((a) => at(0.5).nextDelayMs(ctx(a)))).toEqual(d.map((x) => x * 0.75));
    const top = n.map((a) => at(1 - 1e-12).nextDelayMs(ctx(a)));
    top.forEach((x, i) => {
      expect(x).toBeGreaterThanOrEqual((d[i] as number) / 2);
      expect(x).toBeLessThan((d[i] as number) / 2 + 1e-6);
    });
  });
  it('the default source is Math.random: 1,000 first delays spread over [50, 100], none outside', () => {
    const b = new ExponentialBackoff();
    const draws = Array.from({ length: 1000 }, () => b.nextDelayMs(ctx(1)));
    expect(Math.min(...draws)).toBeGreaterThanOrEqual(50);
    expect(Math.max(...draws)).toBeLessThanOrEqual(100);
    expect(Math.max(...draws) - Math.min(...draws)).toBeGreaterThan(40);
    expect(new Set(draws).size).toBeGreaterThan(900);
  });
  it('jitter 0: the exact delays (custom base, multiplier and cap)', () => {
    const b = new ExponentialBackoff({ baseMs: 10, maxMs: 100, multiplier: 3, jitter: 0 });
    expect([1, 2, 3, 4].map((n) => b.nextDelayMs(ctx(n)))).toEqual([10, 30, 90, 100]);
  });
  it('jitter 1: anywhere in [0, d]; a seeded source replays the same delays', () => {
    const a = new ExponentialBackoff({ jitter: 1, random: seeded(7) });
    const b = new ExponentialBackoff({ jitter: 1, random: seeded(7) });
    const da = [1, 2, 3, 4, 5].map((n) => a.nextDelayMs(ctx(n)));
    expect([1, 2, 3, 4, 5].map((n) => b.nextDelayMs(ctx(n)))).toEqual(da);
    da.forEach((x, i) => {
      expect(x).toBeGreaterThanOrEqual(0);
      expect(x).toBeLessThanOrEqual(1000 * 2 ** i);
    });
  });
  it('while the server is away (refused, reset, starting up or shutting down, class 08) the delay stops growing at outageMaxMs (1 s); other errors grow to maxMs', () => {
    const b = new ExponentialBackoff({ jitter: 0 });
    const n = [1, 2, 3, 4, 5, 6, 7, 8, 12];
    const delays = (lastError: Error | null) =>
      n.map((attempt) => b.nextDelayMs({ ...ctx(attempt), lastError }));
    const coded = (code: string) => Object.assign(new Error(code), { code });
    const away = [100, 200, 400, 800, 1000, 1000, 1000, 1000, 1000];
    expect(delays(coded('ECONNREFUSED'))).toEqual(away);
    // the lock wraps the driver's error: the cause chain is read
    expect(delays(new ConnectionError('could not connect', { cause: coded('ECONNRESET') }))).toEqual(away);
    for (const code of ['57P01', '57P02', '57P03', '08006', 'EHOSTUNREACH'])
      expect(delays(coded(code))).toEqual(away);
    const grown = [100, 200, 400, 800, 1600, 3200, 6400, 12_800, 30_000];
    expect(delays(new ConnectionError('could not connect', { cause: coded('28P01') }))).toEqual(grown); // a password
    expect(delays(coded('53300'))).toEqual(grown); // too many clients
    expect(delays(coded('08P01'))).toEqual(grown); // a pooler refusing a startup parameter (a protocol violation)
    expect(delays(coded('08004'))).toEqual(grown); // the server rejected the connection
    expect(delays(new ConnectionError('could not connect', { cause: coded('ENOTFOUND') }))).toEqual(grown);
    expect(delays(new Error('no code'))).toEqual(grown); // anything else
    expect(delays(null)).toEqual(grown); // the lock held (poll mode)
    // kept within [baseMs, maxMs]: never shorter than the first delay, never longer than the longest
    const slow = new ExponentialBackoff({ baseMs: 2000, jitter: 0 });
    expect(slow.outageMaxMs).toBe(2000);
    expect(slow.nextDelayMs({ ...ctx(5), lastError: coded('ECONNREFUSED') })).toBe(2000);
    expect(new ExponentialBackoff({ maxMs: 500 }).outageMaxMs).toBe(500);
    expect(
      new ExponentialBackoff({ outageMaxMs: 5000, jitter: 0 }).nextDelayMs({
        ...ctx(9),
        lastError: coded('ECONNREFUSED'),
      }),
    ).toBe(5000);
  });
  it('rejects bad options naming the option and value', () => {
    expect(() => new ExponentialBackoff({ outageMaxMs: -5 })).toThrow(/ExponentialBackoff.outageMaxMs.*-5/);
    expect(() => new ExponentialBackoff({ baseMs: -1 })).toThrow(/ExponentialBackoff.baseMs.*-1/);
    expect(() => new ExponentialBackoff({ multiplier: 0.5 })).toThrow(/multiplier.*0.5/);
    expect(() => new ExponentialBackoff({ baseMs: 10, maxMs: 5 })).toThrow(RangeError);
    expect(() => new ExponentialBackoff({ jitter: 1.5 })).toThrow(/ExponentialBackoff.jitter.*1.5/);
    expect(() => new ExponentialBackoff({ jitter: Number.NaN })).toThrow(RangeError);
    expect(() => new ExponentialBackoff({ random: 3 as never })).toThrow(/ExponentialBackoff.random.*number/);
  });
});

describe('RetryCycle with atOnceAfterLoss (LeaderLock)', () => {
  const failing = new Error('connection lost');
  it('the first failure after a good outcome goes at once; the next ones on the strategy, from its first delay', () => {
    const asked: (number | null)[][] = [];
    const cycle = new RetryCycle(
      {
        nextDelayMs: (c) => {
          asked.push([c.attempt, c.previousDelayMs]);
          return 100 * c.attempt;
        },
      },
      () => 0,
      { atOnceAfterLoss: true },
    );
    // three refused attempts (no error): the strategy paces them
    for (let i = 0; i < 3; i++) expect(cycle.next()).toEqual({ delayMs: 100 * (i + 1) });
    // a loss: at once, without asking the strategy
    cycle.lastError = failing;
    expect(cycle.next()).toEqual({ delayMs: 0 });
    // it fails again: the strategy from attempt 1 (a new cycle), then 2
    expect(cycle.next()).toEqual({ delayMs: 100 });
    expect(cycle.next()).toEqual({ delayMs: 200 });
    expect(asked.slice(3)).toEqual([
      [1, null],
      [2, 100],
    ]);
    // a good outcome again, then a failure: at once once more
    cycle.lastError = null;
    expect(cycle.next()).toEqual({ delayMs: 300 });
    cycle.lastError = failing;
    expect(cycle.next()).toEqual({ delayMs: 0 });
    expect(cycle.next()).toEqual({ delayMs: 100 });
  });
  it('an attempt that fails every time is retried at once only once (no hot loop)', () => {
    const cycle = new RetryCycle(new FixedInterval({ intervalMs: 50 }), () => 0, { atOnceAfterLoss: true });
    cycle.lastError = failing;
    expect(Array.from({ length: 6 }, () => cycle.next())).toEqual([
      { delayMs: 0 },
      ...Array.from({ length: 5 }, () => ({ delayMs: 50 })),
    ]);
  });
  it('goingAtOnce() (a start, a loss of leadership retried at once by the lock): its failure is paced by the strategy', () => {
    const cycle = new RetryCycle(new FixedInterval({ intervalMs: 50 }), () => 0, { atOnceAfterLoss: true });
    cycle.goingAtOnce();
    cycle.lastError = failing;
    expect(cycle.next()).toEqual({ delayMs: 50 });
  });
  it('without the option (the partitions ring watch): every failure on the strategy', () => {
    const cycle = new RetryCycle(new FixedInterval({ intervalMs: 50 }), () => 0);
    cycle.lastError = failing;
    expect(cycle.next()).toEqual({ delayMs: 50 });
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

describe('strategy options', () => {
  it('are an object with known keys: a bare number or a misspelt key is refused, naming the strategy and the value', () => {
    expect(() => new FixedInterval(250 as never)).toThrow(
      /FixedInterval options must be an object, received 250/,
    );
    expect(() => new ExponentialBackoff({ base: 100 } as never)).toThrow(
      /unknown ExponentialBackoff option "base"/,
    );
    expect(() => new DecorrelatedJitter({ maxMS: 1 } as never)).toThrow(
      /unknown DecorrelatedJitter option "maxMS"/,
    );
  });
});
