import { describe, expect, it } from 'vitest';
import { isRetryStrategy, RetryCycle, resolveRetryStrategy } from '../../src/core/retry.js';
import {
  ConnectionError,
  DecorrelatedJitter,
  ExponentialBackoff,
  FixedInterval,
  LockError,
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
    expect(() => new ExponentialBackoff({ maxMs: -2 })).toThrow(/ExponentialBackoff.maxMs.*-2/);
    expect(() => new ExponentialBackoff({ baseMs: 10, maxMs: 5 })).toThrow(
      'ExponentialBackoff.maxMs (5) must not be less than baseMs (10)',
    );
    expect(() => new ExponentialBackoff({ jitter: -0.1 })).toThrow(/ExponentialBackoff.jitter.*-0.1/);
    expect(() => new ExponentialBackoff({ jitter: '0.5' as never })).toThrow(
      /ExponentialBackoff.jitter.*0.5/,
    );
    expect(() => new ExponentialBackoff({ baseMs: -1 })).toThrow(/ExponentialBackoff.baseMs.*-1/);
    expect(() => new ExponentialBackoff({ multiplier: 0.5 })).toThrow(/multiplier.*0.5/);
    expect(() => new ExponentialBackoff({ baseMs: 10, maxMs: 5 })).toThrow(RangeError);
    expect(() => new ExponentialBackoff({ jitter: 1.5 })).toThrow(/ExponentialBackoff.jitter.*1.5/);
    expect(() => new ExponentialBackoff({ jitter: Number.NaN })).toThrow(RangeError);
    expect(() => new ExponentialBackoff({ random: 3 as never })).toThrow(/ExponentialBackoff.random.*number/);
  });

  it('the bounds are inclusive: multiplier 1 (a constant delay) and maxMs equal to baseMs are accepted', () => {
    const flat = new ExponentialBackoff({ baseMs: 40, multiplier: 1, jitter: 0 });
    expect([1, 2, 5].map((n) => flat.nextDelayMs(ctx(n)))).toEqual([40, 40, 40]);
    const capped = new ExponentialBackoff({ baseMs: 40, maxMs: 40, jitter: 0 });
    expect([1, 3].map((n) => capped.nextDelayMs(ctx(n)))).toEqual([40, 40]);
  });
  it('a random source that strays (below 0, not a number, 1 or more) is clamped into [0, 1): every delay stays in [0, d]', () => {
    const at = (r: unknown) =>
      new ExponentialBackoff({ baseMs: 100, jitter: 1, random: () => r as number }).nextDelayMs(ctx(1));
    expect(at(-1)).toBe(100);
    expect(at(Number.NaN)).toBe(100);
    expect(at('0.5')).toBe(100);
    for (const r of [1, 5, Number.POSITIVE_INFINITY]) {
      expect(at(r)).toBeGreaterThanOrEqual(0);
      expect(at(r)).toBeLessThan(1e-9);
    }
  });
});

describe('RetryCycle: what the strategy is told, and when it gives up', () => {
  const failing = new Error('connection lost');
  it('elapsedMs is the time since the cycle began, on the injected clock; lastDelayMs is the last delay (null after a reset)', () => {
    let t = 5000;
    const seen: number[] = [];
    const cycle = new RetryCycle(
      {
        nextDelayMs: (c) => {
          seen.push(c.elapsedMs);
          return 25;
        },
      },
      () => t,
    );
    expect(cycle.lastDelayMs).toBeNull();
    cycle.next();
    t += 300;
    cycle.next();
    expect(seen).toEqual([0, 300]);
    expect(cycle.lastDelayMs).toBe(25);
    t += 1000;
    cycle.reset();
    expect(cycle.lastDelayMs).toBeNull();
    t += 40;
    cycle.next();
    expect(seen.at(-1)).toBe(40);
  });
  it('after reset() (the lock acquired) the next failure goes at once again', () => {
    const cycle = new RetryCycle(new FixedInterval({ intervalMs: 50 }), () => 0, { atOnceAfterLoss: true });
    cycle.lastError = failing;
    expect(cycle.next()).toEqual({ delayMs: 0 });
    expect(cycle.next()).toEqual({ delayMs: 50 });
    cycle.reset();
    cycle.lastError = failing;
    expect(cycle.next()).toEqual({ delayMs: 0 });
  });
  it('null from the strategy: ERR_PGLEADERLOCK_RETRY_EXHAUSTED, counting the failed attempts, caused by the last error', () => {
    const cycle = new RetryCycle({ nextDelayMs: (c) => (c.attempt < 3 ? 10 : null) }, () => 0);
    cycle.lastError = failing;
    expect(cycle.next()).toEqual({ delayMs: 10 });
    expect(cycle.next()).toEqual({ delayMs: 10 });
    const out = cycle.next();
    expect(out).not.toHaveProperty('delayMs');
    const err = (out as { giveUp: LockError }).giveUp;
    expect(err).toBeInstanceOf(LockError);
    expect(err.code).toBe('ERR_PGLEADERLOCK_RETRY_EXHAUSTED');
    expect(err.message).toBe('retry strategy gave up after 2 failed attempts');
    expect(err.cause).toBe(failing);
  });
  it('a strategy that throws, or returns a bad number: ERR_PGLEADERLOCK_RETRY_EXHAUSTED saying why', () => {
    const boom = new Error('boom');
    const threw = new RetryCycle(
      {
        nextDelayMs: () => {
          throw boom;
        },
      },
      () => 0,
    ).next();
    expect(threw).toEqual({ giveUp: expect.any(LockError) });
    const err = (threw as { giveUp: LockError }).giveUp;
    expect(err).toMatchObject({ code: 'ERR_PGLEADERLOCK_RETRY_EXHAUSTED', cause: boom });
    expect(err.message).toBe('retryStrategy.nextDelayMs threw: boom');
    for (const bad of [-1, Number.NaN, Number.POSITIVE_INFINITY, '5', undefined]) {
      const out = new RetryCycle({ nextDelayMs: () => bad as number }, () => 0).next();
      expect(out).toEqual({ giveUp: expect.any(LockError) });
      const e = (out as { giveUp: LockError }).giveUp;
      expect(e.code).toBe('ERR_PGLEADERLOCK_RETRY_EXHAUSTED');
      expect(e.message).toBe(
        `retryStrategy.nextDelayMs must return a finite number >= 0 or null, returned ${String(bad)}`,
      );
    }
    expect(new RetryCycle({ nextDelayMs: () => 0 }, () => 0).next()).toEqual({ delayMs: 0 });
  });
});

