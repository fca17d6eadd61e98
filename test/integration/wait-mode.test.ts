/** What only wait mode has: server-side waiters, prompt cancellation, no inheritance by a dead waiter. */
import { describe, expect, it } from 'vitest';
import { deferred } from '../../src/core/clock.js';
import { LockState } from '../../src/index.js';
import { bareTimer, bareUnlock, expectNearBaseline } from '../harness/baseline.js';
import { adminQuery, databaseUrl, eventually, lockHolders, randomKeys } from '../harness/db.js';
import { proxyTo } from '../harness/fault-proxy.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();
const make: typeof locks.make = (o) => locks.make({ acquireMode: 'wait', ...o });

/**
 * A leader on the shared server, and a "ghost" candidate whose connection runs through a
 * fault proxy (healthIntervalMs 200, queryTimeoutMs 500: serverReleaseMs 1400), queued
 * behind the leader. Close the returned proxy in `finally`.
 */
async function leaderAndGhost(ghostSliceMs = 500) {
  const keys = randomKeys();
  const leader = make(keys);
  await leader.start();
  await leader.waitForLeadership();
  const proxy = await proxyTo(databaseUrl());
  const ghost = make({
    ...keys,
    connectionString: proxy.url(databaseUrl()),
    healthIntervalMs: 200,
    queryTimeoutMs: 500,
    waitSliceMs: ghostSliceMs,
  });
  return { keys, leader, proxy, ghost };
}

