/**
 * After a connection loss the first reconnect goes at once, then the retry strategy's
 * back-off (jittered by default) paces the next ones (docs/safety.md, "Reconnecting after a
 * server restart"). Fake connection and clock; the strategy's randomness injected.
 */
import { describe, expect, it } from 'vitest';
import { ExponentialBackoff, FixedInterval, LockState } from '../../src/index.js';
import { FakeClock, FakeDb, flush } from './fakes.js';
import { makeLock } from './helpers.js';

/** A lock whose every connection attempt is timed on the fake clock. */
function timedLock(options: Parameters<typeof makeLock>[0] = {}) {
  const clock = new FakeClock();
  const db = new FakeDb(clock);
  const attempts: number[] = [];
  const h = makeLock({
    db,
    connect: () => {
      attempts.push(clock.now());
      return db.connect();
    },
    // 1 s doubling (not the default 100 ms: round figures), each delay 1 - 0.5 × 0.5 = 0.75 of its
    // full length, growing while the server is away too (not the default's 1 s bound: tested below)
    retryStrategy: new ExponentialBackoff({ baseMs: 1000, outageMaxMs: 30_000, random: () => 0.5 }),
    ...options,
  });
  return { ...h, attempts };
}

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await flush();
  expect(check()).toBe(true);
}

describe('reconnecting after a connection loss', () => {
  it('a wait-mode follower that waited through many slices: its session killed, the server down: a reconnect at once, then 750, 1500, 3000 ms later (jittered 1 s doubling), then it queues again', async () => {
    const h = timedLock({ acquireMode: 'wait', waitSliceMs: 1000 });
    h.db.takeByOther();
    await h.lock.start();
    await until(() => h.db.waiters.length === 1);
    await h.clock.advance(10_000); // ten slices, each asking the strategy (its delay unused)
    await until(() => h.db.waiters.length === 1);
    expect(h.attempts).toEqual([0]);
    const lostAt = h.clock.now();
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    expect(h.attempts).toEqual([0, lostAt]); // at once
    await h.clock.advance(749);
    expect(h.attempts).toHaveLength(2);
    await h.clock.advance(1);
    expect(h.attempts.at(-1)).toBe(lostAt + 750);
    await h.clock.advance(1500);
    expect(h.attempts.at(-1)).toBe(lostAt + 2250);
    h.db.connectBehaviour = 'normal';
    await h.clock.advance(3000);
    expect(h.attempts.at(-1)).toBe(lostAt + 5250);
    await until(() => h.db.waiters.length === 1);
    expect(h.lock.state).toBe(LockState.ACQUIRING);
    await h.lock.shutdown();
  });

  it('a poll-mode follower: its next poll finds the session dead; that reconnect failing is retried at once, then on the back-off', async () => {
    const h = timedLock({ acquireMode: 'poll' });
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    await h.clock.advance(750 + 1500); // refused at 0, 750, 2250: its connection stays open
    expect(h.attempts).toEqual([0]);
    const lostAt = h.clock.now();
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await h.clock.advance(3000); // the next poll finds the session dead and reconnects (refused)
    const first = h.attempts[1] as number;
    expect(first).toBeGreaterThan(lostAt);
    // the poll's own reconnect failed (ConnectFailed after a refusal): at once again, then paced
    expect(h.attempts[2]).toBe(first);
    await h.clock.advance(750);
    expect(h.attempts[3]).toBe(first + 750);
    await h.lock.shutdown();
  });

  it('a leader with reconnectGraceMs: its session killed, the server down: the grace reconnect at once, then 750 ms later (not twice at once)', async () => {
    const h = timedLock({ reconnectGraceMs: 10_000 });
    await h.lock.start();
    await until(() => h.lock.isLeader);
    await h.clock.advance(2000);
    const lostAt = h.clock.now();
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    expect(h.lock.state).toBe(LockState.RECONNECTING);
    expect(h.attempts).toEqual([0, lostAt]);
    await h.clock.advance(749);
    expect(h.attempts).toHaveLength(2);
    await h.clock.advance(1);
    expect(h.attempts.at(-1)).toBe(lostAt + 750);
    await h.lock.shutdown();
  });

  it('the default strategy: while the server refuses for a minute no two attempts are more than 1 s apart, and the follower is back within 1 s of it accepting', async () => {
    const h = timedLock({ acquireMode: 'wait', retryStrategy: undefined });
    h.db.takeByOther();
    await h.lock.start();
    await until(() => h.db.waiters.length === 1);
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await h.clock.advance(60_000);
    const gaps = h.attempts.slice(1).map((t, i) => t - (h.attempts[i] as number));
    expect(h.attempts.length).toBeGreaterThan(60); // about one attempt in 0.75 s
    expect(Math.max(...gaps)).toBeLessThanOrEqual(1000);
    const upAt = h.clock.now();
    h.db.connectBehaviour = 'normal';
    await h.clock.advance(1000);
    expect(h.attempts.at(-1)).toBeGreaterThanOrEqual(upAt);
    await until(() => h.db.waiters.length === 1);
    await h.lock.shutdown();
  });
});

describe('a connect that misses its deadline (a busy server after a restart)', () => {
  /** Connects that hang (nothing answers: a silent path) on a 100 ms fixed retry; queryTimeoutMs 500. */
  function hanging(options: Parameters<typeof makeLock>[0] = {}) {
    const h = timedLock({
      acquireMode: 'wait',
      retryStrategy: new FixedInterval({ intervalMs: 100 }),
      ...options,
    });
    h.db.connectBehaviour = 'hang';
    return h;
  }

  it('a server that accepted the connection but did not finish it (busy): the next connect is given twice as long, up to 16 × queryTimeoutMs', async () => {
    const h = hanging();
    h.db.connectBehaviour = 'normal';
    h.db.surveyBehaviour = 'hang';
    await h.lock.start();
    await h.clock.advance(30_000);
    // deadlines 500, 1000, 2000, 4000, 8000, 8000 …, each followed by the strategy's 100 ms
    expect(h.attempts.slice(0, 7)).toEqual([0, 600, 1700, 3800, 7900, 16_000, 24_100]);
    await h.lock.shutdown();
  });

  it('a silent path (nothing answered the connect): the next connect is given twice as long, up to 4 × queryTimeoutMs: a crowd that missed the deadline is not asked to start over in the same time', async () => {
    const h = hanging();
    await h.lock.start();
    await h.clock.advance(10_000);
    // deadlines 500, 1000, 2000, 2000 …, each followed by the strategy's 100 ms
    expect(h.attempts.slice(0, 5)).toEqual([0, 600, 1700, 3800, 5900]);
    await h.lock.shutdown();
  });

  it('an attempt that ends otherwise (refused at once) gives the next connect queryTimeoutMs again', async () => {
    const h = hanging();
    await h.lock.start();
    await h.clock.advance(1800); // attempts at 0 and 600 missed their deadlines; the one at 1700 waits 2000
    h.db.connectBehaviour = 'error';
    await h.clock.advance(2000); // it missed it too (at 3700); the next, at 3800, is refused
    h.db.connectBehaviour = 'hang';
    await h.clock.advance(3000);
    // refused at 3800: the next (at 3900) has 500 ms again, and then 1000
    expect(h.attempts.slice(0, 6)).toEqual([0, 600, 1700, 3800, 3900, 4500]);
    await h.lock.shutdown();
  });
});
