/**
 * `start()` and `shutdown()` of a partition worker called in a row: the call made last
 * decides whether the worker runs, as for `LeaderLock` (leader/control.ts). A `start()`
 * made while a shutdown is under way runs once that shutdown is over, unless a
 * `shutdown()` came after it (found by the simulation through a session-mode pooler, seed
 * 2493232885: start, shutdown, start, shutdown while a shutdown timed out and the worker
 * later joined again and took a partition). Fake clock; a `connect` hook that refuses, so
 * a running worker keeps trying to connect.
 */
import { describe, expect, it } from 'vitest';
import { PartitionedLeadership } from '../../src/index.js';
import { FakeClock, flush } from './fakes.js';

function worker() {
  const clock = new FakeClock();
  const attempts: number[] = [];
  const workers = new PartitionedLeadership({
    name: 'start-stop',
    partitions: 2,
    clock,
    random: () => 0,
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

describe('PartitionedLeadership: start() and shutdown() in a row', () => {
  it('start, shutdown, start, shutdown: stopped at the end, and it connects no more', async () => {
    const { clock, attempts, workers } = worker();
    const first = workers.start();
    const stopping = workers.shutdown({ timeoutMs: 50 });
    const queued = workers.start(); // queued behind the shutdown under way
    const last = workers.shutdown(); // made last: the queued start does not run
    await clock.advance(100);
    await Promise.all([first, stopping, last]);
    const seen = attempts.length;
    await clock.advance(10_000);
    await flush();
    expect(attempts.length).toBe(seen); // no run: nothing tries to connect
    // the start it overrode resolves, as a start does whose run ends before it joined
    let settled = false;
    void queued.then(() => {
      settled = true;
    });
    await flush();
    expect(settled).toBe(true);
  });

  it('start, shutdown, start: the queued start runs once the shutdown is over', async () => {
    const { clock, attempts, workers } = worker();
    void workers.start();
    const stopped = workers.shutdown();
    void workers.start();
    await clock.advance(100);
    await stopped;
    const seen = attempts.length;
    await clock.advance(10_000);
    expect(attempts.length).toBeGreaterThan(seen); // running: it keeps trying to connect
    await workers.shutdown();
    const after = attempts.length;
    await clock.advance(10_000);
    expect(attempts.length).toBe(after);
  });
});
