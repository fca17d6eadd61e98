/**
 * Claims of docs/state-machine.md checked with the fake connection and the manual clock:
 * `isLeader` false from the `shutdown()`/`stepDown()` call ("States"); RECONNECTING
 * re-acquires with a try-lock in wait mode too ("Wait mode"); delays over 2³¹−1 ms slept in
 * steps, the own previous backend asked again 20 ms later, the grace overrun, and the
 * `ShutdownError` for leader work past `shutdown()`'s deadline ("Choices where the
 * specification is silent"). What needs PostgreSQL: test/integration/state-machine-claims.test.ts.
 */
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { MAX_TIMER_MS } from '../../src/core/validate.js';
import { FixedInterval, LockState, ShutdownError } from '../../src/index.js';
import { type FakeClient, FakeClock, FakeDb, flush } from './fakes.js';
import { makeLock, startLeader } from './helpers.js';

/** Statements of `tag` (the `/* pgleaderlock:<tag> *\/` comment) sent on every client so far. */
const sent = (db: FakeDb, tag: string): number =>
  db.clients.flatMap((c) => c.queries).filter((q) => q.startsWith(`/* pgleaderlock:${tag} */`)).length;

/**
 * A manual clock whose timers behave as Node's: a delay above 2³¹−1 ms fires after 1 ms
 * (Node prints a TimeoutOverflowWarning and does that). Records the longest delay asked for.
 */
class NodeLikeClock extends FakeClock {
  longest = 0;
  override setTimeout(fn: () => void, ms: number): unknown {
    this.longest = Math.max(this.longest, ms);
    return super.setTimeout(fn, ms > MAX_TIMER_MS ? 1 : ms);
  }
}

describe('isLeader is false from the shutdown()/stepDown() call (docs/state-machine.md, "States")', () => {
  it.each(['shutdown', 'stepDown'] as const)(
    '%s(): isLeader false and the term’s signal aborted synchronously on return, before the promise is awaited, while leader work still holds the release',
    async (method) => {
      const h = makeLock();
      let finish = (): void => {};
      h.lock.runWhileLeader(() => new Promise<void>((resolve) => (finish = resolve))); // slow to stop
      await startLeader(h);
      const term = h.lock.term;
      expect(h.lock.isLeader).toBe(true);
      const done = method === 'shutdown' ? h.lock.shutdown() : h.lock.stepDown();
      expect(h.lock.isLeader).toBe(false);
      expect(term?.signal.aborted).toBe(true);
      expect(h.lock.term).toBeNull();
      expect(h.db.holder).not.toBeNull(); // the lock itself is still held: the release waits for the work
      await h.clock.advance(1000);
      expect(h.lock.isLeader).toBe(false);
      finish();
      await done;
      await h.lock.shutdown();
    },
  );
});

describe('RECONNECTING re-acquires with pg_try_advisory_lock in wait mode too (docs/state-machine.md, "Wait mode")', () => {
  it('wait mode, 60 s slices, 3 s grace: a competitor holding the lock ends the grace at once (onLost at the same instant), with a try-lock and no wait statement', async () => {
    const h = makeLock({ acquireMode: 'wait', waitSliceMs: 60_000, reconnectGraceMs: 3000 });
    await startLeader(h);
    const waitsBefore = sent(h.db, 'wait-lock');
    const triesBefore = sent(h.db, 'try-lock');
    h.db.last.kill();
    h.db.takeByOther(); // a waiter was granted the lock as the session ended
    await flush();
    expect(h.take()).toEqual(['leader->reconnecting', 'reconnecting->follower', 'lost']);
    expect(h.clock.now()).toBe(0); // no time passed: no slice, no grace waited out
    expect(sent(h.db, 'try-lock')).toBe(triesBefore + 1);
    expect(sent(h.db, 'wait-lock')).toBe(waitsBefore); // only the follower that follows queues
    await h.lock.shutdown();
  });

  it('wait mode: a free lock is taken back with a try-lock (no events), and the leader then queues nowhere', async () => {
    const h = makeLock({ acquireMode: 'wait', waitSliceMs: 60_000, reconnectGraceMs: 3000 });
    await startLeader(h);
    const waitsBefore = sent(h.db, 'wait-lock');
    h.db.last.kill();
    await flush();
    expect(h.take()).toEqual(['leader->reconnecting', 'reconnecting->leader']);
    expect(h.lock.isLeader).toBe(true);
    expect(sent(h.db, 'wait-lock')).toBe(waitsBefore);
    expect(h.db.last.queries.some((q) => q.startsWith('/* pgleaderlock:try-lock */'))).toBe(true);
    await h.lock.shutdown();
  });
});

