/**
 * Behind a session-mode pooler, a lock session whose pooler check could not be completed
 * (the probe failed or got no answer in time) frees what it holds on its own backend
 * (statements.ts `FREE_STRANDED`) and ends. The election must have let go first, as for a
 * lost connection: when the free reaches the server, `isLeader` is false, the term has
 * ended and its body's signal is aborted (found by the simulation, seed 3812267758; a
 * partition worker's member session, seed 213427130).
 */
import { describe, expect, it } from 'vitest';
import { LockSession } from '../../src/core/lock-session.js';
import { LockState } from '../../src/index.js';
import { FakeClock, FakeDb, flush } from './fakes.js';
import { makeLock } from './helpers.js';

describe('a pooler check that cannot be completed while holding the lock', () => {
  for (const [probe, grace] of [
    ['error', null],
    ['hang', null],
    ['error', 2000],
  ] as const) {
    it(`(probe ${probe}, ${grace ? 'reconnectGraceMs' : 'no grace'}) LeaderLock: the term ends and isLeader is false before the key is freed`, async () => {
      const clock = new FakeClock();
      const db = new FakeDb(clock);
      db.sessionPooler = { probe: 'normal' };
      const h = makeLock({ db, clock, ...(grace ? { reconnectGraceMs: grace } : {}) });
      h.lock.onError(() => {});
      await h.lock.start();
      await flush();
      expect(h.lock.isLeader).toBe(true);
      const term = h.lock.term;
      let bodySignal: AbortSignal | null = null;
      h.lock.runWhileLeader(async ({ signal }) => {
        bodySignal = signal;
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      });
      await flush();
      const atFree: { isLeader: boolean; termAborted: boolean; bodyAborted: boolean; state: string }[] = [];
      db.beforeQuery = (tag) => {
        if (tag !== 'free-stranded') return;
        atFree.push({
          isLeader: h.lock.isLeader,
          termAborted: term?.signal.aborted ?? false,
          bodyAborted: (bodySignal as AbortSignal | null)?.aborted ?? false,
          state: h.lock.state,
        });
      };
      db.sessionPooler.probe = probe;
      await clock.advance(1000 + 500 + 10); // the next check, its probe's deadline
      expect(atFree).toHaveLength(1);
      expect(atFree[0]).toMatchObject({ isLeader: false, termAborted: true, bodyAborted: true });
      expect(db.holder).toBeNull();
      expect(h.lock.isLeader).toBe(false);
      await h.lock.shutdown();
      expect(h.lock.state).toBe(LockState.STOPPED);
    });
  }

  it('the core lock session (both elections, a partition worker’s member session too): it ends for its election before the free is sent', async () => {
    const clock = new FakeClock();
    const db = new FakeDb(clock);
    db.sessionPooler = { probe: 'normal' };
    const o = { clock, queryTimeoutMs: 500, closeTimeoutMs: 100, unref: false };
    const session = await LockSession.open(db.connect, { ...o, key1: 1, key2: 2, freeAll: true });
    await session.prepare({
      applicationName: 'pgleaderlock:w',
      serverReleaseMs: 10_000,
      probe: { connect: () => db.connect(), key1: 1, key2: 2 },
    });
    const died: Error[] = [];
    session.onDeath((err) => died.push(err));
    const seen: { dead: boolean; died: number }[] = [];
    db.beforeQuery = (tag) => {
      if (tag === 'free-stranded') seen.push({ dead: session.dead, died: died.length });
    };
    db.sessionPooler.probe = 'error';
    const guarded = session.guardPooler().catch((err: Error) => err);
    await clock.advance(600);
    const err = await guarded;
    expect(err).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect((err as Error).message).toMatch(/could not be checked/);
    expect(seen).toEqual([{ dead: true, died: 1 }]);
    expect(died[0]).toBe(err);
    expect(session.cause).toBe(err);
    // a listener added after the end is told at once
    const late: Error[] = [];
    session.onDeath((e) => late.push(e));
    expect(late).toEqual([err]);
    await session.close();
  });
});
