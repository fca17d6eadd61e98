/**
 * What readiness sees while the network to the server is silently dropped (docs/observability.md,
 * "What readiness cannot see"): the leader turns unready once its check misses its deadline
 * (healthIntervalMs + queryTimeoutMs) and the new connection it then tries misses its own
 * (queryTimeoutMs); a follower waiting server-side in wait mode hears nothing until its wait
 * statement's deadline, one wait slice (±10 %) plus queryTimeoutMs after it was sent, then
 * the same new connection; a poll-mode follower like the leader.
 */
import { describe, expect, it, onTestFinished } from 'vitest';
import { LeaderLock, LockState } from '../../src/index.js';
import { databaseUrl, eventually, randomKeys } from '../harness/db.js';
import { proxyTo } from '../harness/fault-proxy.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();
const HEALTH = 500;
const QUERY = 500;
const SLICE = 2000;
/** Timer slack on the 2-core VM: the sampling interval and an event-loop turn or two. */
const SLACK = 300;

describe('readiness during a blackhole (health 500 ms, query timeout 500 ms, wait slice 2 s)', () => {
  it('the leader and a poll follower turn unready within healthIntervalMs + 2 × queryTimeoutMs; a waiting follower within waitSliceMs × 1.1 + 2 × queryTimeoutMs', async () => {
    const proxy = await proxyTo(databaseUrl());
    onTestFinished(() => proxy.close());
    const keys = randomKeys();
    const common = {
      ...keys,
      healthIntervalMs: HEALTH,
      queryTimeoutMs: QUERY,
      connectionString: proxy.url(databaseUrl()),
    };
    const leader = locks.make({ ...common, acquireMode: 'wait', waitSliceMs: SLICE });
    await leader.start();
    expect(await leader.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
    const waiter = locks.make({ ...common, acquireMode: 'wait', waitSliceMs: SLICE });
    const poller = locks.make({ ...common, acquireMode: 'poll' });
    await waiter.start();
    await poller.start();
    // both followers connected and asking: the waiter queued on the server, the poller past
    // its first refused attempt (start() returns before the first connection is open)
    let polled = false;
    poller.onStateChange((from, to) => {
      if (from === LockState.ACQUIRING && to === LockState.FOLLOWER) polled = true;
    });
    await eventually(
      async () =>
        polled &&
        (await LeaderLock.inspect({ connectionString: databaseUrl(), ...keys })).waiters.length === 1,
      { what: 'the waiter queued and the poller refused once' },
    );
    // the waiter's wait statement was sent at most one slice ago: from the blackhole on, its
    // deadline is at most waitSliceMs × 1.1 + queryTimeoutMs away
    const t0 = performance.now();
    proxy.blackhole();
    const unready = new Map<string, number>();
    while (unready.size < 3 && performance.now() - t0 < 10_000) {
      for (const [name, lock] of [
        ['leader', leader],
        ['waiter', waiter],
        ['poller', poller],
      ] as const) {
        if (!unready.has(name) && !lock.health().ready) unready.set(name, performance.now() - t0);
      }
      await new Promise((r) => setTimeout(r, 10));
    }
    const shown = [...unready].map(([n, ms]) => `${n} ${ms.toFixed(0)} ms`).join(', ');
    console.log(`[readiness blackhole] unready after: ${shown}`);
    // each: the deadline of the statement in flight, then a new connection's (a fresh attempt
    // counts as ready until it fails)
    // bound: integration/readiness-blackhole-leader
    expect(unready.get('leader')).toBeLessThanOrEqual(HEALTH + 2 * QUERY + SLACK);
    // bound: integration/readiness-blackhole-follower
    expect(unready.get('poller')).toBeLessThanOrEqual(HEALTH + 2 * QUERY + SLACK);
    // bound: integration/readiness-blackhole-waiter
    expect(unready.get('waiter')).toBeLessThanOrEqual(SLICE * 1.1 + 2 * QUERY + SLACK);
    // the proxy keeps the server side of a connection the client gave up on: close it
    // before the leak check
    await Promise.all([leader, waiter, poller].map((l) => l.shutdown()));
    await proxy.close();
  });
});
