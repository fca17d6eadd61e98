/**
 * The partition ring watch (src/partitions/watch.ts) on a fake server and clock, behind a
 * path that drops cancel requests (the fake has no cancel key): moving the watch to a new
 * successor closes the waiting session after `closeTimeoutMs` of re-sent cancels, and that
 * close is no failure. A session that fails on its own still is one. The same behaviour
 * against a real proxy: integration/no-cancel.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { FixedInterval, type RetryStrategy } from '../../src/core/retry.js';
import { RingWatch } from '../../src/partitions/watch.js';
import { type FakeClient, FakeClock, FakeDb, flush } from './fakes.js';

const CLOSE_TIMEOUT_MS = 300;

function ringWatch(retryStrategy: RetryStrategy = new FixedInterval({ intervalMs: 500 })): {
  watch: RingWatch;
  clock: FakeClock;
  db: FakeDb;
  errors: Error[];
  deaths: number[];
  gaveUp: Error[];
  /** Connection attempts, failed ones included. */
  attempts: { n: number };
} {
  const clock = new FakeClock();
  const db = new FakeDb(clock);
  const errors: Error[] = [];
  const deaths: number[] = [];
  const gaveUp: Error[] = [];
  const attempts = { n: 0 };
  const watch = new RingWatch({
    connect: () => {
      attempts.n += 1;
      return db.connect();
    },
    membersKey: 7,
    appName: 'pgleaderlock:w#watch',
    sliceMs: 60_000,
    clock,
    queryTimeoutMs: 500,
    closeTimeoutMs: CLOSE_TIMEOUT_MS,
    unref: false,
    serverReleaseMs: 10_000,
    onDeath: (slot) => deaths.push(slot),
    onError: (error) => errors.push(error),
    onStatement: () => {},
    retryStrategy,
    onGiveUp: (error) => gaveUp.push(error),
  });
  return { watch, clock, db, errors, deaths, gaveUp, attempts };
}

/** The member slot `client` waits for now (its last statement a watch wait), or null. */
function waitingFor(client: FakeClient | undefined): number | null {
  const last = client?.queries.at(-1) ?? '';
  const m = /pgleaderlock:watch \*\/ SELECT pg_advisory_lock\(\(7\)::int4, \((\d+)\)::int4\)/.exec(last);
  return client && !client.ended && m ? Number(m[1]) : null;
}

/** Close the watch: its cancels go nowhere, so it waits out closeTimeoutMs on the fake clock. */
async function close(watch: RingWatch, clock: FakeClock): Promise<void> {
  const closed = watch.close();
  await clock.advance(CLOSE_TIMEOUT_MS);
  await closed;
}

describe('RingWatch reconnects on the retry strategy', () => {
  it("a failed session: the next one after the strategy's delay (here 200 ms, not before)", async () => {
    const { watch, clock, db, errors } = ringWatch(new FixedInterval({ intervalMs: 200 }));
    watch.watch(1);
    await flush();
    db.clients[0]?.kill();
    await flush();
    expect(errors).toHaveLength(1);
    await clock.advance(199);
    expect(db.clients).toHaveLength(1);
    await clock.advance(1);
    expect(waitingFor(db.clients[1])).toBe(1);
    expect(watch.down).toBeNull();
    await close(watch, clock);
    expect(db.open).toEqual([]);
  });

  it('a strategy that gives up: onGiveUp with ERR_PGLEADERLOCK_RETRY_EXHAUSTED, the watch stops, no session left', async () => {
    const giveUpAfter2: RetryStrategy = { nextDelayMs: (ctx) => (ctx.attempt > 2 ? null : 100) };
    const { watch, clock, db, gaveUp, attempts } = ringWatch(giveUpAfter2);
    db.connectBehaviour = 'error';
    watch.watch(1);
    await clock.advance(1000);
    expect(gaveUp.map((e) => (e as Error & { code?: string }).code)).toEqual([
      'ERR_PGLEADERLOCK_RETRY_EXHAUSTED',
    ]);
    expect(attempts.n).toBe(3); // the first, then two on the strategy's delays
    await clock.advance(5000);
    expect(attempts.n).toBe(3); // stopped: no more attempts
    await close(watch, clock);
    expect(db.open).toEqual([]);
  });
});

