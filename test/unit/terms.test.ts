import diagnosticsChannel from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import { CHANNELS, LeaderWorkError, LockState, type Term, TermEndedError } from '../../src/index.js';
import { flush } from './fakes.js';
import { makeLock, startLeader } from './helpers.js';

describe('leadership terms', () => {
  it('onAcquired receives the term; lock.term is it while leader; ids increase', async () => {
    const h = makeLock();
    const seen: Term[] = [];
    h.lock.onAcquired((term) => {
      seen.push(term);
    });
    expect(h.lock.term).toBeNull();
    await startLeader(h);
    await flush();
    expect(seen).toHaveLength(1);
    expect(h.lock.term).toBe(seen[0]);
    expect(seen[0]).toMatchObject({ id: 1, epoch: null });
    expect(seen[0]?.acquiredAt).toBeInstanceOf(Date);
    h.db.last.kill(); // lost, then re-acquired at once (no grace)
    await flush();
    expect(seen.map((t) => t.id)).toEqual([1, 2]);
    expect(seen[0]?.signal.aborted).toBe(true);
    expect(seen[0]?.signal.reason).toBeInstanceOf(TermEndedError);
    expect(String(seen[0]?.signal.reason)).toMatch(/term 1 ended: connection lost/);
    await h.lock.shutdown();
    expect(seen[1]?.signal.aborted).toBe(true);
    expect(h.lock.term).toBeNull();
  });

  it.each([
    ['step-down', async (h: ReturnType<typeof makeLock>) => h.lock.stepDown(), /step-down/, true],
    ['shutdown', async (h: ReturnType<typeof makeLock>) => h.lock.shutdown(), /shutdown/, true],
    [
      'loss',
      async (h: ReturnType<typeof makeLock>) => {
        h.db.last.kill();
        await flush();
      },
      /connection lost/,
      false,
    ],
  ])('the term signal aborts synchronously on %s', async (_name, end, reason, voluntary) => {
    const h = makeLock({ autoReacquire: false });
    await startLeader(h);
    const term = h.lock.term;
    let heldAtAbort: boolean | null = null;
    term?.signal.addEventListener('abort', () => {
      heldAtAbort = h.db.holder !== null;
    });
    await end(h);
    expect(term?.signal.aborted).toBe(true);
    expect(String(term?.signal.reason)).toMatch(reason);
    // a voluntary end aborts the term while the lock is still held: work stops before the unlock
    expect(heldAtAbort).toBe(voluntary);
  });

  it('entering RECONNECTING ends the term; a recovered leadership opens a new one (no onAcquired)', async () => {
    const h = makeLock({ reconnectGraceMs: 3000 });
    const acquired: number[] = [];
    h.lock.onAcquired((t) => {
      acquired.push(t.id);
    });
    await startLeader(h);
    await flush();
    const first = h.lock.term;
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    expect(h.lock.state).toBe(LockState.RECONNECTING);
    expect(first?.signal.aborted).toBe(true);
    expect(String(first?.signal.reason)).toMatch(/connection lost/);
    expect(h.lock.term).toBeNull();
    h.db.connectBehaviour = 'normal';
    await h.clock.advance(1000);
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(h.lock.term?.id).toBe(2);
    expect(acquired).toEqual([1]);
    await h.lock.shutdown();
  });
});

