import { describe, expect, it } from 'vitest';
import { LockState } from '../../src/index.js';
import { flush } from './fakes.js';
import { makeLock } from './helpers.js';

const waitLock = (o = {}) => makeLock({ acquireMode: 'wait', waitSliceMs: 1000, ...o });

describe("acquireMode: 'wait'", () => {
  it('acquires at once when the lock is free, then checks ownership at once', async () => {
    const h = waitLock();
    await h.lock.start();
    await flush();
    expect(h.lock.isLeader).toBe(true);
    const q = h.db.last.queries;
    expect(q.some((t) => t.includes('pg_advisory_lock('))).toBe(true);
    expect(h.db.last.checks).toBe(1); // the check that verifies a grant
    const slice = Number(h.db.last.settings.get('lock_timeout'));
    expect(slice).toBeGreaterThanOrEqual(900); // waitSliceMs 1000, ±10 % per session
    expect(slice).toBeLessThanOrEqual(1100);
    await h.lock.shutdown();
  });

  it('waits server-side: no query while waiting, granted when the holder lets go', async () => {
    const h = waitLock();
    h.db.takeByOther();
    const other = h.db.holder;
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.ACQUIRING);
    const before = h.db.last.queries.length;
    await h.clock.advance(900);
    expect(h.db.last.queries.length).toBe(before);
    other?.end(); // the leader releases
    await flush();
    expect(h.lock.isLeader).toBe(true);
    await h.lock.shutdown();
  });

  it('a slice that ends (lock_timeout) fires onAcquireFailed and re-queues at once, without a back-off', async () => {
    const h = waitLock({ retryStrategy: { nextDelayMs: () => 60_000 } });
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    h.take();
    const slice = Number(h.db.last.settings.get('lock_timeout')); // 1000 ± 10 %
    await h.clock.advance(slice);
    expect(h.take()).toEqual(['acquiring->follower', 'acquireFailed', 'follower->acquiring']);
    await h.clock.advance(slice);
    expect(h.events.filter((e) => e === 'acquireFailed')).toHaveLength(2);
    await h.lock.shutdown();
  });

  it('shutdown during a wait ends it at once and leaves no connection', async () => {
    const h = waitLock({ waitSliceMs: 100_000 });
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.ACQUIRING);
    await h.lock.shutdown();
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.open).toHaveLength(0);
    expect(h.db.waiters).toHaveLength(0);
  });

  it('validates acquireMode and waitSliceMs', () => {
    expect(() => makeLock({ acquireMode: 'sometimes' as 'wait' })).toThrow(
      /acquireMode must be 'wait' or 'poll'/,
    );
    expect(() => waitLock({ waitSliceMs: 0 })).toThrow(/waitSliceMs must be greater than 0/);
  });

  it('a grant is verified by a check, and the lease counts from that check, not from the grant', async () => {
    const h = waitLock({ waitSliceMs: 100_000 });
    h.db.takeByOther();
    const other = h.db.holder;
    await h.lock.start();
    await flush();
    await h.clock.advance(5000); // a long wait: a lease counted from the wait's send would be over
    other?.end();
    await flush();
    expect(h.lock.isLeader).toBe(true);
    expect(h.lock.leaseExpiresAt).toBe(5000 + 2700);
    await h.lock.shutdown();
  });

  it('a grant whose check finds the lock gone is not leadership', async () => {
    const h = waitLock({ autoReacquire: false });
    h.db.silentLoss = true; // the check reports the lock missing
    await h.lock.start();
    await flush();
    expect(h.events).not.toContain('acquired');
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.holder).toBeNull();
  });
});
