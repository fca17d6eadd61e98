/**
 * lock.health() on real timers against PostgreSQL: a blocked event loop and a hung callback
 * turn `live` false; a leader and a follower stay live and ready through many checks.
 */
import { describe, expect, it } from 'vitest';
import { eventually, ownServer, randomKeys } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();

describe.each(['wait', 'poll'] as const)('lock.health() (%s mode)', (acquireMode) => {
  it('a leader and a follower stay live and ready through a second of checks', async () => {
    const keys = randomKeys();
    const a = locks.make({ ...keys, acquireMode, healthIntervalMs: 50 });
    await a.start();
    await a.waitForLeadership({ timeoutMs: 5000 });
    const b = locks.make({ ...keys, acquireMode, healthIntervalMs: 50 });
    await b.start();
    const until = performance.now() + 1000;
    while (performance.now() < until) {
      expect(a.health()).toMatchObject({ live: true, ready: true, isLeader: true, reasons: [] });
      expect(b.health()).toMatchObject({ live: true, ready: true, isLeader: false, reasons: [] });
      await new Promise((r) => setTimeout(r, 50));
    }
  });

  it('an onAcquired callback that hangs past callbackTimeoutMs turns live false', async () => {
    const lock = locks.make({ ...randomKeys(), acquireMode, callbackTimeoutMs: 300 });
    lock.onAcquired(() => new Promise(() => {})); // never returns
    await lock.start();
    await lock.waitForLeadership({ timeoutMs: 5000 });
    expect(lock.health().live).toBe(true);
    await new Promise((r) => setTimeout(r, 400));
    const health = lock.health();
    expect(health.live).toBe(false);
    expect(health.reasons).toContainEqual(
      expect.stringMatching(
        /^an onAcquired callback has not returned after \d+ ms \(callbackTimeoutMs 300\)$/,
      ),
    );
  });

  it("a step-down whose work takes 2 s to stop, 2.5 × the server's idle_session_timeout (800 ms): the session survives, live throughout, the lock follows again", {
    tags: ['pg-major'],
  }, async () => {
    const lock = locks.make({
      ...randomKeys(),
      acquireMode,
      healthIntervalMs: 200,
      // idle_session_timeout 800 ms once leader; each connect and query may take 500 ms (a
      // 200 ms deadline missed on a loaded CI machine cost the session, and the reconnects
      // failed too: six errors). The lease (800 - 80 ms margin) stays above
      // healthIntervalMs + queryTimeoutMs (700 ms), as the options require
      serverReleaseMs: 800,
      queryTimeoutMs: 500,
      takeoverDelayMs: 0,
      callbackTimeoutMs: 10_000,
    });
    lock.runWhileLeader(async (term) => {
      await new Promise((r) => term.signal.addEventListener('abort', r, { once: true }));
      await new Promise((r) => setTimeout(r, 2000)); // slow to stop: 1.2 s past the timeout
    });
    const errors: Error[] = [];
    lock.onError((e) => {
      errors.push(e);
    });
    await lock.start();
    await lock.waitForLeadership({ timeoutMs: 5000 });
    const stepping = lock.stepDown();
    const until = performance.now() + 1800;
    while (performance.now() < until) {
      expect(lock.health().live).toBe(true);
      await new Promise((r) => setTimeout(r, 100));
    }
    await stepping;
    expect(errors).toEqual([]);
    expect(lock.state).not.toBe('stopped');
    expect(lock.health()).toMatchObject({ live: true, ready: true });
  });
});

// Once, not per acquire mode: the heartbeat that sees a block is the lifecycle's (core/vitals.ts),
// the same timer in both modes; its rules (2 s late, reported 10 s) are checked exactly on the
// manual clock in test/unit/observability-claims.test.ts. Here: real timers, a real block.
describe('lock.health(): a blocked event loop (real timers)', () => {
  it('an event loop blocked for 3 s turns live false, as seen by the next probe after it', {
    tags: ['node-line'],
  }, async () => {
    const lock = locks.make({ ...randomKeys() });
    await lock.start();
    await lock.waitForLeadership({ timeoutMs: 5000 });
    await new Promise((r) => setTimeout(r, 600)); // the heartbeat has run once
    const end = performance.now() + 3000;
    while (performance.now() < end) {
      // blocked: nothing else runs
    }
    // a probe's handler runs after the timers that were due during the block
    await new Promise((r) => setImmediate(r));
    const health = lock.health();
    expect(health.live).toBe(false);
    expect(health.reasons.join('\n')).toMatch(
      /the event loop was blocked for at least (2[5-9]\d\d|3\d{3}) ms/,
    );
  });
});

describe('lock.health() through an outage (wait mode)', () => {
  it('a waiting follower is ready again as soon as it has queued after the server came back, not a wait slice later', async () => {
    await using server = await ownServer();
    const keys = randomKeys();
    const fast = {
      acquireMode: 'wait' as const,
      healthIntervalMs: 200,
      queryTimeoutMs: 500,
      waitSliceMs: 30_000,
    };
    const a = locks.make({ ...keys, ...fast, connectionString: server.url });
    const b = locks.make({ ...keys, ...fast, connectionString: server.url });
    await a.start();
    await a.waitForLeadership({ timeoutMs: 5000 });
    await b.start();
    await eventually(() => b.state === 'acquiring');
    await server.stop('fast');
    await eventually(() => !b.health().ready, { what: 'b not ready during the outage' });
    await server.start();
    // a leads again; b queues behind it (its 30 s slice has just begun)
    await eventually(() => a.isLeader || b.isLeader, {
      timeoutMs: 10_000,
      what: 'a leader after the restart',
    });
    const follower = a.isLeader ? b : a;
    const t0 = performance.now();
    await eventually(() => follower.health().ready, { timeoutMs: 5000, what: 'the follower to be ready' });
    // ready once queued: well before its 30 s wait slice ends
    const readyMs = performance.now() - t0;
    console.log(`[health] the follower ready ${readyMs.toFixed(1)} ms after the leader was found`);
    // bound: integration/health-follower-ready
    expect(readyMs).toBeLessThan(5000);
    expect(follower.state).toBe('acquiring');
    expect(follower.health().reasons).toEqual([]);
  });
});
