/**
 * The takeover delay (`takeoverDelayMs`): a grant that cannot prove the previous holder
 * released cleanly holds the lock (state `pending`, checking ownership) before its term
 * opens; a proven clean handover does not wait. Fake connection and manual clock.
 */
import { describe, expect, it } from 'vitest';
import { FixedInterval, LockState } from '../../src/index.js';
import { FakeDb, flush } from './fakes.js';
import { makeLock, startLeader } from './helpers.js';

const DELAY = { takeoverDelayMs: 1000 };

describe('takeover delay', () => {
  it('with nothing to prove a clean handover (a first start), the term opens only after takeoverDelayMs', async () => {
    const h = makeLock(DELAY);
    const delays: number[] = [];
    h.lock.onTakeoverFence((f) => {
      delays.push(f.delayMs);
    });
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.PENDING);
    expect(h.lock.isLeader).toBe(false);
    expect(h.lock.term).toBeNull();
    expect(h.db.holder).toBe(h.db.last); // held meanwhile
    expect(h.db.last.queries.filter((q) => q.includes('pgleaderlock:pending')).length).toBeGreaterThan(0);
    await h.clock.advance(999);
    expect(h.lock.state).toBe(LockState.PENDING);
    expect(h.take()).toEqual(['stopped->follower', 'follower->acquiring']);
    await h.clock.advance(1);
    expect(h.lock.isLeader).toBe(true);
    // onStateChange reports ACQUIRING -> LEADER when the term opens; `pending` is never reported
    expect(h.take()).toEqual(['acquiring->leader', 'acquired']);
    expect(delays).toEqual([1000]);
    expect(h.lock.stats().takeoverFences).toBe(1);
    await h.lock.shutdown();
  });

  it('keeps verifying ownership while pending: a lock lost meanwhile is never leadership', async () => {
    const h = makeLock({ ...DELAY, autoReacquire: false });
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.PENDING);
    h.db.silentLoss = true;
    await h.clock.advance(1000);
    expect(h.events).not.toContain('acquired');
    expect(h.events).toContain('lost');
    expect(h.lock.state).toBe(LockState.STOPPED);
  });

  it('a stop while pending releases the lock and never opens a term', async () => {
    const h = makeLock(DELAY);
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.PENDING);
    await h.lock.shutdown();
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.events).not.toContain('acquired');
    expect(h.db.holder).toBeNull();
  });

  it.each(['stepDown', 'shutdown'] as const)(
    'a clean handover (%s) is proven to the next holder: no delay',
    async (how) => {
      const db = new FakeDb();
      const a = makeLock({ ...DELAY, acquireMode: 'wait', waitSliceMs: 60_000, db });
      const b = makeLock({ ...DELAY, acquireMode: 'wait', waitSliceMs: 60_000, db, clock: a.clock });
      await a.lock.start();
      await a.clock.advance(1000); // a's own cold start is delayed
      expect(a.lock.isLeader).toBe(true);
      await b.lock.start();
      await flush();
      expect(b.lock.state).toBe(LockState.ACQUIRING); // waiting in the server
      if (how === 'stepDown') await a.lock.stepDown();
      else await a.lock.shutdown();
      await flush();
      expect(b.lock.isLeader).toBe(true);
      expect(b.lock.stats().takeoverFences).toBe(0);
      await Promise.all([a.lock.shutdown(), b.lock.shutdown()]);
    },
  );

  it('an unclean handover (the holder\u2019s session died) is delayed', async () => {
    const db = new FakeDb();
    const a = makeLock({ ...DELAY, acquireMode: 'wait', waitSliceMs: 60_000, db });
    const b = makeLock({ ...DELAY, acquireMode: 'wait', waitSliceMs: 60_000, db, clock: a.clock });
    await a.lock.start();
    await a.clock.advance(1000);
    await b.lock.start();
    await flush();
    const holder = db.holder;
    holder?.kill(); // terminated: no `released` event
    await flush();
    expect(b.lock.state).toBe(LockState.PENDING);
    await a.clock.advance(1000);
    expect(b.lock.isLeader).toBe(true);
    await Promise.all([a.lock.shutdown(), b.lock.shutdown()]);
  });

  it('with fencing, the epoch row proves a clean release to a session that saw no event (connected later)', async () => {
    const db = new FakeDb();
    const a = makeLock({ ...DELAY, fencing: true, db });
    await a.lock.start();
    await a.clock.advance(1000); // first ever: delayed
    expect(a.lock.term?.epoch).toBe(1n);
    await a.lock.shutdown(); // marks epoch 1 released, then unlocks
    const b = makeLock({ ...DELAY, fencing: true, db, clock: a.clock }); // connects after the release
    await b.lock.start();
    await flush();
    expect(b.lock.isLeader).toBe(true);
    expect(b.lock.term?.epoch).toBe(2n);
    expect(b.lock.stats().takeoverFences).toBe(0);
    await b.lock.shutdown();
  });

  it('a recovered leadership (RECONNECTING) that cannot prove nobody led meanwhile is delayed too', async () => {
    const h = makeLock({
      ...DELAY,
      reconnectGraceMs: 3000,
      retryStrategy: new FixedInterval({ intervalMs: 10 }),
    });
    await h.lock.start();
    await h.clock.advance(1000);
    expect(h.lock.isLeader).toBe(true);
    h.take();
    h.db.last.kill();
    await flush();
    expect(h.lock.state).toBe(LockState.PENDING); // re-acquired on a new session, delayed
    await h.clock.advance(1000);
    expect(h.lock.isLeader).toBe(true);
    expect(h.take()).toEqual(['leader->reconnecting', 'reconnecting->leader']);
    await h.lock.shutdown();
  });

  it('takeoverDelayMs: 0 turns the delay off', async () => {
    const h = makeLock({ takeoverDelayMs: 0 });
    await startLeader(h);
    expect(h.lock.stats().takeoverFences).toBe(0);
    await h.lock.shutdown();
  });
});
