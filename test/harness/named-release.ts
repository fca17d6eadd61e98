/**
 * A follower named by a release that reaches it before the unlock (docs/choosing-the-leader.md,
 * poll mode), shared by test/integration/succession.test.ts (it leads inside its window of
 * attempts, and only inside it) and test/timing/succession.test.ts (how soon).
 */
import { performance } from 'node:perf_hooks';
import { forwardPayload } from '../../src/core/handover.js';
import { channelFor } from '../../src/core/keys.js';
import { FixedInterval, type LeaderLock } from '../../src/index.js';
import { adminClient, databaseUrl, eventually, randomKeys, serverNowMs } from './db.js';
import type { LockFactory } from './locks.js';

/**
 * A raw client holds the key; a poll-mode follower backing off for 10 s waits for it; the
 * holder sends the `released` event a leader's release sends before its unlock, naming
 * the follower, and unlocks `unlockAfterMs` later. Returns the follower and the unlock time.
 */
export async function namedBeforeUnlock(
  locks: LockFactory,
  unlockAfterMs: number,
): Promise<{ b: LeaderLock; unlockedAt: number }> {
  const keys = randomKeys();
  await using holder = await adminClient(databaseUrl());
  await holder.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
  const b = locks.make({
    ...keys,
    acquireMode: 'poll',
    retryStrategy: new FixedInterval({ intervalMs: 10_000 }),
  });
  await b.start();
  await eventually(() => b.state === 'follower', { what: 'b to back off (the key held)' });
  const at = await serverNowMs(holder);
  const directive = { to: b.id, back: null, until: at + 5000, backUntil: at + 10_000 };
  await holder.query('SELECT pg_notify($1, $2)', [
    channelFor(keys.key1, keys.key2),
    forwardPayload('old-leader', 'old-session', directive),
  ]);
  await new Promise((r) => setTimeout(r, unlockAfterMs));
  const unlockedAt = performance.now();
  await holder.query('SELECT pg_advisory_unlock($1, $2)', [keys.key1, keys.key2]);
  return { b, unlockedAt };
}
