import { describe, expect, it, vi } from 'vitest';
import { FixedInterval, LeaderLock, LockState, ShutdownError } from '../../src/index.js';
import { Leadership } from '../../src/leader/leadership.js';
import { FakeClock, FakeDb, flush } from './fakes.js';
import { makeLock, startLeader } from './helpers.js';

describe('callbacks', () => {
  it('run in registration order, several per event, sync and async, serialised in transition order', async () => {
    const h = makeLock();
    const order: string[] = [];
    h.lock.onAcquired(async () => {
      await new Promise((r) => setImmediate(r));
      order.push('acquired-1');
    });
    h.lock.onAcquired(() => {
      order.push('acquired-2');
    });
    h.lock.onReleased(() => {
      order.push('released');
    });
    await startLeader(h);
    await h.lock.shutdown();
    expect(order).toEqual(['acquired-1', 'acquired-2', 'released']);
  });

  it('a throwing or rejecting callback goes to onError and the lifecycle carries on', async () => {
    const h = makeLock();
    h.lock.onAcquired(() => {
      throw new Error('boom');
    });
    h.lock.onAcquired(async () => {
      throw new Error('async boom');
    });
    await startLeader(h);
    await h.lock.shutdown();
    const cbErrors = h.errors.filter((e) => e.name === 'CallbackError');
    expect(cbErrors.map((e) => (e.cause as Error).message)).toEqual(['boom', 'async boom']);
    expect(cbErrors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_CALLBACK', event: 'acquired' });
    expect(h.events).toContain('released');
  });

  it('with no onError registered, throwing callbacks and DB errors crash nothing', async () => {
    const unhandled: unknown[] = [];
    const record = (e: unknown): void => {
      unhandled.push(e);
    };
    process.on('unhandledRejection', record);
    process.on('uncaughtException', record);
    try {
      const db = new FakeDb();
      const clock = new FakeClock();
      const lock = new LeaderLock({ key1: 1, key2: 2, connect: db.connect, clock, healthIntervalMs: 100 });
      lock.onAcquired(() => {
        throw new Error('boom');
      });
      lock.onLost(() => Promise.reject(new Error('nope')));
      await lock.start();
      await flush();
      db.behaviour.check = 'error';
      await clock.advance(100); // a DB error in the health check
      db.last.kill();
      await flush();
      await lock.shutdown();
      await flush();
      expect(lock.state).toBe(LockState.STOPPED);
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', record);
      process.off('uncaughtException', record);
    }
  });

  it('an onError callback that throws is only logged', async () => {
    const logged: string[] = [];
    const noop = (): void => {};
    const logger = {
      debug: noop,
      info: noop,
      warn: noop,
      error: (f: { event?: unknown }) => logged.push(String(f.event)),
    };
    const h = makeLock({ logger });
    h.lock.onAcquired(() => {
      throw new Error('boom');
    });
    h.lock.onError(() => {
      throw new Error('even the error handler throws');
    });
    await startLeader(h);
    await h.lock.shutdown();
    expect(logged).toContain('callback_failed');
    expect(logged).toContain('error_callback_failed');
    expect(h.lock.state).toBe(LockState.STOPPED);
  });

  it('a hung callback does not stall the lifecycle (health checks go on)', async () => {
    const h = makeLock();
    h.lock.onAcquired(() => new Promise(() => {}));
    await startLeader(h);
    await h.clock.advance(3000);
    expect(h.db.last.checks).toBe(3);
    // shutdown waits for queued callbacks only up to its timeout
    const done = h.lock.shutdown({ timeoutMs: 100 });
    await h.clock.advance(100);
    await done;
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.open).toHaveLength(0);
  });
});

