/**
 * A partition worker that cannot connect backs off 100 ms doubling to 5 s, each delay drawn
 * from [d/2, d] by its `random` source (docs/partitions.md), or on its `retryStrategy`, the
 * option LeaderLock takes; fake clock, a `connect` hook that refuses.
 */
import { describe, expect, it } from 'vitest';
import { FixedInterval, PartitionedLeadership, type RetryStrategy } from '../../src/index.js';
import { FakeClock, FakeDb, flush } from './fakes.js';

function refusing(random?: () => number, retryStrategy?: RetryStrategy, code = 'ECONNREFUSED') {
  const clock = new FakeClock();
  const attempts: number[] = [];
  const workers = new PartitionedLeadership({
    name: 'reconnect-jitter',
    partitions: 2,
    clock,
    ...(random ? { random } : {}),
    ...(retryStrategy ? { retryStrategy } : {}),
    connect: () => {
      attempts.push(clock.now());
      return Promise.reject(Object.assign(new Error(`connect ${code} 127.0.0.1:1`), { code }));
    },
  });
  workers.onError(() => {});
  return { clock, attempts, workers };
}

async function run(random?: () => number, retryStrategy?: RetryStrategy, code?: string): Promise<number[]> {
  const w = refusing(random, retryStrategy, code);
  const started = w.workers.start().catch(() => {});
  for (let i = 0; i < 50; i++) await flush();
  await w.clock.advance(20_000);
  await w.workers.shutdown();
  await started;
  return w.attempts.slice(1).map((t, i) => t - (w.attempts[i] as number));
}

describe('PartitionedLeadership reconnect back-off', () => {
  it('random 0: the full delays, 100 ms doubling to 1 s while the server refuses (the shared default), to 5 s for other errors', async () => {
    expect((await run(() => 0)).slice(0, 8)).toEqual([100, 200, 400, 800, 1000, 1000, 1000, 1000]);
    expect((await run(() => 0, undefined, '28P01')).slice(0, 8)).toEqual([
      100, 200, 400, 800, 1600, 3200, 5000, 5000,
    ]);
  });

  it('random 0.5: each delay three quarters of it (jitter takes up to half)', async () => {
    expect((await run(() => 0.5)).slice(0, 8)).toEqual([75, 150, 300, 600, 750, 750, 750, 750]);
  });

  it('the default source (Math.random): delays within [d/2, d], and two workers do not retry in lockstep', async () => {
    const [a, b] = await Promise.all([run(), run()]);
    const full = [100, 200, 400, 800, 1000, 1000, 1000, 1000];
    full.forEach((d, i) => {
      expect(a[i]).toBeGreaterThanOrEqual(d / 2);
      expect(a[i]).toBeLessThanOrEqual(d);
    });
    expect(a.slice(0, 8)).not.toEqual(b.slice(0, 8));
  });

  it('refuses a random that is not a function, naming the option', () => {
    expect(
      () =>
        new PartitionedLeadership({
          name: 'x',
          partitions: 1,
          connectionString: 'postgres://u@h/db',
          random: 0.5 as never,
        }),
    ).toThrow(/random must be a function, received 0.5/);
  });

  it('retryStrategy paces the attempts, as it does for LeaderLock', async () => {
    expect((await run(undefined, new FixedInterval({ intervalMs: 250 }))).slice(0, 4)).toEqual([
      250, 250, 250, 250,
    ]);
  });

  it('a retryStrategy that gives up stops the worker: start() rejects with ERR_PGLEADERLOCK_RETRY_EXHAUSTED', async () => {
    const w = refusing(undefined, { nextDelayMs: (ctx) => (ctx.attempt < 3 ? 10 : null) });
    const errors: unknown[] = [];
    w.workers.onError((e) => errors.push(e));
    const started = w.workers.start();
    const outcome = started.then(
      () => null,
      (e: unknown) => e,
    );
    for (let i = 0; i < 50; i++) await flush();
    await w.clock.advance(1000);
    expect(await outcome).toMatchObject({ code: 'ERR_PGLEADERLOCK_RETRY_EXHAUSTED' });
    expect(w.attempts.length).toBe(3);
    await w.clock.advance(10_000);
    expect(w.attempts.length).toBe(3); // stopped: no attempt after it gave up
    expect(errors).toContainEqual(expect.objectContaining({ code: 'ERR_PGLEADERLOCK_RETRY_EXHAUSTED' }));
    await w.workers.shutdown();
  });

  it('refuses a retryStrategy without nextDelayMs, naming the option and the value', () => {
    expect(
      () =>
        new PartitionedLeadership({
          name: 'x',
          partitions: 1,
          connectionString: 'postgres://u@h/db',
          retryStrategy: { next: 1 } as never,
        }),
    ).toThrow(/retryStrategy must have a nextDelayMs\(ctx\) method, received/);
  });
});

describe('PartitionedLeadership: a connect that misses its deadline', () => {
  it('a server that accepted the connection but did not finish it (busy): the next connect is given twice as long, up to 16 × queryTimeoutMs (the policy LeaderLock has)', async () => {
    const clock = new FakeClock();
    const db = new FakeDb(clock);
    db.surveyBehaviour = 'hang';
    const attempts: number[] = [];
    const workers = new PartitionedLeadership({
      name: 'connect-deadline-busy',
      partitions: 2,
      clock,
      queryTimeoutMs: 500,
      retryStrategy: new FixedInterval({ intervalMs: 100 }),
      connect: () => {
        attempts.push(clock.now());
        return db.connect();
      },
    });
    workers.onError(() => {});
    const started = workers.start().catch(() => {});
    for (let i = 0; i < 50; i++) await flush();
    await clock.advance(30_000);
    // deadlines 500, 1000, 2000, 4000, 8000, 8000 …, each followed by the strategy's 100 ms
    expect(attempts.slice(0, 7)).toEqual([0, 600, 1700, 3800, 7900, 16_000, 24_100]);
    await workers.shutdown();
    await started;
  });

  it('a silent path (nothing answered the connect): the next connect is given twice as long, up to 4 × queryTimeoutMs (the policy LeaderLock has)', async () => {
    const clock = new FakeClock();
    const attempts: number[] = [];
    const workers = new PartitionedLeadership({
      name: 'connect-deadline',
      partitions: 2,
      clock,
      queryTimeoutMs: 500,
      retryStrategy: new FixedInterval({ intervalMs: 100 }),
      connect: () => {
        attempts.push(clock.now());
        return new Promise<never>(() => {}); // nothing answers the connect (a silent path)
      },
    });
    workers.onError(() => {});
    const started = workers.start().catch(() => {});
    for (let i = 0; i < 50; i++) await flush();
    await clock.advance(10_000);
    // deadlines 500, 1000, 2000, 2000 …, each followed by the strategy's 100 ms
    expect(attempts.slice(0, 5)).toEqual([0, 600, 1700, 3800, 5900]);
    await workers.shutdown();
    await started;
  });
});
