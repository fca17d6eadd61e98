/**
 * lock.health(): liveness and readiness as a probe sees them. Fake connection and manual
 * clock; the HTTP endpoints over a running `pgleaderlock run` are in test/cli/http.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { assessHealth } from '../../src/core/lock-health.js';
import { FixedInterval, LockState } from '../../src/index.js';
import { FakeDb, flush } from './fakes.js';
import { makeLock, startLeader } from './helpers.js';

describe('lock.health()', () => {
  it('before start: live, not ready ("not started")', () => {
    const h = makeLock();
    expect(h.lock.health()).toEqual({
      live: true,
      ready: false,
      state: LockState.STOPPED,
      isLeader: false,
      reasons: ['not started'],
    });
  });

  it('a leader and a follower are both live and ready, for as long as they run normally', async () => {
    const db = new FakeDb();
    const a = makeLock({ db });
    const b = makeLock({ db });
    await startLeader(a);
    await b.lock.start();
    await flush();
    expect(b.lock.state).toBe(LockState.FOLLOWER);
    for (let i = 0; i < 6; i++) {
      await a.clock.advance(10_000); // a minute of health checks and follower polls
      expect(a.lock.health()).toMatchObject({ live: true, ready: true, isLeader: true, reasons: [] });
      expect(b.lock.health()).toMatchObject({ live: true, ready: true, isLeader: false, reasons: [] });
    }
    await a.lock.shutdown();
    await b.lock.shutdown();
  });

  it('a frozen event loop turns live false, and it is still reported after the loop woke', async () => {
    const h = makeLock();
    await startLeader(h);
    h.clock.freeze(3000); // nothing ran for 3 s
    const frozen = h.lock.health();
    expect(frozen.live).toBe(false);
    expect(frozen.ready).toBe(false);
    expect(frozen.reasons).toContain('the event loop was blocked for at least 2500 ms (in the last 10 s)');
    // the heartbeat runs first when the loop wakes; a probe answered after it still sees the block
    await h.clock.advance(1);
    expect(h.lock.health().live).toBe(false);
    await h.clock.advance(10_000);
    expect(h.lock.health()).toMatchObject({ live: true, ready: true, reasons: [] });
    await h.lock.shutdown();
  });

  it('a callback that has not returned past callbackTimeoutMs turns live false until it returns', async () => {
    const h = makeLock({ callbackTimeoutMs: 2000 });
    let release = (): void => {};
    h.lock.onAcquired(() => new Promise<void>((resolve) => (release = resolve)));
    await startLeader(h);
    await h.clock.advance(1999);
    expect(h.lock.health().live).toBe(true);
    await h.clock.advance(2);
    const hung = h.lock.health();
    expect(hung.live).toBe(false);
    expect(hung.reasons).toContainEqual(
      expect.stringMatching(/onAcquired callback has not returned after 2001 ms \(callbackTimeoutMs 2000\)/),
    );
    release();
    await flush();
    expect(h.lock.health().live).toBe(true);
    await h.lock.shutdown();
  });

  it('leader work that ignores its abort turns live false callbackTimeoutMs after its term ended', async () => {
    const h = makeLock({ callbackTimeoutMs: 1000 });
    let finish = (): void => {};
    h.lock.runWhileLeader(async (term) => {
      if (term.id === 1)
        await new Promise<void>((resolve) => (finish = resolve)); // ignores its abort
      else await new Promise((resolve) => term.signal.addEventListener('abort', resolve));
    });
    await startLeader(h);
    h.db.silentLoss = true; // the next check finds the lock gone: the term ends
    await h.clock.advance(1000);
    expect(h.lock.stats().losses).toBe(1); // term 1 ended (the lock may lead again, in term 2)
    await h.clock.advance(900);
    expect(h.lock.health().live).toBe(true);
    await h.clock.advance(200);
    const health = h.lock.health();
    expect(health.live).toBe(false);
    expect(health.reasons).toContainEqual(
      expect.stringMatching(
        /leader work \(runWhileLeader\) of term 1 is still running 1100 ms after its term ended/,
      ),
    );
    finish();
    await flush();
    expect(h.lock.health().live).toBe(true);
    await h.lock.shutdown();
  });

  it('a follower whose attempts fail is live but not ready, and ready again once one succeeds', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 1000 }) });
    h.db.connectBehaviour = 'error';
    await h.lock.start();
    await h.clock.advance(10);
    const failing = h.lock.health();
    expect(failing.live).toBe(true);
    expect(failing.ready).toBe(false);
    expect(failing.reasons[0]).toMatch(/^the last attempt failed: /);
    h.db.connectBehaviour = 'normal';
    await h.clock.advance(1000);
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(h.lock.health()).toMatchObject({ live: true, ready: true, reasons: [] });
    await h.lock.shutdown();
  });

  it('a lock that stopped on its own (a loss without autoReacquire) is not live; after shutdown() it is', async () => {
    const h = makeLock({ autoReacquire: false });
    await startLeader(h);
    h.db.silentLoss = true; // the health check finds the lock gone: a loss
    await h.clock.advance(1000);
    expect(h.lock.state).toBe(LockState.STOPPED);
    const stopped = h.lock.health();
    expect(stopped.live).toBe(false);
    expect(stopped.reasons[0]).toMatch(/^the lock stopped on its own/);
    const fresh = makeLock();
    await startLeader(fresh);
    await fresh.lock.shutdown();
    expect(fresh.lock.health()).toMatchObject({ live: true, ready: false, reasons: ['not started'] });
  });

  it('a loop that has made no progress for longer than its steps can take is not live', () => {
    const inputs = {
      state: LockState.LEADER,
      isLeader: true,
      running: true,
      stopping: false,
      stoppedOnItsOwn: null,
      quietMs: 9000,
      quietBoundMs: 9000,
      blockedMs: null,
      hungCallback: null,
      overdueRun: null,
      callbackTimeoutMs: 5000,
      failing: null,
    };
    expect(assessHealth(inputs).live).toBe(true);
    const wedged = assessHealth({ ...inputs, quietMs: 9001 });
    expect(wedged.live).toBe(false);
    expect(wedged.reasons).toEqual([
      "the lock's loop has made no progress for 9001 ms in state leader (its steps take at most 9000 ms)",
    ]);
    // a stopping lock is bounded by its own timeout instead
    expect(assessHealth({ ...inputs, quietMs: 9001, stopping: true }).live).toBe(true);
  });
});