describe('start and shutdown races', () => {
  it('start is idempotent: concurrent and repeated calls make one lifecycle', async () => {
    const h = makeLock();
    await Promise.all([h.lock.start(), h.lock.start(), h.lock.start()]);
    await h.lock.start();
    await flush();
    expect(h.db.clients).toHaveLength(1);
    expect(h.events.filter((e) => e === 'stopped->follower')).toHaveLength(1);
    await h.lock.shutdown();
  });

  it('shutdown before start resolves and does nothing', async () => {
    const h = makeLock();
    await h.lock.shutdown();
    expect(h.events).toEqual([]);
    expect(h.db.clients).toHaveLength(0);
  });

  it('shutdown twice (concurrently and again) is one shutdown', async () => {
    const h = makeLock();
    await startLeader(h);
    const a = h.lock.shutdown();
    const b = h.lock.shutdown();
    await Promise.all([a, b]);
    await h.lock.shutdown();
    expect(h.events.filter((e) => e === 'released')).toHaveLength(1);
    expect(h.events.filter((e) => e === 'stopped')).toHaveLength(1);
  });

  it('shutdown right after start (stop during start) ends STOPPED with no connection left', async () => {
    const h = makeLock();
    void h.lock.start();
    await h.lock.shutdown();
    await flush();
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.open).toHaveLength(0);
  });

  it('start during shutdown starts again once the shutdown is over', async () => {
    const h = makeLock();
    await startLeader(h);
    const stopping = h.lock.shutdown();
    const starting = h.lock.start();
    await stopping;
    await starting;
    await flush();
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(h.db.open).toHaveLength(1);
    await h.lock.shutdown();
  });

  it('can be restarted after shutdown', async () => {
    const h = makeLock();
    await startLeader(h);
    await h.lock.shutdown();
    await h.lock.start();
    await flush();
    expect(h.lock.isLeader).toBe(true);
    await h.lock.shutdown();
    expect(h.db.open).toHaveLength(0);
  });

  it('leaves no timer behind after shutdown', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 60_000 }) });
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    expect(h.clock.pending).toBeGreaterThan(0);
    await h.lock.shutdown();
    expect(h.clock.pending).toBe(0);
  });

  it('leaseExpiresAt keeps the last lease end after shutdown (null only before the first acquisition)', async () => {
    const h = makeLock();
    expect(h.lock.leaseExpiresAt).toBeNull();
    await startLeader(h);
    const end = h.lock.leaseExpiresAt;
    expect(end).toBe(h.lock.safety?.leaseMs);
    await h.lock.shutdown();
    expect(h.lock.leaseExpiresAt).toBe(end);
  });

  it('await using shuts down at scope exit', async () => {
    const db = new FakeDb();
    {
      await using lock = new LeaderLock({
        key1: 1,
        key2: 2,
        connect: db.connect,
        clock: new FakeClock(),
        takeoverDelayMs: 0,
      });
      await lock.start();
      await flush();
      expect(lock.isLeader).toBe(true);
    }
    expect(db.open).toHaveLength(0);
    expect(db.holder).toBeNull();
  });

  it('aborting the signal option shuts the lock down and removes its listener', async () => {
    const ac = new AbortController();
    const h = makeLock({ signal: ac.signal });
    await startLeader(h);
    ac.abort();
    await flush();
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.events).toContain('released');
    expect(h.db.open).toHaveLength(0);
  });

  it('start with an already aborted signal does not start', async () => {
    const ac = new AbortController();
    ac.abort();
    const h = makeLock({ signal: ac.signal });
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.clients).toHaveLength(0);
  });
});

describe('an internal error (a bug, not a database condition)', () => {
  it('ends the leadership as leaving LEADER always does, destroys the session and stops: onError, onStopped', async () => {
    const h = makeLock();
    await startLeader(h);
    const term = h.lock.term;
    const renew = vi.spyOn(Leadership.prototype, 'renew').mockImplementation(() => {
      throw new Error('boom');
    });
    try {
      await h.clock.advance(1000); // the health check's renewal throws
    } finally {
      renew.mockRestore();
    }
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.take()).toEqual(['error:PgLeaderLockError', 'leader->stopped', 'stopped']);
    expect(h.errors[0]?.message).toBe('internal error: boom');
    expect(term?.signal.aborted).toBe(true);
    expect(h.db.open).toHaveLength(0);
    // the leadership's figures are kept and its time stops counting, as after any other end
    expect(h.lock.safety).not.toBeNull();
    expect(h.lock.leaseExpiresAt).not.toBeNull();
    const leaderMs = h.lock.stats().leaderMs;
    await h.clock.advance(5000);
    expect(h.lock.stats().leaderMs).toBe(leaderMs);
    expect(h.clock.pending).toBe(0);
  });
});