describe("acquireMode: 'wait' against PostgreSQL", () => {
  it('waiting followers are visible in pg_locks as not granted, and cost no statements while they wait', {
    tags: ['pg-major'],
  }, async () => {
    const keys = randomKeys();
    const leader = make(keys);
    await leader.start();
    await leader.waitForLeadership();
    const followers = [0, 1, 2].map(() => make({ ...keys, waitSliceMs: 60_000 }));
    await Promise.all(followers.map((f) => f.start()));
    await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 4);
    const rows = await lockHolders(databaseUrl(), keys.key1, keys.key2);
    expect(rows.filter((r) => !r.granted)).toHaveLength(3);
    // while waiting, each follower's backend runs one statement: its xact_start does not move
    const before = await adminQuery<{ pid: number; query_start: Date }>(
      databaseUrl(),
      "SELECT pid, query_start FROM pg_stat_activity WHERE wait_event = 'advisory' ORDER BY pid",
    );
    await new Promise((r) => setTimeout(r, 300));
    const after = await adminQuery<{ pid: number; query_start: Date }>(
      databaseUrl(),
      "SELECT pid, query_start FROM pg_stat_activity WHERE wait_event = 'advisory' ORDER BY pid",
    );
    const mine = new Set(rows.filter((r) => !r.granted).map((r) => r.pid));
    const b = before.filter((r) => mine.has(r.pid));
    const a = after.filter((r) => mine.has(r.pid));
    expect(a.map((r) => r.query_start.getTime())).toEqual(b.map((r) => r.query_start.getTime()));
  });

  it('graceful handover: a waiting follower leads within 2 × a bare unlock → grant + 50 ms of stepDown', async () => {
    const keys = randomKeys();
    const a = make(keys);
    await a.start();
    await a.waitForLeadership();
    const b = make(keys);
    const acquired = deferred<number>();
    b.onAcquired(() => acquired.resolve(performance.now()));
    await b.start();
    await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2);
    const t0 = performance.now();
    await a.stepDown();
    const took = (await acquired.promise) - t0;
    const bare = [await bareUnlock(databaseUrl()), await bareUnlock(databaseUrl())];
    console.log(
      `[wait] handover after stepDown: ${took.toFixed(1)} ms; a bare unlock → grant ${bare.map((b) => b.toFixed(1)).join(', ')} ms`,
    );
    // was a fixed 100 ms: 39.7 recorded at load 17 (2026-12-02), 3 × it past the bound; against
    // the same exchange between bare clients (the worse of two rounds right after)
    expectNearBaseline(
      'stepDown() called → the waiting follower’s onAcquired, against a bare unlock → grant',
      { subject: took, baseline: Math.max(...bare) },
      { ratio: 2, overMs: 50 },
    );
  });

  it('shutdown during a wait: the backend leaves the queue at once, no connection is left', {
    tags: ['pg-major'],
  }, async () => {
    const keys = randomKeys();
    const leader = make(keys);
    await leader.start();
    await leader.waitForLeadership();
    const follower = make({ ...keys, waitSliceMs: 60_000 });
    await follower.start();
    await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2);
    const t0 = performance.now();
    await follower.shutdown();
    const took = performance.now() - t0;
    console.log(`[wait] a waiting follower's shutdown(): ${took.toFixed(1)} ms`);
    // was 500 ms: 180.5 recorded at load 18–22, 2026-12-02
    // bound: integration/wait-follower-shutdown
    expect(took).toBeLessThan(600);
    expect(follower.state).toBe(LockState.STOPPED);
    expect((await lockHolders(databaseUrl(), keys.key1, keys.key2)).filter((r) => !r.granted)).toEqual([]);
    // the leader keeps leading
    expect(leader.isLeader).toBe(true);
  });

  it('the AbortSignal cancels a wait just as promptly', async () => {
    const keys = randomKeys();
    const leader = make(keys);
    await leader.start();
    await leader.waitForLeadership();
    const ac = new AbortController();
    const follower = make({ ...keys, waitSliceMs: 60_000, signal: ac.signal });
    const stopped = deferred<void>();
    follower.onStopped(() => stopped.resolve());
    await follower.start();
    await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2);
    const t0 = performance.now();
    ac.abort();
    await stopped.promise;
    const took = performance.now() - t0;
    console.log(`[wait] a waiting follower's abort → onStopped: ${took.toFixed(1)} ms`);
    // bound: integration/wait-follower-abort
    expect(took).toBeLessThan(600); // as shutdown() above
    expect(follower.state).toBe(LockState.STOPPED);
    await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 1);
    expect(leader.isLeader).toBe(true);
  });

  it('a waiter whose client vanished (upstream reset) leaves the queue and never inherits the lock', {
    tags: ['pg-major'],
  }, async () => {
    const { keys, leader, proxy, ghost } = await leaderAndGhost();
    try {
      await ghost.start();
      await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2);
      const ghostPid = (await lockHolders(databaseUrl(), keys.key1, keys.key2)).find((r) => !r.granted)?.pid;
      proxy.blackhole();
      proxy.resetUpstream(); // the server sees the client go; the client hears nothing
      // client_connection_check_interval (50 ms) takes the dead waiter out of the queue
      await eventually(
        async () => !(await lockHolders(databaseUrl(), keys.key1, keys.key2)).some((r) => r.pid === ghostPid),
        { timeoutMs: 3000, what: 'the dead waiter to leave the queue' },
      );
      const heir = make(keys);
      await heir.start();
      await leader.shutdown();
      expect(await heir.waitForLeadership({ timeoutMs: 3000 })).toBe(true);
      expect(ghost.isLeader).toBe(false);
    } finally {
      await proxy.close();
    }
  });

  it('a blackholed waiter granted the lock anyway is cut by the server within serverReleaseMs', {
    tags: ['pg-major'],
  }, async () => {
    // the ghost is first in the queue, behind a blackhole the server cannot see (the proxy
    // answers for it). Its wait slice outlasts the set-up: a slice that ends on the server
    // after the blackhole takes it out of the queue unheard (its client never learns), and the
    // heir's queueing below then waits for three holders in vain (CI of 2026-12-03, under load)
    const { keys, leader, proxy, ghost } = await leaderAndGhost(10_000);
    try {
      let ghostLed = false;
      ghost.onAcquired(() => {
        ghostLed = true;
      });
      await ghost.start();
      await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2);
      proxy.blackhole();
      const heir = make(keys);
      await heir.start();
      await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 3);
      const t0 = performance.now();
      const bare = bareTimer(1400); // the baseline: a bare serverReleaseMs timer started with it
      await leader.shutdown(); // the ghost's backend is granted the lock, and arms idle_session_timeout itself
      expect(await heir.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      const took = performance.now() - t0;
      const bareMs = await bare;
      console.log(
        `[wait] blackholed first waiter: heir led after ${took.toFixed(0)} ms (serverReleaseMs 1400); a bare 1400 ms timer ${bareMs.toFixed(0)} ms`,
      );
      // was a fixed 2,400 ms (1,409 recorded at load 17, 2026-12-02): the server's own timer
      // is not on this loop, so the baseline takes only this process's lateness
      expectNearBaseline(
        'the heir led after a blackholed first waiter, against a bare serverReleaseMs timer',
        { subject: took, baseline: bareMs },
        { overMs: 1000 },
      );
      expect(ghostLed).toBe(false);
    } finally {
      await proxy.close();
    }
  });
});