describe('delays over 2³¹−1 ms are slept in steps (docs/state-machine.md, "Back-off vs. immediate attempts")', () => {
  it('a back-off of 2 × (2³¹−1) + 1000 ms: no timer longer than 2³¹−1 ms, and the next attempt exactly when the delay ends, not 1 ms after it began', async () => {
    const clock = new NodeLikeClock();
    const delay = 2 * MAX_TIMER_MS + 1000;
    const h = makeLock({ clock, retryStrategy: { nextDelayMs: () => delay } });
    h.db.takeByOther();
    await h.lock.start();
    await flush();
    expect(sent(h.db, 'try-lock')).toBe(1); // refused: the back-off begins at t = 0
    await clock.advance(10);
    expect(sent(h.db, 'try-lock')).toBe(1);
    // jump most of each step without running the heartbeat 4 million times
    clock.freeze(MAX_TIMER_MS - 11);
    await clock.advance(1); // the first step ends at 2³¹−1
    expect(sent(h.db, 'try-lock')).toBe(1);
    clock.freeze(MAX_TIMER_MS - 1);
    await clock.advance(1); // the second
    expect(sent(h.db, 'try-lock')).toBe(1);
    await clock.advance(999);
    expect(clock.now()).toBe(delay - 1);
    expect(sent(h.db, 'try-lock')).toBe(1);
    await clock.advance(1);
    expect(sent(h.db, 'try-lock')).toBe(2);
    expect(clock.longest).toBeLessThanOrEqual(MAX_TIMER_MS);
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    await h.lock.shutdown();
  });
});

