/**
 * Readiness timings of docs/observability.md ("Probes"), against a real PostgreSQL of the
 * test's own, stopped and started again between rounds: an outage that ends the connection
 * is seen at once, and a waiter that queued again after an outage is ready at once.
 * `health()` is sampled every millisecond and at each of the lock's callbacks; the baselines
 * are what the lock's own clients see in the same round. Timing-sensitive
 * (an event loop stalled by a busy machine delays every observation): a p50 over rounds.
 */
import type { EventEmitter } from 'node:events';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { deferred } from '../../src/core/clock.js';
import { FixedInterval, type LeaderLock, type LeaderLockOptions } from '../../src/index.js';
import { eventually, ownServer, randomKeys, within } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import type { PgServer } from '../harness/pg-server.js';
import { median } from '../harness/stats.js';

const locks = useLocks();
const ROUNDS = 5;

const ms = (xs: number[]): string => xs.map((x) => x.toFixed(1)).join(', ');

/**
 * The first moment `lock.health().ready` is seen equal to `ready`: sampled every
 * millisecond, and at each of the lock's callbacks (a state change, an error), which run
 * right after the change that may have caused it.
 */
function whenReady(lock: LeaderLock, ready: boolean): { at: Promise<number>; stop(): void } {
  const seen = deferred<number>();
  let done = false;
  const look = (): void => {
    if (!done && lock.health().ready === ready) {
      done = true;
      seen.resolve(performance.now());
    }
  };
  const timer = setInterval(look, 1);
  const off = new AbortController();
  lock.onStateChange(look, { signal: off.signal });
  lock.onError(look, { signal: off.signal });
  return {
    at: seen.promise,
    stop: () => {
      done = true;
      clearInterval(timer);
      off.abort();
    },
  };
}

/** Two candidates of one key on `server`: the leader, and the other one waiting (or polling). */
async function pair(server: PgServer, options: Partial<LeaderLockOptions>) {
  const keys = randomKeys();
  /**
   * The baselines, from each lock's own clients (a `connect` hook that listens before the
   * lock does): when one heard the server go (an error message, 'error' or 'end'), and when
   * an attempt to connect failed. Another client is no baseline: each backend ends when the
   * scheduler runs it, tens of ms apart beside other work (a waiting follower's wait ended
   * 16 ms after a bare client heard the stop, and 7 ms before, in one run).
   */
  const seen = new Map<LeaderLock, { heard: number[]; refused: number[] }>();
  const all = [0, 1].map((i) => {
    const own = { heard: [] as number[], refused: [] as number[] };
    const id = `${locks.tag}-own${i}`;
    const lock = locks.make({
      ...keys,
      ...options,
      id,
      connect: async () => {
        const client = new pg.Client({
          connectionString: server.url,
          application_name: `pgleaderlock:${id}`,
        });
        client.on('error', () => {});
        try {
          await client.connect();
        } catch (err) {
          own.refused.push(performance.now());
          throw err;
        }
        const gone = (): void => {
          own.heard.push(performance.now());
        };
        client.on('error', gone);
        client.on('end', gone);
        (client as unknown as { connection: EventEmitter }).connection.on('errorMessage', gone);
        return client;
      },
    });
    seen.set(lock, own);
    return lock;
  });
  /** The first time after `t0` that `lock`'s own client heard the server go, or its connection attempt failed. */
  const first = (lock: LeaderLock, what: 'heard' | 'refused', t0: number): number =>
    seen.get(lock)?.[what].find((t) => t > t0) ?? Number.NaN;
  for (const l of all) await l.start();
  const followerState = options.acquireMode === 'poll' ? 'follower' : 'acquiring';
  /** Once one leads and the other follows normally (after a restart either may lead). */
  const settled = async (): Promise<{ leader: LeaderLock; follower: LeaderLock }> => {
    await eventually(
      () => all.some((l) => l.isLeader) && all.some((l) => !l.isLeader && l.state === followerState),
      { timeoutMs: 10_000, what: 'a leader and a follower' },
    );
    await eventually(() => all.every((l) => l.health().ready), { what: 'both ready' });
    const leader = all.find((l) => l.isLeader) as LeaderLock;
    return { leader, follower: all.find((l) => l !== leader) as LeaderLock };
  };
  return { settled, first };
}