describe('runWhileLeader', () => {
  it('runs in each term, restarts in the next, never two runs at once', async () => {
    const h = makeLock();
    let alive = 0;
    let maxAlive = 0;
    const runs: number[] = [];
    const handle = h.lock.runWhileLeader(async (term) => {
      alive += 1;
      maxAlive = Math.max(maxAlive, alive);
      runs.push(term.id);
      await new Promise<void>((resolve) =>
        term.signal.addEventListener('abort', () => resolve(), { once: true }),
      );
      await flush(2); // takes a moment to wind down
      alive -= 1;
    });
    await startLeader(h);
    await flush();
    for (let i = 0; i < 3; i++) {
      h.db.last.kill();
      await flush();
    }
    await handle.stop(); // aborts the running term-4 run and waits for it
    expect(runs).toEqual([1, 2, 3, 4]);
    expect(maxAlive).toBe(1);
    expect(alive).toBe(0);
    await h.lock.shutdown();
  });

  it('starts at once when registered while already leader; errors go to onError; abort is not an error', async () => {
    const h = makeLock({ autoReacquire: false });
    await startLeader(h);
    const handle = h.lock.runWhileLeader(async (term) => {
      if (term.id === 1) throw new Error('work failed');
    });
    await flush();
    expect(h.errors.find((e) => e instanceof LeaderWorkError)?.message).toMatch(/term 1: work failed/);
    await handle.stop();
    const h2 = makeLock({ autoReacquire: false });
    await startLeader(h2);
    h2.lock.runWhileLeader((term) => {
      return new Promise((_, reject) =>
        term.signal.addEventListener('abort', () => reject(term.signal.reason)),
      );
    });
    await h2.lock.shutdown();
    expect(h2.errors.filter((e) => e instanceof LeaderWorkError)).toEqual([]);
  });

  it('stepDown and shutdown wait for the run to settle before unlocking', async () => {
    const h = makeLock();
    const order: string[] = [];
    h.lock.runWhileLeader(async (term) => {
      await new Promise<void>((resolve) =>
        term.signal.addEventListener('abort', () => resolve(), { once: true }),
      );
      order.push(`run settled (holder still us: ${h.db.holder !== null})`);
    });
    h.lock.onReleased(() => {
      order.push('released');
    });
    await startLeader(h);
    await h.lock.stepDown();
    expect(order).toEqual(['run settled (holder still us: true)', 'released']);
    await h.lock.shutdown();
  });

  it('a run that ignores its signal delays the release only up to the timeout', async () => {
    const h = makeLock();
    h.lock.runWhileLeader(() => new Promise(() => {})); // never settles
    await startLeader(h);
    const done = h.lock.shutdown({ timeoutMs: 500 });
    await h.clock.advance(500);
    await done;
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.holder).toBeNull();
  });
});

describe('stats and diagnostics_channel', () => {
  it('counts acquisitions, losses, releases, failed attempts, reconnects, leader time, last error', async () => {
    const h = makeLock({ reconnectGraceMs: 2000 });
    await startLeader(h);
    await h.clock.advance(1500);
    h.db.last.kill();
    await flush();
    await h.clock.advance(0);
    expect(h.lock.stats()).toMatchObject({ reconnects: 1, recoveries: 1, acquisitions: 1 });
    await h.lock.stepDown();
    h.db.takeByOther();
    await h.clock.advance(2000);
    const s = h.lock.stats();
    expect(s).toMatchObject({ state: 'follower', term: null, acquisitions: 1, releases: 1, losses: 0 });
    expect(s.failedAttempts).toBeGreaterThanOrEqual(1);
    expect(s.leaderMs).toBe(1500);
    await h.lock.shutdown();
  });

  it('publishes state, acquired, lost and released on node:diagnostics_channel', async () => {
    const got: string[] = [];
    const subs = Object.entries(CHANNELS).map(([kind, name]) => {
      const fn = (m: unknown) => {
        const msg = m as { id: string; from?: string; to?: string };
        got.push(kind === 'state' ? `state:${msg.from}->${msg.to}` : kind);
      };
      diagnosticsChannel.subscribe(name, fn);
      return () => diagnosticsChannel.unsubscribe(name, fn);
    });
    try {
      const h = makeLock();
      await startLeader(h);
      h.db.last.kill();
      await flush();
      await h.lock.shutdown();
      expect(got).toEqual(
        expect.arrayContaining([
          'state:stopped->follower',
          'acquired',
          'lost',
          'released',
          'state:releasing->stopped',
        ]),
      );
    } finally {
      for (const off of subs) off();
    }
  });
});

describe('lease lapse', () => {
  it('a lease that runs out unrenewed ends the term at once (leader work stops), before the check deadline', async () => {
    const h = makeLock({ autoReacquire: false });
    await startLeader(h);
    const term = h.lock.term;
    h.db.behaviour.check = 'hang';
    h.clock.freeze(2800); // past the 2700 ms lease; the overdue health check is sent and hangs
    await h.clock.advance(0);
    expect(h.lock.state).toBe(LockState.LEADER); // the check has not failed yet
    expect(h.lock.isLeader).toBe(false);
    expect(term?.signal.aborted).toBe(true);
    expect(String(term?.signal.reason)).toMatch(/lease expired/);
    expect(h.lock.term).toBeNull();
    await h.clock.advance(500); // the hung check hits its deadline: a loss
    expect(h.lock.state).toBe(LockState.STOPPED);
  });
});
