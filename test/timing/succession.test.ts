/**
 * The figures of docs/choosing-the-leader.md, in both acquire modes, against real
 * PostgreSQL: how soon a candidate with a higher priority leads after it starts, and how
 * soon `handoverTo(id)` has the named successor leading. p50 of several trials, each from a
 * settled leader and a queued successor; the takeover delay is the default (250 ms), so a
 * handover that was not proven clean would show it. And how soon a poll-mode follower named
 * by a release that reached it before the unlock leads after the unlock (it attempts every
 * 5 ms while the key is held).
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import type { LeaderLock } from '../../src/index.js';
import { bareUnlock, expectNearBaseline } from '../harness/baseline.js';
import { databaseUrl, eventually, listening, lockHolders, randomKeys, sessionsLike } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { namedBeforeUnlock } from '../harness/named-release.js';
import { median } from '../harness/stats.js';

const locks = useLocks();
const TRIALS = 5;

/** When `lock`'s next term opens (its onAcquired), on performance.now(). */
function nextTerm(lock: LeaderLock): Promise<number> {
  return new Promise((resolve) => {
    const off = new AbortController();
    lock.onAcquired(
      () => {
        off.abort();
        resolve(performance.now());
      },
      { signal: off.signal },
    );
  });
}

/**
 * The bare path of a newcomer that takes a key from a holder that hands it over when told, on
 * a key of its own: a bare holder LISTENs on a channel; a bare newcomer connects, NOTIFYs it
 * and queues in pg_advisory_lock; the holder unlocks when it hears it. Ms from the newcomer's
 * connect() to its grant: what a higher-priority candidate's start() → term costs without the
 * library (its connection, its announcement, the leader's release, the grant).
 */
async function bareNewcomer(url: string): Promise<number> {
  const k = randomKeys();
  const channel = `pgleaderlock_test_bare_${k.key1}_${k.key2}`.replaceAll('-', 'm');
  const client = (): pg.Client => {
    const c = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-bare' });
    c.on('error', () => {});
    return c;
  };
  const [holder, newcomer] = [client(), client()];
  try {
    await holder.connect();
    await holder.query('SELECT pg_advisory_lock($1, $2)', [k.key1, k.key2]);
    await holder.query(`LISTEN ${channel}`);
    holder.on('notification', () => {
      holder.query('SELECT pg_advisory_unlock($1, $2)', [k.key1, k.key2]).catch(() => {});
    });
    const t0 = performance.now();
    await newcomer.connect();
    await newcomer.query(`NOTIFY ${channel}`);
    await newcomer.query('SELECT pg_advisory_lock($1, $2)', [k.key1, k.key2]);
    return performance.now() - t0;
  } finally {
    await Promise.all([holder, newcomer].map((c) => c.end().catch(() => {})));
  }
}