describe('an outage that ends the connection is seen at once (docs/observability.md, "What readiness cannot see")', () => {
  it.each([
    ['wait', 'leader'],
    ['poll', 'leader'],
  ] as const)(
    `a %s-mode leader (5 s health interval): not ready within 20 ms (p50 of ${ROUNDS} fast stops) of its immediate reconnection failing after its connection heard the stop`,
    async (acquireMode, _) => {
      await using server = await ownServer();
      const { settled, first } = await pair(server, {
        acquireMode,
        healthIntervalMs: 5000, // readiness must not wait for a check
        waitSliceMs: 30_000,
        retryStrategy: new FixedInterval({ intervalMs: 100 }),
      });
      const late: number[] = [];
      const afterHeard: number[] = [];
      for (let round = 0; round < ROUNDS; round++) {
        const { leader } = await settled();
        const unready = whenReady(leader, false);
        try {
          const t0 = performance.now();
          await server.stop('fast');
          const at = await within(unready.at, 5000, 'the leader to be unready');
          late.push(at - first(leader, 'refused', t0));
          afterHeard.push(at - first(leader, 'heard', t0));
        } finally {
          unready.stop();
        }
        await server.start();
      }
      console.log(
        `[outage] ${acquireMode}-mode leader: not ready ${ms(afterHeard)} ms after its connection heard the stop; ${ms(late)} ms after its reconnection failed (p50 ${median(late).toFixed(1)})`,
      );
      // bound: timing/observability-within-20
      expect(median(late)).toBeLessThan(20);
    },
  );

  it(`a waiting follower (30 s slice): not ready within 20 ms (p50 of ${ROUNDS} fast stops) of its connection hearing the stop`, async () => {
    await using server = await ownServer();
    const { settled, first } = await pair(server, {
      acquireMode: 'wait',
      waitSliceMs: 30_000,
      retryStrategy: new FixedInterval({ intervalMs: 100 }),
    });
    const late: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const { follower } = await settled();
      const unready = whenReady(follower, false);
      try {
        const t0 = performance.now();
        await server.stop('fast');
        const at = await within(unready.at, 5000, 'the follower to be unready');
        late.push(at - first(follower, 'heard', t0));
      } finally {
        unready.stop();
      }
      await server.start();
    }
    console.log(
      `[outage] waiting follower: not ready ${ms(late)} ms after its connection heard the stop (p50 ${median(late).toFixed(1)})`,
    );
    // bound: timing/observability-within-20
    expect(median(late)).toBeLessThan(20);
  });

  it('a poll-mode follower between attempts (2 s back-off) does not see it until its next attempt: still ready 1 s after the stop, not ready within 20 ms of that attempt failing', async () => {
    await using server = await ownServer();
    const { settled } = await pair(server, {
      acquireMode: 'poll',
      retryStrategy: new FixedInterval({ intervalMs: 2000 }),
    });
    const { follower } = await settled();
    const failed = deferred<number>();
    follower.onError(() => failed.resolve(performance.now()));
    const unready = whenReady(follower, false);
    try {
      // stop just after an attempt: the next is 2 s away
      await new Promise<void>((resolve) => {
        const off = new AbortController();
        follower.onAcquireFailed(
          () => {
            off.abort();
            resolve();
          },
          { signal: off.signal },
        );
      });
      const t0 = performance.now();
      await server.stop('fast');
      await new Promise((r) => setTimeout(r, 1000));
      const stillReady = follower.health().ready;
      const [at, attemptFailed] = await Promise.all([
        within(unready.at, 5000, 'the follower to be unready'),
        failed.promise,
      ]);
      console.log(
        `[outage] poll-mode follower: not ready ${(at - t0).toFixed(0)} ms after the stop, ${(at - attemptFailed).toFixed(1)} ms after its next attempt failed`,
      );
      expect(stillReady).toBe(true);
      // bound: timing/observability-within-20
      expect(at - attemptFailed).toBeLessThan(20);
    } finally {
      unready.stop();
    }
  });
});

describe('a waiter that queued again after an outage is ready at once, not a wait slice later (docs/observability.md, `ready`)', () => {
  it(`30 s slices: the follower is ready within 20 ms (p50 of ${ROUNDS} restarts) of its backend first seen queued in pg_locks`, async () => {
    await using server = await ownServer();
    const { settled } = await pair(server, {
      acquireMode: 'wait',
      waitSliceMs: 30_000,
      retryStrategy: new FixedInterval({ intervalMs: 50 }),
    });
    const late: number[] = [];
    let before = await settled();
    for (let round = 0; round < ROUNDS; round++) {
      const locksNow = [before.leader, before.follower];
      await server.stop('fast');
      await eventually(() => locksNow.every((l) => !l.health().ready), { what: 'both unready' });
      const ready = locksNow.map((l) => whenReady(l, true));
      try {
        await server.start();
        // the admin session polls pg_locks for a backend of this key that is not granted
        const admin = new pg.Client({ connectionString: server.url });
        admin.on('error', () => {});
        await admin.connect();
        let queued: { at: number; app: string } | null = null;
        try {
          while (!queued) {
            const { rows } = await admin.query<{ application_name: string }>(
              `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)
                WHERE l.locktype = 'advisory' AND NOT l.granted AND a.application_name LIKE $1`,
              [`pgleaderlock:${locks.tag}%`],
            );
            if (rows[0]) queued = { at: performance.now(), app: rows[0].application_name };
          }
        } finally {
          await admin.end();
        }
        const waiter = locksNow.findIndex((l) => `pgleaderlock:${l.id}` === queued?.app);
        expect(waiter).toBeGreaterThanOrEqual(0);
        const readyAt = await within(
          (ready[waiter] as { at: Promise<number> }).at,
          5000,
          'the queued follower to be ready',
        );
        late.push(readyAt - queued.at);
      } finally {
        for (const r of ready) r.stop();
      }
      before = await settled();
      expect(before.follower.state).toBe('acquiring'); // queued, its slice just begun
    }
    console.log(
      `[requeue] ready ${ms(late)} ms after the waiter was first seen queued (negative: before; p50 ${median(late).toFixed(1)}; slice 30 s)`,
    );
    // bound: timing/observability-within-20
    expect(median(late)).toBeLessThan(20);
  });
});
