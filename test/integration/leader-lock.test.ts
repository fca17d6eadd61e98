import { describe, expect, it } from 'vitest';
import { deferred } from '../../src/core/clock.js';
import { FixedInterval, LockState } from '../../src/index.js';
import { bareTerminate, expectNearBaseline } from '../harness/baseline.js';
import {
  adminClient,
  adminQuery,
  databaseUrl,
  eventually,
  holderPid,
  lockHolders,
  randomKeys,
  sessionsLike,
  terminate,
} from '../harness/db.js';
import { gatedConnect, useLocks } from '../harness/locks.js';

const locks = useLocks();

/** The pid of the backend holding (key1, key2) on the shared server. */
const holder = (key1: number, key2: number) => holderPid(databaseUrl(), key1, key2);

describe.each(['wait', 'poll'] as const)('%s mode', (mode) => {
  const make: typeof locks.make = (o) => locks.make({ acquireMode: mode, ...o });

  describe('LeaderLock against PostgreSQL', () => {
    it('a single lock acquires, holds the lock in pg_locks, and releases on shutdown', {
      tags: ['pg-major'],
    }, async () => {
      const keys = randomKeys();
      const lock = make(keys);
      const acquired: string[] = [];
      lock.onAcquired(() => {
        acquired.push('acquired');
      });
      await lock.start();
      expect(await lock.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      expect(lock.isLeader).toBe(true);
      const [app] = await adminQuery<{ application_name: string }>(
        databaseUrl(),
        'SELECT application_name FROM pg_stat_activity WHERE pid = $1',
        [await holder(keys.key1, keys.key2)],
      );
      expect(app?.application_name).toBe(`pgleaderlock:${lock.id}`);
      await lock.shutdown();
      expect(acquired).toEqual(['acquired']);
      expect(await lockHolders(databaseUrl(), keys.key1, keys.key2)).toEqual([]);
    });

    it.each([2, 10])('mutual exclusion: exactly one of %i candidates leads', async (n) => {
      const keys = randomKeys();
      const all = Array.from({ length: n }, () => make(keys));
      await Promise.all(all.map((l) => l.start()));
      await Promise.race(all.map((l) => l.waitForLeadership()));
      // watch for a while: never two leaders
      for (let i = 0; i < 20; i++) {
        expect(all.filter((l) => l.isLeader)).toHaveLength(1);
        await new Promise((r) => setTimeout(r, 10));
      }
      expect((await lockHolders(databaseUrl(), keys.key1, keys.key2)).filter((r) => r.granted)).toHaveLength(
        1,
      );
    });

    it('step-down hands leadership to the other candidate, callbacks fire', async () => {
      const keys = randomKeys();
      // a rejoins one back-off after its step-down: 1 s here, so that in poll mode b (every
      // 25 ms) is first. With both at 25 ms, a won the race once under load in CI
      const a = make({ ...keys, retryStrategy: new FixedInterval({ intervalMs: 1000 }) });
      const events: string[] = [];
      a.onAcquired(() => {
        events.push('a:acquired');
      });
      a.onReleased(() => {
        events.push('a:released');
      });
      a.onLost(() => {
        events.push('a:lost');
      });
      await a.start();
      await a.waitForLeadership();
      const b = make(keys); // poll mode: tries every 25 ms (the factory's interval)
      b.onAcquired(() => {
        events.push('b:acquired');
      });
      b.onAcquireFailed(() => {
        if (!events.includes('b:failed')) events.push('b:failed');
      });
      await b.start();
      await eventually(() => events.includes('b:failed'));
      await a.stepDown();
      expect(await b.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      expect(a.isLeader).toBe(false);
      // callbacks run on their own queue, just after the state change
      await eventually(() => events.includes('b:acquired'));
      // each lock's callbacks run in order; across the two locks, b may hear of its grant
      // (milliseconds after the unlock, in wait mode) before a's onReleased has run
      expect(events.filter((e) => e.startsWith('a:'))).toEqual(['a:acquired', 'a:released']);
      expect(events.filter((e) => e.startsWith('b:'))).toEqual(['b:failed', 'b:acquired']);
      expect(events.indexOf('b:failed')).toBeLessThan(events.indexOf('b:acquired'));
    });

    it('leader backend terminated: onLost fires, a follower takes over', async () => {
      const keys = randomKeys();
      // without autoReacquire: in poll mode the old leader's immediate re-attempt could win the race
      const a = make({ ...keys, healthIntervalMs: 5000, autoReacquire: false });
      await a.start();
      await a.waitForLeadership();
      const b = make(keys);
      await b.start();
      const lost = deferred<number>();
      a.onLost(() => lost.resolve(performance.now()));
      const t0 = performance.now();
      await terminate(databaseUrl(), await holder(keys.key1, keys.key2));
      const lostAt = await lost.promise;
      console.log(`[leader-lock] terminate → onLost: ${(lostAt - t0).toFixed(1)} ms`);
      // the 'error' event, not the 5 s health tick (a new admin connection inside the window;
      // was 1,000 ms: 604.5 recorded at load 17, 2026-12-02)
      // bound: integration/leader-lock-terminate-lost
      expect(lostAt - t0).toBeLessThan(2000);
      expect(await b.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      expect(a.isLeader).toBe(false);
    });

    it('three-way failover: each terminated leader is replaced by one of the others', async () => {
      const keys = randomKeys();
      const all = [0, 1, 2].map(() => make({ ...keys, autoReacquire: false }));
      await Promise.all(all.map((l) => l.start()));
      for (let round = 0; round < 2; round++) {
        await eventually(() => all.filter((l) => l.isLeader).length === 1, { what: 'one leader' });
        const leader = all.find((l) => l.isLeader);
        await terminate(databaseUrl(), await holder(keys.key1, keys.key2));
        await eventually(() => leader?.state === LockState.STOPPED, { what: 'old leader stopped' });
      }
      await eventually(() => all.filter((l) => l.isLeader).length === 1, { what: 'third leader' });
      expect(all.filter((l) => l.state === LockState.STOPPED)).toHaveLength(2);
    });

    it('grace period: a terminated backend is reconnected and re-acquired with no onLost and no onAcquired', async () => {
      const keys = randomKeys();
      const lock = make({ ...keys, reconnectGraceMs: 3000 });
      const events: string[] = [];
      lock.onAcquired(() => {
        events.push('acquired');
      });
      lock.onLost(() => {
        events.push('lost');
      });
      lock.onStateChange((from, to) => {
        events.push(`${from}->${to}`);
      });
      await lock.start();
      await lock.waitForLeadership();
      const pid = await holder(keys.key1, keys.key2);
      await terminate(databaseUrl(), pid);
      await eventually(() => events.includes('reconnecting->leader'), { what: 'recovery' });
      expect(events.filter((e) => e === 'lost' || e === 'acquired')).toEqual(['acquired']);
      expect(await holder(keys.key1, keys.key2)).not.toBe(pid);
    });

    it('grace period lost to a competitor fires onLost', async () => {
      const keys = randomKeys();
      const gate = deferred<void>();
      const tagged = gatedConnect(databaseUrl(), `pgleaderlock:${locks.tag}-gated`);
      tagged.holdAttempt(2, gate.promise); // the reconnect waits until the competitor leads
      const a = make({ ...keys, connect: tagged.connect, reconnectGraceMs: 10_000 });
      const lost = deferred<void>();
      a.onLost(() => lost.resolve());
      await a.start();
      await a.waitForLeadership();
      const b = make(keys);
      await b.start();
      await terminate(databaseUrl(), await holder(keys.key1, keys.key2));
      expect(await b.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      expect(a.state).toBe(LockState.RECONNECTING);
      expect(a.isLeader).toBe(false);
      gate.resolve();
      await lost.promise;
      expect(a.state).toBe(LockState.FOLLOWER);
    });

    it('no grace: a terminated backend fires onLost at once (within 2 × a bare client’s socket ending + 50 ms, with a 10 s health interval)', async () => {
      const keys = randomKeys();
      const lock = make({ ...keys, healthIntervalMs: 10_000 });
      const lost = deferred<number>();
      lock.onLost(() => lost.resolve(performance.now()));
      await lock.start();
      await lock.waitForLeadership();
      const pid = await holder(keys.key1, keys.key2);
      // connected before the clock starts: a new connection's set-up (SCRAM) inside the window
      // made it 150.7 ms once in a loaded compat run
      await using admin = await adminClient(databaseUrl());
      const t0 = performance.now();
      await admin.terminate(pid);
      const lostMs = (await lost.promise) - t0;
      expect(lock.isLeader).toBe(false); // before it may lead again, during the baseline
      // the baseline, right after: a bare client terminated the same way, until its socket ends
      const bare = (await bareTerminate(databaseUrl(), admin)).ended;
      console.log(
        `[leader-lock] terminate → onLost (admin connected first): ${lostMs.toFixed(1)} ms; a bare client's socket ended ${bare.toFixed(1)} ms`,
      );
      // was a fixed 100 ms: 37.7 recorded at load 17 (2026-12-02), 3 × it past the bound
      expectNearBaseline(
        "terminate → onLost with no grace, against a bare client's socket ending",
        { subject: lostMs, baseline: bare },
        { ratio: 2, overMs: 50 },
      );
    });

    it('different keys are independent', async () => {
      const k = randomKeys();
      const a = make(k);
      const b = make({ key1: k.key1, key2: k.key2 ^ 1 });
      const c = make({ key1: k.key1 ^ 1, key2: k.key2 });
      await Promise.all([a.start(), b.start(), c.start()]);
      expect(await Promise.all([a, b, c].map((l) => l.waitForLeadership({ timeoutMs: 5000 })))).toEqual([
        true,
        true,
        true,
      ]);
    });

    it.each([
      [-2_147_483_648, 2_147_483_647],
      [2_147_483_647, -2_147_483_648],
      [-1, -1],
      [0, 0],
    ])(
      'keys (%i, %i) acquire, stay leader through 20 health checks, and release cleanly',
      async (key1, key2) => {
        // fixed keys may collide with a parallel run on a shared server: scope by a random tag in id only
        const lock = make({ key1, key2, healthIntervalMs: 20 });
        const lost: string[] = [];
        const errors: Error[] = [];
        lock.onLost(() => {
          lost.push('lost');
        });
        lock.onError((e) => {
          errors.push(e);
        });
        await lock.start();
        expect(await lock.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
        // each successful ownership check moves the lease end: count 20 of them
        const leaseEnds = new Set<number>();
        await eventually(
          () => {
            expect(lock.isLeader).toBe(true);
            leaseEnds.add(lock.leaseExpiresAt ?? 0);
            return leaseEnds.size > 20;
          },
          { intervalMs: 5, what: '20 ownership checks' },
        );
        expect(lost).toEqual([]);
        const released: string[] = [];
        lock.onReleased(() => {
          released.push('released');
        });
        await lock.shutdown();
        expect(released).toEqual(['released']);
        expect(errors).toEqual([]);
      },
    );

    it('the longest durations accepted (2^31 - 1 ms) are accepted by PostgreSQL too', {
      tags: ['pg-major'],
    }, async () => {
      const keys = randomKeys();
      const max = 2 ** 31 - 1;
      const lock = make({ ...keys, serverReleaseMs: max, waitSliceMs: max, healthIntervalMs: 100 });
      const errors: Error[] = [];
      lock.onError((e) => {
        errors.push(e);
      });
      await lock.start();
      expect(await lock.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
      // what was applied bounds the lease: the kernel caps TCP keepalive times well below this
      expect(lock.safety?.serverReleaseMs).toBeLessThanOrEqual(max);
      expect(lock.safety?.settings.idleSessionTimeoutMs).toBe(max);
      expect(errors).toEqual([]);
    });

    it('await using releases the lock on scope exit', { tags: ['node-line'] }, async () => {
      const keys = randomKeys();
      {
        await using lock = make(keys);
        await lock.start();
        await lock.waitForLeadership();
        expect((await lockHolders(databaseUrl(), keys.key1, keys.key2)).length).toBe(1);
      }
      expect(await lockHolders(databaseUrl(), keys.key1, keys.key2)).toEqual([]);
    });

    it('no connection is left after shutting down a leader and a following candidate together', async () => {
      const keys = randomKeys();
      const leader = make(keys);
      const follower = make(keys);
      await leader.start();
      await leader.waitForLeadership();
      await follower.start();
      // following: queued in pg_locks (wait mode), or between attempts (poll mode)
      await eventually(async () =>
        mode === 'wait'
          ? (await lockHolders(databaseUrl(), keys.key1, keys.key2)).some((r) => !r.granted)
          : follower.stats().failedAttempts > 0,
      );
      await Promise.all([leader.shutdown(), follower.shutdown()]);
      await eventually(
        async () => (await sessionsLike(databaseUrl(), `pgleaderlock:${locks.tag}`)).length === 0,
        {
          what: 'sessions closed',
        },
      );
      expect(await sessionsLike(databaseUrl(), `pgleaderlock:${locks.tag}`)).toEqual([]);
      expect(await lockHolders(databaseUrl(), keys.key1, keys.key2)).toEqual([]);
    });
  });
});
