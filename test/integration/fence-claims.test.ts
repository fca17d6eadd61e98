/**
 * Claims about the takeover fence (docs/safety.md, "Takeover delay") and `onNewLeader`
 * (README, "Callbacks"), against real PostgreSQL:
 *  - with fencing, the epoch row's `released` mark proves a clean release to a candidate that
 *    connected after it, and across a server restart; without fencing both wait the delay;
 *  - a shutdown or step-down whose deadline expired sends no `released` event, and the next
 *    holder waits the full delay;
 *  - an idle (poll-mode) session hears a new leader as soon as a bare LISTEN connection does.
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { deferred } from '../../src/core/clock.js';
import { type HandoverEvent, parseEvent } from '../../src/core/handover.js';
import { channelFor } from '../../src/core/keys.js';
import { FixedInterval, type LeaderLock } from '../../src/index.js';
import { expectNearBaseline } from '../harness/baseline.js';
import {
  adminQuery,
  databaseUrl,
  eventually,
  holderPid,
  lockHolders,
  ownServer,
  randomKeys,
  terminate,
} from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { TIMER_EARLY_MS } from '../harness/timers.js';

const locks = useLocks();

type Keys = { key1: number; key2: number };

/** A bare connection LISTENing on the key's channel: the holder events any session there is told, and when. */
async function listen(url: string, keys: Keys) {
  const client = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-listener' });
  client.on('error', () => {});
  const events: { event: HandoverEvent; at: number }[] = [];
  const channel = channelFor(keys.key1, keys.key2);
  client.on('notification', (n) => {
    const event = n.channel === channel && n.payload !== undefined ? parseEvent(n.payload) : null;
    // `waiting`: a candidate saying it joined (choosing who leads), no part of a handover
    if (event && event.kind !== 'waiting') events.push({ event, at: performance.now() });
  });
  await client.connect();
  await client.query(`LISTEN ${pg.escapeIdentifier(channel)}`);
  return {
    events,
    kinds: () => events.map((e) => e.event.kind),
    [Symbol.asyncDispose]: () => client.end().catch(() => {}),
  };
}

/** The `delayMs` of each takeover fence `lock` holds. */
function fencesOf(lock: LeaderLock): number[] {
  const fences: number[] = [];
  lock.onTakeoverFence(({ delayMs }) => {
    fences.push(delayMs);
  });
  return fences;
}

const DELAY_MS = 1500;
/**
 * "No delay": the term opens within 500 ms of the grant, a third of the 1,500 ms delay (what
 * follows the grant: the epoch bump and the term's opening, a few ms on an idle machine, tens
 * with other test files loading both cores, 101 at load 6). The fences seen are the exact check.
 */
const NO_DELAY_MS = 500;