describe('retryStrategy option', () => {
  it('an object with a nextDelayMs method; null or anything else refused naming what was given', () => {
    const s = { nextDelayMs: () => 1 };
    expect(resolveRetryStrategy(s, () => new FixedInterval())).toBe(s);
    expect(resolveRetryStrategy(undefined, () => s)).toBe(s);
    for (const [bad, shown] of [
      [null, 'null'],
      [{}, '{}'],
      [{ nextDelayMs: 5 }, 'nextDelayMs'],
    ] as const) {
      expect(isRetryStrategy(bad)).toBe(false);
      expect(() => resolveRetryStrategy(bad, () => s)).toThrow(TypeError);
      expect(() => resolveRetryStrategy(bad, () => s)).toThrow(
        new RegExp(`retryStrategy must have a nextDelayMs\\(ctx\\) method, received .*${shown}`),
      );
    }
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
    expect(() => new DecorrelatedJitter({ random: 4 as unknown as () => number })).toThrow(
      /DecorrelatedJitter.random must be a function, received number/,
    );
  });
  it('rejects bad durations naming the option, and maxMs below baseMs (equal is accepted)', () => {
    expect(() => new DecorrelatedJitter({ baseMs: -1 })).toThrow(/DecorrelatedJitter.baseMs.*-1/);
    expect(() => new DecorrelatedJitter({ maxMs: -3 })).toThrow(/DecorrelatedJitter.maxMs.*-3/);
    expect(() => new DecorrelatedJitter({ baseMs: 10, maxMs: 5 })).toThrow(RangeError);
    expect(() => new DecorrelatedJitter({ baseMs: 10, maxMs: 5 })).toThrow(
      'DecorrelatedJitter.maxMs (5) must not be less than baseMs (10)',
    );
    expect(new DecorrelatedJitter({ baseMs: 10, maxMs: 10, random: () => 0.5 }).nextDelayMs(ctx(1))).toBe(10);
  });
});

describe('strategy options', () => {
  it('are an object with known keys: a bare number or a misspelt key is refused, naming the strategy and the value', () => {
    expect(() => new FixedInterval(250 as never)).toThrow(
      /FixedInterval options must be an object, received 250/,
    );
    expect(() => new FixedInterval(null as never)).toThrow(
      /FixedInterval options must be an object, received null/,
    );
    expect(() => new ExponentialBackoff({ base: 100 } as never)).toThrow(
      /unknown ExponentialBackoff option "base"/,
    );
    expect(() => new DecorrelatedJitter({ maxMS: 1 } as never)).toThrow(
      /unknown DecorrelatedJitter option "maxMS"/,
    );
  });
});

describe('RetryCycle: the connect deadline after missed deadlines (core/retry.ts MAX_CONNECT_STRETCH)', () => {
  /** A "could not connect" error caused by a missed deadline, accepted or not (core/primary.ts). */
  const missed = (accepted: boolean): Error =>
    new ConnectionError('could not connect to h:5432: …', {
      cause: new ConnectionError('connecting did not complete within 100 ms', {
        code: 'ERR_PGLEADERLOCK_CONNECT_TIMEOUT',
        accepted,
      }),
    });
  const deadlines = (errors: Error[]): number[] => {
    const cycle = new RetryCycle(new FixedInterval({ intervalMs: 10 }), () => 0);
    return errors.map((e) => {
      cycle.lastError = e;
      cycle.next();
      return cycle.connectTimeoutMs(100);
    });
  };

  it('nothing answered: doubles up to 4 ×', () => {
    expect(deadlines([missed(false), missed(false), missed(false), missed(false)])).toEqual([
      200, 400, 400, 400,
    ]);
  });

  it('accepted: doubles up to 16 ×', () => {
    const six = Array.from({ length: 6 }, () => missed(true));
    expect(deadlines(six)).toEqual([200, 400, 800, 1600, 1600, 1600]);
  });

  it('one accepted attempt in the streak is enough: a later one read as silent does not shrink the deadline', () => {
    expect(deadlines([missed(false), missed(false), missed(true), missed(false)])).toEqual([
      200, 400, 800, 1600,
    ]);
  });

  it('any other outcome ends the streak: the deadline and the stretch start over', () => {
    expect(
      deadlines([
        missed(true),
        missed(true),
        new Error('refused'),
        missed(false),
        missed(false),
        missed(false),
      ]),
    ).toEqual([200, 400, 100, 200, 400, 400]);
  });
});