describe('delays over 2³¹−1 ms are slept in steps: the survey delay while no host is a primary', () => {
  // before src/leader/steps.ts slept this delay in steps, it was cut to 2³¹−1 ms (a survey 1 s early here)
  it('a retry delay of (2³¹−1) + 1000 ms between surveys of a standby-only cluster: no new survey connection before the delay ends, one when it does', async () => {
    const clock = new NodeLikeClock();
    const delay = MAX_TIMER_MS + 1000;
    const h = makeLock({ clock, retryStrategy: { nextDelayMs: () => delay } });
    h.db.inRecovery = true;
    await h.lock.start();
    await flush();
    expect(h.errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_NO_PRIMARY' });
    const connections = h.db.clients.length;
    clock.freeze(MAX_TIMER_MS - 1);
    await clock.advance(1); // 2³¹−1 ms: the first step of the delay
    await clock.advance(998);
    expect(h.db.clients.length).toBe(connections);
    await clock.advance(1);
    expect(clock.now()).toBe(delay - 1);
    await clock.advance(1);
    expect(h.db.clients.length).toBeGreaterThan(connections); // surveyed again when the delay ended
    expect(clock.longest).toBeLessThanOrEqual(MAX_TIMER_MS);
    await h.lock.shutdown();
  });
});

describe('RECONNECTING: its own previous backend, and the grace overrun (docs/state-machine.md)', () => {
  it('the previous backend still holds the lock (its close not yet seen by the server): asked again every 20 ms, and taken back on the first ask after the server let go', async () => {
    const h = makeLock({ reconnectGraceMs: 3000 });
    await startLeader(h);
    h.db.releaseDelayMs = 95; // the server frees the dead backend's lock 95 ms after the close
    h.db.last.kill();
    await flush();
    expect(h.lock.state).toBe(LockState.RECONNECTING);
    const reconnect = h.db.last;
    const asks: number[] = [];
    let seen = 0;
    for (let t = 0; t <= 120; t++) {
      const n = reconnect.queries.filter((q) => q.startsWith('/* pgleaderlock:try-lock */')).length;
      for (; seen < n; seen++) asks.push(h.clock.now());
      await h.clock.advance(1);
    }
    expect(asks).toEqual([0, 20, 40, 60, 80, 100]);
    expect(h.take()).toEqual(['leader->reconnecting', 'reconnecting->leader']); // no lost, no error
    expect(h.errors).toEqual([]);
    await h.lock.shutdown();
  });

  it('an attempt begun 3 ms before the grace ends whose connection hangs: the grace ends when that connection times out, 497 ms late (queryTimeoutMs 500)', async () => {
    const h = makeLock({
      reconnectGraceMs: 3000,
      queryTimeoutMs: 500,
      retryStrategy: new FixedInterval({ intervalMs: 2997 }),
    });
    await startLeader(h);
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush(); // the first attempt, at once, fails to connect
    await h.clock.advance(2996);
    h.db.connectBehaviour = 'hang'; // the attempt at 2997 hangs
    await h.clock.advance(1);
    expect(h.lock.state).toBe(LockState.RECONNECTING);
    await h.clock.advance(499);
    expect(h.lock.state).toBe(LockState.RECONNECTING); // 2997 + 499: still within the attempt
    expect(h.events).not.toContain('lost');
    await h.clock.advance(1);
    expect(h.take()).toEqual(
      expect.arrayContaining(['leader->reconnecting', 'reconnecting->follower', 'lost']),
    );
    expect(h.clock.now() - 3000).toBe(497); // overrun ≤ queryTimeoutMs
    await h.lock.shutdown();
  });

  it('an attempt begun just before the grace ends whose try-lock hangs: the grace ends at most one queryTimeoutMs late', async () => {
    const h = makeLock({
      reconnectGraceMs: 3000,
      queryTimeoutMs: 500,
      retryStrategy: new FixedInterval({ intervalMs: 2990 }),
    });
    await startLeader(h);
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    await h.clock.advance(2989);
    h.db.connectBehaviour = 'normal';
    h.db.behaviour.tryLock = 'hang'; // connected at 2990, its try-lock never answers
    await h.clock.advance(1);
    const lostAt = (): Promise<number> =>
      new Promise((resolve) => h.lock.onLost(() => resolve(h.clock.now())));
    const lost = lostAt();
    await h.clock.advance(1000);
    expect((await lost) - 3000).toBeLessThanOrEqual(500);
    await h.lock.shutdown();
  });
});

/**
 * A `connect` for the lock on `db` whose clients, once `slow.ms` is set, answer every
 * statement that much later (on the fake clock).
 */
function slowable(db: FakeDb, clock: FakeClock): { connect: () => Promise<pg.Client>; slow: { ms: number } } {
  const slow = { ms: 0 };
  const connect = async (): Promise<pg.Client> => {
    const client = (await db.connect()) as unknown as FakeClient;
    const ms = slow.ms;
    if (ms > 0) {
      const query = client.query.bind(client);
      client.query = (text: string, values?: unknown[]) =>
        new Promise<void>((resolve) => clock.setTimeout(() => resolve(), ms)).then(() => query(text, values));
    }
    return client as unknown as pg.Client;
  };
  return { connect, slow };
}

describe('the grace overrun when statements are slow but in time', () => {
  it('an attempt begun 10 ms before a 3 s grace ends on a server answering each statement in 450 ms (queryTimeoutMs 500): the grace ends with that attempt, more than one queryTimeoutMs late but within one per statement', async () => {
    const clock = new FakeClock();
    const db = new FakeDb(clock);
    const server = slowable(db, clock);
    const h = makeLock({
      db,
      connect: server.connect,
      reconnectGraceMs: 3000,
      queryTimeoutMs: 500,
      retryStrategy: new FixedInterval({ intervalMs: 2990 }),
    });
    await startLeader(h);
    h.db.connectBehaviour = 'error';
    h.db.last.kill();
    await flush();
    await h.clock.advance(2989);
    h.db.connectBehaviour = 'normal';
    server.slow.ms = 450;
    h.db.takeByOther(); // the attempt will find the lock held by another session
    const before = h.db.clients.length;
    let lostAt: number | null = null;
    let clientsAtLoss = 0;
    h.lock.onLost(() => {
      lostAt = h.clock.now();
      clientsAtLoss = h.db.clients.length;
    });
    await h.clock.advance(1);
    const attempt = h.db.clients.slice(before);
    await h.clock.advance(5000);
    expect(lostAt).not.toBeNull();
    const statements = attempt.flatMap((c) => c.queries).length;
    const overrun = (lostAt ?? 0) - 3000;
    console.log(
      `[grace] 3 s grace, an attempt of ${statements} statements of 450 ms begun at 2990 ms: lost at ${lostAt} ms, ${overrun} ms late (queryTimeoutMs 500)`,
    );
    expect(lostAt).toBe(2990 + statements * 450); // the attempt ran to its end, then the grace ended
    expect(overrun).toBeGreaterThan(500);
    expect(overrun).toBeLessThanOrEqual(statements * 500);
    expect(clientsAtLoss).toBe(before + attempt.length); // no attempt after it
    const stopping = h.lock.shutdown();
    await h.clock.advance(5000);
    await stopping;
  });
});

describe('shutdown() reports a ShutdownError when leader work runs past its deadline (docs/state-machine.md, "Timeouts")', () => {
  it('work of an earlier, lost term that ignores its signal: shutdown({ timeoutMs: 300 }) resolves at 300 ms with one ShutdownError (ERR_PGLEADERLOCK_SHUTDOWN) naming the leader work', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 1000 }) });
    h.lock.runWhileLeader(() => new Promise(() => {})); // never returns
    await startLeader(h);
    h.db.last.kill(); // term 1 is lost; its work keeps running
    h.db.takeByOther();
    await flush();
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    h.take();
    let resolved = false;
    const done = h.lock.shutdown({ timeoutMs: 300 }).then(() => {
      resolved = true;
    });
    await h.clock.advance(299);
    expect(h.lock.state).toBe(LockState.STOPPED); // the loop stopped at once…
    expect(resolved).toBe(false); // …but shutdown() waits for the work, up to its deadline
    expect(h.errors).toEqual([]);
    await h.clock.advance(1);
    await done;
    expect(h.errors).toHaveLength(1);
    const err = h.errors[0];
    expect(err).toBeInstanceOf(ShutdownError);
    expect(err).toMatchObject({ name: 'ShutdownError', code: 'ERR_PGLEADERLOCK_SHUTDOWN' });
    expect(err?.message).toMatch(/leader work \(runWhileLeader\) was still running after 300 ms/);
  });

  it('work of the current term that ignores its signal: the release is cut at the deadline, reported once as a ShutdownError, and another names the leader work', async () => {
    const h = makeLock();
    h.lock.runWhileLeader(() => new Promise(() => {}));
    await startLeader(h);
    let resolved = false;
    const done = h.lock.shutdown({ timeoutMs: 500 }).then(() => {
      resolved = true;
    });
    await h.clock.advance(499);
    expect(resolved).toBe(false);
    await h.clock.advance(1);
    await done;
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.db.holder).toBeNull();
    const shutdownErrors = h.errors.filter((e) => e instanceof ShutdownError);
    expect(shutdownErrors.map((e) => e.message)).toContainEqual(
      expect.stringMatching(/leader work \(runWhileLeader\) was still running after 500 ms/),
    );
    expect(shutdownErrors.every((e) => (e as ShutdownError).code === 'ERR_PGLEADERLOCK_SHUTDOWN')).toBe(true);
    // the release cut at the deadline is reported once, as that ShutdownError, and not also as
    // a release that failed because "the lock connection is gone"
    expect(h.errors.map((e) => `${(e as { code?: string }).code}: ${e.message}`)).toEqual([
      expect.stringMatching(
        /^ERR_PGLEADERLOCK_SHUTDOWN: (shutdown did not finish within 500 ms|shutdown did not finish within its timeout)/,
      ),
      'ERR_PGLEADERLOCK_SHUTDOWN: shutdown: leader work (runWhileLeader) was still running after 500 ms; its signal had aborted',
    ]);
  });
});