describe('timeouts', () => {
  it('shutdown with timeoutMs closes the session by force when unlock hangs, reports ShutdownError', async () => {
    const h = makeLock({ queryTimeoutMs: 10_000 });
    await startLeader(h);
    h.db.behaviour.unlock = 'hang';
    const done = h.lock.shutdown({ timeoutMs: 200 });
    await h.clock.advance(200);
    await done;
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.errors.some((e) => e instanceof ShutdownError)).toBe(true);
    expect(h.db.open).toHaveLength(0);
    expect(h.db.holder).toBeNull();
  });

  it('stepDown with timeoutMs force-releases by closing the session when unlock hangs', async () => {
    const h = makeLock({ queryTimeoutMs: 10_000 });
    await startLeader(h);
    h.db.behaviour.unlock = 'hang';
    const done = h.lock.stepDown({ timeoutMs: 300 });
    await h.clock.advance(300);
    await done;
    expect(h.db.holder).toBeNull();
    expect(h.errors.some((e) => e instanceof ShutdownError)).toBe(true);
    // a stepDown's release cut by its timeout: the lock stays a candidate (footnote ²), and
    // leads again at its next attempt
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    h.db.behaviour.unlock = 'normal';
    await h.clock.advance(60_000);
    expect(h.lock.state).toBe(LockState.LEADER);
    await h.lock.shutdown();
  });

  it("a shutdown asked while a stepDown's release hangs: the release cut by force ends in STOPPED, not a candidate again", async () => {
    const h = makeLock({ queryTimeoutMs: 10_000 });
    await startLeader(h);
    h.db.behaviour.unlock = 'hang';
    const stepped = h.lock.stepDown({ timeoutMs: 300 });
    const stopped = h.lock.shutdown();
    await h.clock.advance(300);
    await stepped;
    await h.clock.advance(10_000);
    await stopped;
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.holder).toBeNull();
    expect(h.db.open).toHaveLength(0);
  });

  it('without timeoutMs a hung unlock is still cut by queryTimeoutMs', async () => {
    const h = makeLock({ queryTimeoutMs: 400 });
    await startLeader(h);
    h.db.behaviour.unlock = 'hang';
    const done = h.lock.shutdown();
    await h.clock.advance(400);
    await done;
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.open).toHaveLength(0);
  });

  it('stepDown when not leader resolves at once and changes nothing', async () => {
    const h = makeLock();
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    h.take();
    await h.lock.stepDown();
    expect(h.take()).toEqual([]);
    await h.lock.shutdown();
  });

  it('a connect that never answers is bounded and its late client closed', async () => {
    const h = makeLock({ queryTimeoutMs: 250, retryStrategy: new FixedInterval({ intervalMs: 1000 }) });
    h.db.connectBehaviour = 'hang';
    await h.lock.start();
    await h.clock.advance(250);
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    expect(h.errors[0]?.message).toMatch(/connecting did not complete within 250 ms/);
    await h.lock.shutdown();
  });
});

describe('waitForLeadership', () => {
  it('resolves true on leadership, at once if already leader', async () => {
    const h = makeLock();
    const started = h.lock.start();
    const waiting = h.lock.waitForLeadership();
    await started;
    expect(await waiting).toBe(true);
    expect(await h.lock.waitForLeadership({ timeoutMs: 0 })).toBe(true);
    await h.lock.shutdown();
  });

  it('resolves false on timeout, and leaves no timer', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 100_000 }) });
    h.db.takeByOther();
    await h.lock.start();
    const waiting = h.lock.waitForLeadership({ timeoutMs: 1000 });
    await h.clock.advance(1000);
    expect(await waiting).toBe(false);
    await h.lock.shutdown();
    expect(h.clock.pending).toBe(0);
  });

  it('resolves false if the lock stops first', async () => {
    const h = makeLock();
    h.db.takeByOther();
    await h.lock.start();
    const waiting = h.lock.waitForLeadership();
    await h.lock.shutdown();
    expect(await waiting).toBe(false);
  });

  it('rejects with the signal reason when aborted', async () => {
    const h = makeLock();
    h.db.takeByOther();
    await h.lock.start();
    const ac = new AbortController();
    const waiting = h.lock.waitForLeadership({ signal: ac.signal });
    ac.abort(new Error('gave up'));
    await expect(waiting).rejects.toThrow('gave up');
    await h.lock.shutdown();
  });

  it('rejects (never throws) a bad timeoutMs or signal', async () => {
    const h = makeLock();
    await expect(h.lock.waitForLeadership({ timeoutMs: -5 })).rejects.toThrow(/timeoutMs .*-5/);
    await expect(h.lock.waitForLeadership({ timeoutMs: 2 ** 31 })).rejects.toThrow(/at most 2147483647/);
    // @ts-expect-error wrong type on purpose
    await expect(h.lock.waitForLeadership({ signal: 'x' })).rejects.toThrow(/signal must be an AbortSignal/);
    await expect(h.lock.shutdown({ timeoutMs: Number.NaN })).rejects.toThrow(/timeoutMs/);
    await expect(h.lock.stepDown({ timeoutMs: -1 })).rejects.toThrow(/timeoutMs/);
  });

  it('resolves false at once on a lock that was never started, or whose signal had aborted', async () => {
    const h = makeLock();
    expect(await h.lock.waitForLeadership()).toBe(false);
    const ac = new AbortController();
    ac.abort();
    const aborted = makeLock({ signal: ac.signal });
    await aborted.lock.start();
    expect(aborted.lock.state).toBe(LockState.STOPPED);
    expect(await aborted.lock.waitForLeadership()).toBe(false);
  });
});