describe.each(['wait', 'poll'] as const)('choosing who leads, figures (%s mode)', (mode) => {
  const common = (keys: { key1: number; key2: number }) => ({
    ...keys,
    acquireMode: mode,
    takeoverDelayMs: 250,
    waitSliceMs: 30_000,
  });

  it.each([
    ['a short ASCII id', ''],
    ['a 57-byte id', '-billing-scheduler-deployment-7f9c8d6b5-x2k9p-1'],
    ['a non-ASCII id', '-höher-priorität'],
  ])(
    'a candidate with %s and a higher priority leads within 2 × a bare newcomer’s connect → grant + 50 ms of its start() (p50, interleaved), with no takeover delay',
    async (_what, suffix) => {
      const took: number[] = [];
      const bare: number[] = [];
      for (let i = 0; i < TRIALS; i++) {
        if (i % 2 === 0) bare.push(await bareNewcomer(databaseUrl()));
        const keys = randomKeys();
        const low = locks.make({ ...common(keys), priority: 0 });
        await low.start();
        expect(await low.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
        const high = locks.make({
          ...common(keys),
          priority: 1,
          ...(suffix ? { id: `${locks.tag}-${i}${suffix}` } : {}),
        });
        let fenced = false;
        high.onTakeoverFence(() => {
          fenced = true;
        });
        const leads = nextTerm(high);
        const t0 = performance.now();
        await high.start();
        took.push((await leads) - t0);
        expect(fenced).toBe(false);
        await Promise.all([low.shutdown(), high.shutdown()]);
        if (i % 2 === 1) bare.push(await bareNewcomer(databaseUrl()));
      }
      console.log(
        `[succession ${mode}] priority (${_what}): start() → leading: ${took.map((t) => t.toFixed(1)).join(', ')} ms; p50 ${median(took).toFixed(1)}; bare newcomer ${bare.map((t) => t.toFixed(1)).join(', ')} ms, p50 ${median(bare).toFixed(1)}`,
      );
      // 40–65 ms measured on a quiet machine: mostly its own connection and session set-up
      expectNearBaseline(
        `${mode} mode, priority (${_what}): start() → leading, against a bare newcomer's connect → NOTIFY → grant`,
        { subject: took, baseline: bare },
        { ratio: 2, overMs: 50 },
      );
    },
  );

  it('handoverTo(id): the named successor leads within 2 × a bare unlock → grant + 40 ms of the call (p50, interleaved), past a waiter ahead of it in the queue', async () => {
    const took: number[] = [];
    const bare: number[] = [];
    for (let i = 0; i < TRIALS; i++) {
      if (i % 2 === 0) bare.push(await bareUnlock(databaseUrl()));
      const keys = randomKeys();
      const a = locks.make(common(keys));
      await a.start();
      expect(await a.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      const b = locks.make(common(keys));
      const c = locks.make(common(keys));
      for (const l of [b, c]) {
        await l.start();
        await eventually(
          async () => {
            const [s] = await sessionsLike(databaseUrl(), `pgleaderlock:${l.id}`);
            if (!s) return false;
            if (mode === 'poll') return listening(s); // set up: it LISTENs (db.ts)
            return (await lockHolders(databaseUrl(), keys.key1, keys.key2)).some(
              (h) => !h.granted && h.pid === s.pid,
            );
          },
          { what: `${l.id} to wait` },
        );
      }
      const leads = nextTerm(c);
      const t0 = performance.now();
      await a.handoverTo(c.id);
      took.push((await leads) - t0);
      expect(b.isLeader).toBe(false);
      await Promise.all([a.shutdown(), b.shutdown(), c.shutdown()]);
      if (i % 2 === 1) bare.push(await bareUnlock(databaseUrl()));
    }
    console.log(
      `[succession ${mode}] handoverTo: call → successor leading: ${took.map((t) => t.toFixed(1)).join(', ')} ms; p50 ${median(took).toFixed(1)}; bare unlock → grant ${bare.map((t) => t.toFixed(1)).join(', ')} ms, p50 ${median(bare).toFixed(1)}`,
    );
    // 9–21 ms measured on a quiet machine (19.1 and 31.4 at load 5–6)
    expectNearBaseline(
      `${mode} mode: handoverTo(id) → the named successor leading, against a bare unlock → a bare waiter granted`,
      { subject: took, baseline: bare },
      { ratio: 2, overMs: 40 },
    );
  });
});

describe('choosing who leads, a named poll-mode follower', () => {
  it.each([50, 800])(
    'a release that names a poll-mode follower reaches it %i ms before the unlock: it leads within 100 ms of the unlock',
    async (beforeMs) => {
      const { b, unlockedAt } = await namedBeforeUnlock(locks, beforeMs);
      expect(await b.waitForLeadership({ timeoutMs: 2000 })).toBe(true);
      const took = performance.now() - unlockedAt;
      console.log(
        `[succession poll] named ${beforeMs} ms before the unlock: leading ${took.toFixed(1)} ms after it`,
      );
      // bound: timing/succession-named-poll
      expect(took).toBeLessThan(100); // 4–21 ms measured: it attempts every 5 ms
    },
  );
});