describe('RingWatch behind a path that drops cancels', () => {
  it('a new target: the waiting session is closed after closeTimeoutMs (not before), with no onError, health not down, and the new session waits for the new target at once (no 500 ms back-off)', async () => {
    const { watch, clock, db, errors, deaths } = ringWatch();
    watch.watch(1);
    await flush();
    const first = db.clients[0];
    expect(waitingFor(first)).toBe(1);

    watch.watch(2);
    await clock.advance(CLOSE_TIMEOUT_MS - 1);
    expect(first?.ended).toBe(false); // still cancelling
    expect(db.clients).toHaveLength(1);
    await clock.advance(1);
    expect(first?.ended).toBe(true);
    expect(db.clients).toHaveLength(2);
    expect(waitingFor(db.clients[1])).toBe(2); // at the same instant
    expect(clock.now()).toBe(CLOSE_TIMEOUT_MS);
    expect(errors).toEqual([]);
    expect(watch.down).toBeNull();
    expect(deaths).toEqual([]);

    await close(watch, clock);
    expect(db.open).toEqual([]);
  });

  it('a session that fails on its own while its stale wait is being cancelled is a failure: onError, health down, and the next session after the 500 ms back-off', async () => {
    const { watch, clock, db, errors } = ringWatch();
    watch.watch(1);
    await flush();
    const first = db.clients[0];
    watch.watch(2);
    await clock.advance(100); // re-sending cancels
    first?.kill();
    await flush();
    expect(errors.map((e) => e.message)).toEqual([expect.stringContaining('terminating connection')]);
    expect(watch.down).not.toBeNull();
    await clock.advance(499);
    expect(db.clients).toHaveLength(1);
    await clock.advance(1);
    expect(waitingFor(db.clients[1])).toBe(2);
    expect(watch.down).toBeNull();

    await close(watch, clock);
    expect(db.open).toEqual([]);
  });

  it('a session that fails on its own just as closeTimeoutMs runs out (its error heard, its statement not yet rejected, when the re-send timer fires) is still a failure, not taken for a session closed on purpose', async () => {
    const { watch, clock, db, errors } = ringWatch();
    watch.watch(1);
    await flush();
    const first = db.clients[0] as FakeClient;
    // the server ends the session inside the timer turn that ends the cancelling: the
    // client has heard the error, and the failed statement reaches the watch only after
    const setTimer = clock.setTimeout.bind(clock);
    clock.setTimeout = (fn: () => void, ms: number) =>
      setTimer(() => {
        if (clock.now() >= CLOSE_TIMEOUT_MS && !first.ended) first.kill();
        fn();
      }, ms);
    watch.watch(2);
    await clock.advance(CLOSE_TIMEOUT_MS);
    expect(first.ended).toBe(true);
    expect(errors.map((e) => e.message)).toEqual([expect.stringContaining('terminating connection')]);
    expect(watch.down).not.toBeNull();
    expect(db.clients).toHaveLength(1); // the back-off, not an at-once reopen
    await clock.advance(500);
    expect(waitingFor(db.clients[1])).toBe(2);

    await close(watch, clock);
    expect(db.open).toEqual([]);
  });

  it('a target that comes back before closeTimeoutMs keeps the session: no close, nothing reported', async () => {
    const { watch, clock, db, errors } = ringWatch();
    watch.watch(1);
    await flush();
    const first = db.clients[0];
    watch.watch(2);
    await clock.advance(100);
    watch.watch(1);
    await clock.advance(CLOSE_TIMEOUT_MS);
    expect(first?.ended).toBe(false);
    expect(waitingFor(first)).toBe(1);
    expect(db.clients).toHaveLength(1);
    expect(errors).toEqual([]);

    await close(watch, clock);
    expect(db.open).toEqual([]);
  });
});
