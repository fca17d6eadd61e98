/**
 * Wait-mode failover on the run's server, measured over several trials. The compat driver
 * runs this once per PostgreSQL major and prints the figures (PGLEADERLOCK_COMPAT_RESULTS).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deferred } from '../../src/core/clock.js';
import type { LeaderLock } from '../../src/index.js';
import { type FailoverFigures, recordResult, type Spread, spread } from '../harness/compat-results.js';
import { databaseUrl, eventually, holderPid, lockHolders, randomKeys } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';

const TRIALS = 10;
const locks = useLocks();
const figures: Partial<FailoverFigures> = {};

let admin: pg.Client;
beforeAll(async () => {
  admin = new pg.Client({ connectionString: databaseUrl(), application_name: 'pgleaderlock-test-admin' });
  admin.on('error', () => {});
  await admin.connect();
  figures.serverVersion =
    (await admin.query<{ v: string }>("SELECT current_setting('server_version') AS v")).rows[0]?.v ?? '?';
});
afterAll(async () => {
  await admin?.end().catch(() => {});
  if (figures.graceful && figures.terminate) recordResult('failover', figures);
});

/** A leader, and a follower queued behind it (long wait slice, so it does not re-queue meanwhile). */
async function leaderAndQueuedFollower(): Promise<{
  keys: ReturnType<typeof randomKeys>;
  leader: LeaderLock;
  follower: LeaderLock;
}> {
  const keys = randomKeys();
  const leader = locks.make({ ...keys, acquireMode: 'wait', autoReacquire: false });
  await leader.start();
  expect(await leader.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
  const follower = locks.make({ ...keys, acquireMode: 'wait', waitSliceMs: 30_000 });
  await follower.start();
  await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2, {
    what: 'the follower to queue',
  });
  return { keys, leader, follower };
}

function report(what: string, s: Spread): void {
  console.log(
    `[failover] PostgreSQL ${figures.serverVersion}, ${what}: p50 ${s.p50} ms, max ${s.max} ms (${s.trials} trials)`,
  );
}

describe(`wait mode, ${TRIALS} trials each`, { tags: ['pg-major'] }, () => {
  it('shutdown() of the leader → the queued follower leads (p50 under 100 ms); the old leader is no longer isLeader by then', async () => {
    const samples: number[] = [];
    for (let i = 0; i < TRIALS; i++) {
      const { leader, follower } = await leaderAndQueuedFollower();
      const led = deferred<{ at: number; oldIsLeader: boolean }>();
      follower.onAcquired(() => led.resolve({ at: performance.now(), oldIsLeader: leader.isLeader }));
      const t0 = performance.now();
      const stopped = leader.shutdown();
      const { at, oldIsLeader } = await led.promise;
      await stopped;
      samples.push(at - t0);
      expect(oldIsLeader).toBe(false);
      expect(follower.isLeader).toBe(true);
      await follower.shutdown(); // the leak guard checks every trial's sessions after the test
    }
    figures.graceful = spread(samples);
    report('graceful shutdown → follower leads', figures.graceful);
    // bound: compat/failover-shutdown-p50
    expect(figures.graceful.p50).toBeLessThan(100);
  });

  it("pg_terminate_backend of the leader's backend → the queued follower leads (p50 under 100 ms)", async () => {
    const samples: number[] = [];
    for (let i = 0; i < TRIALS; i++) {
      const { keys, leader, follower } = await leaderAndQueuedFollower();
      const pid = await holderPid(databaseUrl(), keys.key1, keys.key2);
      const led = deferred<number>();
      follower.onAcquired(() => led.resolve(performance.now()));
      const t0 = performance.now();
      await admin.query('SELECT pg_terminate_backend($1)', [pid]);
      samples.push((await led.promise) - t0);
      expect(follower.isLeader).toBe(true);
      await Promise.all([leader.shutdown(), follower.shutdown()]);
    }
    figures.terminate = spread(samples);
    report('pg_terminate_backend → follower leads', figures.terminate);
    // bound: compat/failover-terminate-p50
    expect(figures.terminate.p50).toBeLessThan(100);
  });
});
