/**
 * lock.health() on real timers against PostgreSQL: a blocked event loop and a hung callback
 * turn `live` false; a leader and a follower stay live and ready through many checks.
 */
import { describe, expect, it } from 'vitest';
import { randomKeys } from '../harness/db.js';
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

  it('an event loop blocked for 3 s turns live false, as seen by the next probe after it', async () => {
    const lock = locks.make({ ...randomKeys(), acquireMode });
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
});
