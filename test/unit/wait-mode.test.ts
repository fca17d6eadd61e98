import diagnosticsChannel from 'node:diagnostics_channel';
import { describe, expect, it } from 'vitest';
import { CHANNELS, LockState } from '../../src/index.js';
import { flush } from './fakes.js';
import { makeLock } from './helpers.js';

const waitLock = (o = {}) => makeLock({ acquireMode: 'wait', waitSliceMs: 1000, ...o });

describe("acquireMode: 'wait'", () => {
  it('acquires at once when the lock is free, leading before any check; the lease counts from the grant', async () => {
    const h = waitLock();
    const checksAtAcquired: number[] = [];
    const onAcquired = (): void => {
      checksAtAcquired.push(h.db.last.checks);
    };
    diagnosticsChannel.subscribe(CHANNELS.acquired, onAcquired); // published synchronously as the term opens
    await h.lock.start();
    await flush();
    diagnosticsChannel.unsubscribe(CHANNELS.acquired, onAcquired);
    expect(h.lock.isLeader).toBe(true);
    const q = h.db.last.queries;
    expect(q.some((t) => t.includes('pg_advisory_lock('))).toBe(true);
    expect(checksAtAcquired).toEqual([0]); // leading before any check
    expect(h.lock.leaseExpiresAt).toBe(0 + (h.lock.safety?.leaseMs ?? Number.NaN));
    // the grant statement itself announced the new leader (the `acquired` event)
    expect(h.db.events.map((e) => JSON.parse(e) as { e: string; id: string })).toEqual([
      { e: 'acquired', id: h.lock.id, s: expect.any(String), p: 0, b: expect.any(Number) },
    ]);
    const slice = Number(h.db.last.settings.get('lock_timeout'));
    expect(slice).toBeGreaterThanOrEqual(900); // waitSliceMs 1000, ±10 % per session
    expect(slice).toBeLessThanOrEqual(1100);
    await h.lock.shutdown();
  });

  it('a follower asks for the lock three round trips after connecting: the survey; PREPARE with the settings and their read-back; LISTEN with its NOTIFY and the holder read', async () => {
    const h = waitLock();
    h.db.takeByOther();
    await h.lock.start();
    for (let i = 0; i < 200 && h.db.waiters.length === 0; i++) await flush();
    expect(h.db.waiters).toHaveLength(1);
    const names = h.db.last.queries.map((q) => /^\/\* pgleaderlock:([a-z-]+) \*\//.exec(q)?.[1] ?? 'other');
    expect(names).toEqual(['survey', 'prepare', 'listen', 'wait-lock']);
    // the settings applied all the same (read back: the slice, ±10 %)
    const slice = Number(h.db.last.settings.get('lock_timeout'));
    expect(slice).toBeGreaterThanOrEqual(900);
    expect(slice).toBeLessThanOrEqual(1100);
    expect(h.lock.isLeader).toBe(false);
    await h.lock.shutdown();
  });

  it('the lease counts from the grant as the server timed it, not from the start of a long wait', async () => {
    const h = waitLock({ waitSliceMs: 60_000 });
    h.db.takeByOther();
    await h.lock.start();
    await h.clock.advance(20_000); // waiting for 20 s, longer than the lease (2.7 s)
    h.db.holder?.end();
    await flush();
    expect(h.lock.isLeader).toBe(true);
    expect(h.lock.leaseExpiresAt).toBe(20_000 + (h.lock.safety?.leaseMs ?? Number.NaN));
    await h.lock.shutdown();
  });

  it('waits server-side: no query while waiting, granted when the holder lets go', async () => {
    const h = waitLock();
    h.db.takeByOther();
    const other = h.db.holder;
    await h.lock.start();
    // queued server-side: the session's set-up round trips are over
    for (let i = 0; i < 200 && h.db.waiters.length === 0; i++) await flush();
    expect(h.db.waiters).toHaveLength(1);
    expect(h.lock.state).toBe(LockState.ACQUIRING);
    const before = h.db.last.queries.length;
    // up to 1 ms short of this session's slice (waitSliceMs ± 10 %: as short as 900 ms, when
    // advancing a fixed 900 ms saw the slice end, a late-grant read and a re-queue: 7 → 9)
    const slice = Number(h.db.last.settings.get('lock_timeout'));
    expect(slice).toBeGreaterThanOrEqual(900);
    await h.clock.advance(slice - 1);
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

  it('a grant read after its lease ran out opens no term until a check proves ownership; a check that finds the lock gone is no leadership', async () => {
    for (const lostMeanwhile of [false, true]) {
      const h = waitLock({ autoReacquire: false });
      h.db.takeByOther();
      const acquired: number[] = [];
      h.lock.onAcquired(() => {
        acquired.push(h.clock.now());
      });
      await h.lock.start();
      await flush();
      h.db.freezeClientOnGrantMs = 5000; // the process freezes between the server's grant and reading it
      h.db.silentLoss = lostMeanwhile;
      h.db.holder?.end();
      await h.clock.advance(0);
      expect(h.db.last.checks).toBe(1);
      if (lostMeanwhile) {
        expect(acquired).toEqual([]);
        expect(h.lock.state).toBe(LockState.STOPPED);
        expect(h.db.holder).toBeNull();
      } else {
        expect(acquired).toEqual([5000]);
        expect(h.lock.isLeader).toBe(true);
        await h.lock.shutdown();
      }
    }
  });
});
