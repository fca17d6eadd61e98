/**
 * A partition worker that cannot connect backs off 100 ms doubling to 5 s, each delay drawn
 * from [d/2, d] by its `random` source (docs/partitions.md); fake clock, a `connect` hook
 * that refuses.
 */
import { describe, expect, it } from 'vitest';
import { PartitionedLeadership } from '../../src/index.js';
import { FakeClock, flush } from './fakes.js';

function refusing(random?: () => number) {
  const clock = new FakeClock();
  const attempts: number[] = [];
  const workers = new PartitionedLeadership({
    name: 'reconnect-jitter',
    partitions: 2,
    clock,
    ...(random ? { random } : {}),
    connect: () => {
      attempts.push(clock.now());
      return Promise.reject(
        Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:1'), { code: 'ECONNREFUSED' }),
      );
    },
  });
  workers.onError(() => {});
  return { clock, attempts, workers };
}

async function run(random?: () => number): Promise<number[]> {
  const w = refusing(random);
  const started = w.workers.start().catch(() => {});
  for (let i = 0; i < 50; i++) await flush();
  await w.clock.advance(20_000);
  await w.workers.shutdown();
  await started;
  return w.attempts.slice(1).map((t, i) => t - (w.attempts[i] as number));
}

describe('PartitionedLeadership reconnect back-off', () => {
  it('random 0: the full delays, 100 ms doubling to 5 s', async () => {
    expect((await run(() => 0)).slice(0, 8)).toEqual([100, 200, 400, 800, 1600, 3200, 5000, 5000]);
  });

  it('random 0.5: each delay three quarters of it (jitter takes up to half)', async () => {
    expect((await run(() => 0.5)).slice(0, 8)).toEqual([75, 150, 300, 600, 1200, 2400, 3750, 3750]);
  });

  it('the default source (Math.random): delays within [d/2, d], and two workers do not retry in lockstep', async () => {
    const [a, b] = await Promise.all([run(), run()]);
    const full = [100, 200, 400, 800, 1600, 3200, 5000, 5000];
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
});