describe.each(['wait', 'poll'] as const)('the epoch row proves a clean release (%s mode)', (mode) => {
  it.each([
    ['with fencing: no delay (its term opens < 300 ms after its grant; the delay is 1.5 s)', true],
    ['without fencing: the full 1.5 s delay', false],
  ])(
    'a candidate that connects after a clean shutdown, and one after a server restart: %s',
    async (_label, fencing) => {
      await using server = await ownServer();
      const keys = randomKeys();
      const make = (delayMs: number): LeaderLock =>
        locks.make({
          ...keys,
          connectionString: server.url,
          acquireMode: mode,
          fencing,
          takeoverDelayMs: delayMs,
          autoReacquire: false,
        });
      /**
       * Start a candidate with the 1.5 s delay on a free key: its fences, and how long until
       * its term opened, from its grant (the `acquired` event a bare listener hears, committed
       * by the granting statement) and from its start.
       */
      const lead = async () => {
        await using observer = await listen(server.url, keys);
        const lock = make(DELAY_MS);
        const fences = fencesOf(lock);
        const t0 = performance.now();
        await lock.start();
        expect(await lock.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
        const ledAt = performance.now();
        const grant = () =>
          observer.events.find((e) => e.event.kind === 'acquired' && e.event.id === lock.id);
        await eventually(() => grant() !== undefined, { what: 'the listener to hear the grant' });
        const epoch = lock.term?.epoch ?? null;
        await lock.shutdown(); // clean again
        return { fences, epoch, startMs: ledAt - t0, grantMs: ledAt - (grant()?.at ?? Number.NaN) };
      };

      const first = make(0); // the first holder ever has nothing to prove: no delay for this one
      await first.start();
      expect(await first.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
      await first.shutdown(); // clean: runs returned, `released` marked (fencing) and sent, unlocked

      // 1. connected after the release: it heard no `released` event; only the epoch row can tell
      const afterRelease = await lead();

      // 2. the same after a restart: the server's memory (and every session) is gone, the table is not
      await server.restart('fast');
      const afterRestart = await lead();

      const figures = (r: typeof afterRelease): string =>
        `${r.grantMs.toFixed(0)} ms after its grant (${r.startMs.toFixed(0)} ms after its start)`;
      console.log(
        `[fence ${mode}, fencing ${fencing}] delay ${DELAY_MS} ms; connected after the release: led ${figures(afterRelease)}; after a restart: ${figures(afterRestart)}`,
      );
      if (fencing) {
        expect(afterRelease.fences).toEqual([]);
        expect(afterRestart.fences).toEqual([]);
        // bound: integration/fence-claims-no-delay-a
        expect(afterRelease.grantMs).toBeLessThan(NO_DELAY_MS);
        // bound: integration/fence-claims-no-delay-b
        expect(afterRestart.grantMs).toBeLessThan(NO_DELAY_MS);
        expect(afterRestart.epoch).toBeGreaterThan(afterRelease.epoch ?? 0n);
      } else {
        expect(afterRelease.fences).toEqual([DELAY_MS]);
        expect(afterRestart.fences).toEqual([DELAY_MS]);
        // from the start, which precedes the grant (the listener may hear the grant a few ms late)
        expect(afterRelease.startMs).toBeGreaterThanOrEqual(DELAY_MS - TIMER_EARLY_MS);
        expect(afterRestart.startMs).toBeGreaterThanOrEqual(DELAY_MS - TIMER_EARLY_MS);
      }
    },
  );
});

describe('a release whose deadline expired sends no `released` event', () => {
  const DEADLINE_MS = 300;
  const NEXT_DELAY_MS = 1000;

  /**
   * A leader (work that ignores its abort when `ignoresAbort`) and a follower queued behind it
   * with a 1 s takeover delay; then the leader's `how`, bounded by 300 ms (work that ignores
   * its abort) or 5 s. What a LISTENing observer heard, the follower's fences, and how long
   * after the call it led.
   */
  async function handover(how: 'shutdown' | 'stepDown', ignoresAbort: boolean) {
    const keys = randomKeys();
    await using observer = await listen(databaseUrl(), keys);
    const gate = deferred<void>();
    const leader = locks.make({ ...keys, autoReacquire: false });
    const errors: Error[] = [];
    leader.onError((err) => {
      errors.push(err);
    });
    leader.runWhileLeader(async (term) => {
      if (ignoresAbort)
        await gate.promise; // ignores term.signal
      else await new Promise((resolve) => term.signal.addEventListener('abort', resolve, { once: true }));
    });
    await leader.start();
    expect(await leader.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
    const next = locks.make({
      ...keys,
      acquireMode: 'wait',
      waitSliceMs: 60_000,
      takeoverDelayMs: NEXT_DELAY_MS,
    });
    const fences = fencesOf(next);
    await next.start();
    await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2, {
      what: 'the follower to queue',
    });
    const called = performance.now();
    await leader[how]({ timeoutMs: ignoresAbort ? DEADLINE_MS : 5000 });
    expect(await next.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
    const ledAfterMs = performance.now() - called;
    gate.resolve(); // let the stubborn work return, so the test leaves nothing running
    await eventually(
      () => observer.events.some((e) => e.event.kind === 'acquired' && e.event.id === next.id),
      {
        what: 'the observer to hear the follower’s `acquired` event',
      },
    );
    return {
      kinds: observer.kinds(),
      fences,
      ledAfterMs,
      forced: errors.some((e) => e.name === 'ShutdownError'),
    };
  }

  it.each(['shutdown', 'stepDown'] as const)(
    '%s past its deadline (work that ignores its abort): the session is closed by force, an observer hears no `released`, the next holder waits the full 1 s delay',
    async (how) => {
      const r = await handover(how, true);
      console.log(
        `[forced ${how}] events ${r.kinds.join(',')}; next led ${r.ledAfterMs.toFixed(0)} ms after the ${how}() call (deadline ${DEADLINE_MS} ms, delay ${NEXT_DELAY_MS} ms)`,
      );
      expect(r.forced, 'the deadline expired (a ShutdownError was reported)').toBe(true);
      expect(r.kinds).toEqual(['acquired', 'acquired']); // the leader's grant, the follower's grant
      expect(r.fences).toEqual([NEXT_DELAY_MS]);
      // the grant can only follow the forced close (at the deadline), and the term the delay
      expect(r.ledAfterMs).toBeGreaterThanOrEqual(DEADLINE_MS + NEXT_DELAY_MS - TIMER_EARLY_MS);
      // bound: integration/fence-claims-forced-close
      expect(r.ledAfterMs).toBeLessThan(DEADLINE_MS + NEXT_DELAY_MS + NEXT_DELAY_MS / 2);
    },
  );

  it.each(['shutdown', 'stepDown'] as const)(
    'control: %s within its deadline sends `released` and the next holder leads at once (< 500 ms; the delay is 1 s)',
    async (how) => {
      const r = await handover(how, false);
      expect(r.forced).toBe(false);
      expect(r.kinds).toEqual(['acquired', 'released', 'acquired']);
      expect(r.fences).toEqual([]);
      console.log(
        `[clean ${how}] events ${r.kinds.join(',')}; next led ${r.ledAfterMs.toFixed(0)} ms after the call`,
      );
      // bound: integration/fence-claims-half-next-delay
      expect(r.ledAfterMs).toBeLessThan(NEXT_DELAY_MS / 2);
    },
  );
});

describe('onNewLeader: heard at once by an idle session', () => {
  it('a poll-mode follower between polls: onNewLeader within 5 ms of its own connection receiving the event (p50 of 6 handovers), each < 50 ms after a bare LISTEN connection, no poll', async () => {
    const keys = randomKeys();
    await using observer = await listen(databaseUrl(), keys);
    // a and b hand the lock to each other (wait mode: the other is queued, granted at the unlock)
    const a = locks.make({ ...keys, acquireMode: 'wait', waitSliceMs: 60_000 });
    const b = locks.make({ ...keys, acquireMode: 'wait', waitSliceMs: 60_000 });
    // c: one attempt at start, then none for a minute: its session is idle, LISTENing. Its
    // own client records when each event reaches this process: a second backend (the bare
    // listener's) forwards the same event when the scheduler runs it, up to 12 ms apart in
    // a loaded compat run, so that one is the upper bound only
    const own: { id: string; at: number }[] = [];
    const cId = `${locks.tag}-c`;
    const c = locks.make({
      ...keys,
      id: cId,
      acquireMode: 'poll',
      retryStrategy: new FixedInterval({ intervalMs: 60_000 }),
      connect: async () => {
        const client = new pg.Client({
          connectionString: databaseUrl(),
          application_name: `pgleaderlock:${cId}`,
        });
        client.on('error', () => {});
        client.on('notification', (n) => {
          const e = parseEvent(n.payload ?? '');
          if (e?.kind === 'acquired') own.push({ id: e.id, at: performance.now() });
        });
        await client.connect();
        return client;
      },
    });
    const heard: { id: string; at: number }[] = [];
    c.onNewLeader((id) => {
      heard.push({ id, at: performance.now() });
    });
    await a.start();
    expect(await a.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
    await b.start();
    await c.start();
    await eventually(() => c.stats().failedAttempts >= 1 && heard.some((h) => h.id === a.id), {
      what: 'c to fail its one attempt and learn that a leads',
    });
    const lags: number[] = [];
    const behindBare: number[] = [];
    // ms from each stepDown() call: c's onNewLeader, c's own connection receiving the event, a bare LISTEN receiving it
    const heardAfter: number[] = [];
    const ownAfter: number[] = [];
    const bareAfter: number[] = [];
    let [leader, waiter] = [a, b];
    for (let round = 0; round < 6; round++) {
      await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2, {
        what: `${waiter.id} to queue`,
      });
      const before = observer.events.length;
      const t0 = performance.now();
      await leader.stepDown(); // with autoReacquire, it queues again after one back-off
      const id = waiter.id;
      const grant = () =>
        observer.events.slice(before).find((e) => e.event.kind === 'acquired' && e.event.id === id);
      await eventually(() => heard.at(-1)?.id === id && grant() !== undefined, {
        what: `c and the bare listener to hear that ${id} leads`,
        intervalMs: 2,
      });
      const at = heard.at(-1)?.at ?? Number.NaN;
      lags.push(at - (own.findLast((e) => e.id === id)?.at ?? Number.NaN));
      behindBare.push(at - (grant()?.at ?? Number.NaN));
      heardAfter.push(at - t0);
      ownAfter.push((own.findLast((e) => e.id === id)?.at ?? Number.NaN) - t0);
      bareAfter.push((grant()?.at ?? Number.NaN) - t0);
      [leader, waiter] = [waiter, leader];
    }
    console.log(
      `[onNewLeader] an idle poll-mode session heard the new leader ${lags.map((l) => l.toFixed(2)).join(', ')} ms after its own connection received it; ${behindBare.map((l) => l.toFixed(2)).join(', ')} ms after a bare LISTEN connection`,
    );
    expect(c.stats().failedAttempts).toBe(1); // it never polled again: it heard, it did not ask
    expectNearBaseline(
      "onNewLeader, against c's own connection receiving the event",
      { subject: heardAfter, baseline: ownAfter },
      { overMs: 5, compare: 'paired' },
    );
    expectNearBaseline(
      'onNewLeader, against a bare LISTEN connection receiving the event',
      { subject: heardAfter, baseline: bareAfter },
      { overMs: 50, compare: 'each' },
    );
  });
});

describe('the release sends `released` only while its backend holds the key', () => {
  it.each([
    ['pg_advisory_unlock_all() on its backend: the next holder is granted at once', 'all'],
    [
      'one stray pg_advisory_unlock of its key on its backend: it still holds the key, and its release frees it before its commit',
      'one',
    ],
  ] as const)(
    'a leader whose lock was taken from it (%s) steps down: it sends no released, and the holder after the next waits its delay',
    async (_label, fault) => {
      const keys = randomKeys();
      let aClient: pg.Client | undefined;
      const delayMs = 250;
      // a: it notices nothing for 10 s, so it still leads when it steps down
      const a = locks.make({
        ...keys,
        healthIntervalMs: 10_000,
        autoReacquire: false,
        connect: async () => {
          aClient = new pg.Client({
            connectionString: databaseUrl(),
            application_name: `pgleaderlock:${locks.tag}-a`,
          });
          aClient.on('error', () => {});
          await aClient.connect();
          return aClient;
        },
      });
      const errors: string[] = [];
      a.onError((e) => {
        errors.push(e.message);
      });
      // one wait slice for the whole test: b stays ahead of c in the queue (a slice's end re-queues)
      const b = locks.make({ ...keys, takeoverDelayMs: delayMs, autoReacquire: false, waitSliceMs: 30_000 });
      const c = locks.make({ ...keys, takeoverDelayMs: delayMs, waitSliceMs: 30_000 });
      const bFences = fencesOf(b);
      const cFences = fencesOf(c);
      await using observer = await listen(databaseUrl(), keys);
      await a.start();
      expect(await a.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
      await b.start();
      await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2, {
        what: 'b to queue',
      });
      await c.start();
      await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 3, {
        what: 'c to queue',
      });
      if (fault === 'all') {
        await aClient?.query('SELECT pg_advisory_unlock_all()'); // b, first in the queue, is granted
        expect(await b.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
        expect(a.isLeader).toBe(true); // it has not checked since
        await a.stepDown({ timeoutMs: 2000 });
      } else {
        // a grant holds the key twice: one unlock leaves it held, and a still leads
        await aClient?.query('SELECT pg_advisory_unlock($1, $2)', [keys.key1, keys.key2]);
        expect(
          (await lockHolders(databaseUrl(), keys.key1, keys.key2)).filter((h) => h.granted),
        ).toHaveLength(1);
        expect(a.isLeader).toBe(true);
        await a.stepDown({ timeoutMs: 2000 }); // its first unlock frees the key: b is granted before a commits
        expect(await b.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      }
      expect(errors.join('; ')).toMatch(/not held/);
      // b's session ends uncleanly: c is granted, and nothing it heard proves b stopped
      await terminate(databaseUrl(), await holderPid(databaseUrl(), keys.key1, keys.key2));
      expect(await c.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      expect(cFences).toEqual([delayMs]);
      expect(bFences).toEqual([delayMs]); // b followed a's grant: no proof either
      const heard = observer.events
        .filter((e) => e.event.kind === 'acquired' || e.event.kind === 'released')
        .map((e) => `${e.event.kind} ${'id' in e.event ? e.event.id : ''}`);
      expect(heard).toEqual([`acquired ${a.id}`, `acquired ${b.id}`, `acquired ${c.id}`]);
    },
  );

  it('a leader whose backend took its key once more (a count of 3) steps down: it sends released, the key is free, and the next holder leads without a delay', async () => {
    const keys = randomKeys();
    let aClient: pg.Client | undefined;
    const a = locks.make({
      ...keys,
      healthIntervalMs: 10_000,
      connect: async () => {
        aClient = new pg.Client({
          connectionString: databaseUrl(),
          application_name: `pgleaderlock:${locks.tag}-a`,
        });
        aClient.on('error', () => {});
        await aClient.connect();
        return aClient;
      },
    });
    const b = locks.make({ ...keys, takeoverDelayMs: 250, autoReacquire: false, waitSliceMs: 30_000 });
    const bFences = fencesOf(b);
    await using observer = await listen(databaseUrl(), keys);
    await a.start();
    expect(await a.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
    await b.start();
    await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2, {
      what: 'b to queue',
    });
    const client = aClient as pg.Client;
    await client.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]); // its own: re-entrant
    const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
    await a.stepDown({ timeoutMs: 2000 });
    expect(await b.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
    expect(bFences).toEqual([]);
    await eventually(() => observer.kinds().length === 3, { what: "b's grant to be heard" });
    expect(observer.kinds()).toEqual(['acquired', 'released', 'acquired']);
    // a's backend, kept by the step-down (autoReacquire), holds nothing: the last statement
    // freed every count
    expect(pid).toBeTypeOf('number');
    expect(await adminQuery(databaseUrl(), 'SELECT pid FROM pg_stat_activity WHERE pid = $1', [pid])).toEqual(
      [{ pid }],
    );
    const held = (await lockHolders(databaseUrl(), keys.key1, keys.key2)).filter(
      (h) => h.pid === pid && h.granted,
    );
    expect(held).toEqual([]);
  });
});
