/**
 * The lock behind a real PgBouncer (one per test, in front of this file's own PostgreSQL
 * server). Transaction and statement pooling share a backend between clients, which breaks
 * session advisory locks: the lock must refuse them and strand nothing on a pooled backend.
 * Session pooling works: failover, backend termination, a PgBouncer restart. And a pooler
 * that rejects a startup parameter is reported, not retried in a storm.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { type Deferred, deferred } from '../../src/core/clock.js';
import { isDefiniteRefusal } from '../../src/core/errors.js';
import { ExponentialBackoff, type LeaderLock, LockError, LockState } from '../../src/index.js';
import { expectNearBaseline } from '../harness/baseline.js';
import { eventually, holderPid, lockHolders, ownServer, randomKeys, within } from '../harness/db.js';
import { inspectDuring } from '../harness/inspect.js';
import { interceptQueries, statementText } from '../harness/intercept.js';
import { lockFactory } from '../harness/locks.js';
import { type PgServer, TEST_PASSWORD } from '../harness/pg-server.js';
import {
  type PgBouncer,
  type PgBouncerOptions,
  startPgBouncer,
  stopWhileProbeWaits,
} from '../harness/pgbouncer.js';
import { useTermRecorder } from '../harness/terms.js';

let server: PgServer;
beforeAll(async () => {
  server = await ownServer();
});
afterAll(async () => {
  await server?.dispose();
});

type Make = ReturnType<typeof lockFactory>['make'];

const recordTerms = useTermRecorder();

/**
 * Run `body` with a PgBouncer of its own and a lock factory pointed at it. Afterwards every
 * lock is shut down and no client of ours may be left on PgBouncer (the leak guard).
 */
async function withBouncer(
  options: Omit<PgBouncerOptions, 'server'>,
  body: (bouncer: PgBouncer, make: Make) => Promise<void>,
): Promise<void> {
  await using bouncer = await startPgBouncer({ server, ...options });
  onTestFinished(() => bouncer.dispose()); // also when the test times out and `await using` never runs
  const locks = lockFactory(() => bouncer.url);
  try {
    await body(bouncer, locks.make);
  } finally {
    await locks.cleanup();
  }
  if (!bouncer.running) return;
  let left: unknown[] = [];
  await eventually(
    async () => {
      left = (await bouncer.show('CLIENTS')).filter((c) => c.database !== 'pgbouncer');
      return left.length === 0;
    },
    { timeoutMs: 3000, what: 'no clients left on PgBouncer' },
  ).catch((err: Error) => {
    throw new Error(`${err.message}; left: ${JSON.stringify(left)}`);
  });
}

/**
 * The physical limit through the same PgBouncer: a bare `pg` client holds the key and another
 * waits in `pg_advisory_lock`; the holder's server backend is terminated (or it unlocks) and
 * the waiter's grant is timed, once (each round of the test below takes one beside it).
 */
async function bareHandover(url: string, how: 'terminate' | 'unlock'): Promise<number> {
  const keys = randomKeys();
  const holder = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-bare' });
  const waiter = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-bare' });
  const admin = new pg.Client({
    connectionString: server.url,
    application_name: 'pgleaderlock-test-admin',
  });
  for (const c of [holder, waiter, admin]) c.on('error', () => {});
  await Promise.all([holder.connect(), waiter.connect(), admin.connect()]);
  try {
    await holder.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
    const granted = waiter
      .query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2])
      .then(() => performance.now());
    await eventually(
      async () => (await lockHolders(server.url, keys.key1, keys.key2)).some((r) => !r.granted),
      {
        what: 'the bare waiter to queue',
      },
    );
    const pid = how === 'terminate' ? await holderPid(server.url, keys.key1, keys.key2) : 0;
    const t0 = performance.now();
    if (how === 'terminate') await admin.query('SELECT pg_terminate_backend($1)', [pid]);
    else await holder.query('SELECT pg_advisory_unlock($1, $2)', [keys.key1, keys.key2]);
    return (await granted) - t0;
  } finally {
    await Promise.all([holder, waiter, admin].map((c) => c.end().catch(() => {})));
  }
}

/** What a lock went through: its errors, and whether it ever entered LEADER. */
function watch(lock: LeaderLock) {
  const seen = { errors: [] as Error[], everLeader: false, tried: deferred<void>(), states: [] as string[] };
  lock.onError((err) => {
    seen.errors.push(err);
    seen.tried.resolve();
  });
  lock.onAcquireFailed(() => seen.tried.resolve());
  lock.onStateChange((_from, to) => {
    seen.states.push(`${Math.round(performance.now())} ${to}`);
    if (to === LockState.LEADER) {
      seen.everLeader = true;
      seen.tried.resolve();
    }
  });
  return seen;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe.each(['wait', 'poll'] as const)('%s mode', (acquireMode) => {
  describe.each(['transaction', 'statement'] as const)('PgBouncer in %s mode', (poolMode) => {
    it.each([
      [1, 'staggered'],
      [1, 'simultaneously'],
      [20, 'staggered'],
      [20, 'simultaneously'],
    ] as const)(
      `pool size %i, two candidates started %s: over 3 s no two terms overlap, neither enters LEADER, each gets ERR_PGLEADERLOCK_UNSAFE naming the pooler and ${poolMode} mode; afterwards no lock row on the server`,
      async (poolSize, start) => {
        await withBouncer({ poolMode, defaultPoolSize: poolSize }, async (_bouncer, make) => {
          const terms = recordTerms();
          const keys = randomKeys();
          const a = make({ ...keys, acquireMode, healthIntervalMs: 100 });
          const b = make({ ...keys, acquireMode, healthIntervalMs: 100 });
          const seenA = watch(a);
          const seenB = watch(b);
          if (start === 'staggered') {
            await a.start();
            await within(seenA.tried.promise, 10_000, 'A to lead or try'); // A has led or tried
            await sleep(300); // the stagger itself, not a wait for an event
            await b.start();
          } else {
            await Promise.all([a.start(), b.start()]);
          }
          await sleep(3000);
          expect(terms.overlaps()).toEqual([]);
          for (const [name, seen] of [
            ['A', seenA],
            ['B', seenB],
          ] as const) {
            expect(seen.everLeader, `${name} entered LEADER`).toBe(false);
            const refusal = seen.errors.find(
              (e) => e instanceof LockError && e.code === 'ERR_PGLEADERLOCK_UNSAFE',
            );
            expect(
              refusal,
              `${name} got no ERR_PGLEADERLOCK_UNSAFE; its errors: ${JSON.stringify(seen.errors.map((e) => e.message))}`,
            ).toBeDefined();
            expect(refusal?.message).toMatch(/pooler/);
            expect(refusal?.message).toMatch(new RegExp(poolMode));
          }
          await Promise.all([a.shutdown(), b.shutdown()]);
          // straight to PostgreSQL, with PgBouncer (and its pooled backends) still up
          let rows: unknown[] = [];
          await eventually(
            async () => {
              rows = await lockHolders(server.url, keys.key1, keys.key2);
              return rows.length === 0;
            },
            { timeoutMs: 2000, what: 'no pg_locks row for the key' },
          ).catch(() => {
            throw new Error(`a lock row stayed behind on a pooled backend: ${JSON.stringify(rows)}`);
          });
        });
      },
    );
  });

  describe('PgBouncer in session mode', () => {
    it(`two candidates, one leads; pg_terminate_backend of the leader's server backend → the other is granted the lock; shutdown() of that leader → a third, following, is granted it: each (p50 of 3 rounds) within ${acquireMode === 'wait' ? '25 ms of a bare pg pair through the same PgBouncer' : '60 ms of a bare pair (25 ms poll interval)'}, measured beside it in each round`, async () => {
      await withBouncer({ poolMode: 'session' }, async (bouncer, make) => {
        const terms = recordTerms();
        // three rounds, each with its bare pair measured beside it (a single trial against a
        // baseline taken earlier failed CI run AS: 45.2 ms against 2.0 with both cores 94-100 %
        // busy for that moment; the median of interleaved rounds shares such a moment)
        const measured = {
          terminate: [] as number[],
          graceful: [] as number[],
          bareTerminate: [] as number[],
          bareUnlock: [] as number[],
        };
        for (let round = 0; round < 3; round++) {
          measured.bareTerminate.push(await bareHandover(bouncer.url, 'terminate'));
          measured.bareUnlock.push(await bareHandover(bouncer.url, 'unlock'));
          const { terminateMs, gracefulMs } = await handoffRound(make, terms);
          measured.terminate.push(terminateMs);
          measured.graceful.push(gracefulMs);
        }
        const fmt = (xs: number[]): string => xs.map((x) => x.toFixed(1)).join(', ');
        console.log(
          `[pgbouncer] session mode, ${acquireMode}: terminate → other leads in ${fmt(measured.terminate)} ms (bare pair ${fmt(measured.bareTerminate)}); ` +
            `shutdown → follower leads in ${fmt(measured.graceful)} ms (bare unlock → grant ${fmt(measured.bareUnlock)})`,
        );
        // README: "failover in milliseconds through PgBouncer". Wait mode is granted by the
        // server as a bare waiter is, plus the lock's own statements; poll mode is woken by
        // the release's NOTIFY or its next 25 ms poll
        const slack = acquireMode === 'wait' ? 25 : 60;
        expectNearBaseline(
          `${acquireMode} mode: terminate → the other leads, against a bare pair through the same PgBouncer`,
          { subject: measured.terminate, baseline: measured.bareTerminate },
          { overMs: slack },
        );
        expectNearBaseline(
          `${acquireMode} mode: shutdown → the follower leads, against a bare unlock → grant`,
          { subject: measured.graceful, baseline: measured.bareUnlock },
          { overMs: slack },
        );
      });
    });

    /** One round: two candidates, the leader's backend terminated, a third queued, the new leader shut down. */
    async function handoffRound(
      make: Make,
      terms: ReturnType<typeof recordTerms>,
    ): Promise<{ terminateMs: number; gracefulMs: number }> {
      const keys = randomKeys();
      // after a loss a lock tries again at once: the first leader must not, so that in poll
      // mode too the other (polling every 25 ms) is the one that takes over
      const first = make({ ...keys, acquireMode, autoReacquire: false });
      await first.start();
      await within(first.waitForLeadership(), 5000, 'the first candidate to lead');
      const other = make({ ...keys, acquireMode });
      await other.start();
      await eventually(() => other.state === LockState.FOLLOWER || other.state === LockState.ACQUIRING, {
        what: 'the second candidate to follow',
      });
      await sleep(300);
      expect(terms.overlaps()).toEqual([]);
      expect(first.isLeader).toBe(true);
      expect(other.isLeader).toBe(false);

      const admin = new pg.Client({
        connectionString: server.url,
        application_name: 'pgleaderlock-test-admin',
      });
      admin.on('error', () => {});
      await admin.connect();
      try {
        // 1. terminate the leader's backend, found on the server itself (not through PgBouncer)
        const pid = await holderPid(server.url, keys.key1, keys.key2);
        const tookOver = deferred<number>();
        other.onAcquired(() => tookOver.resolve(performance.now()));
        const t0 = performance.now();
        await admin.query('SELECT pg_terminate_backend($1)', [pid]);
        const terminateMs = (await within(tookOver.promise, 5000, 'the other candidate to lead')) - t0;
        expect(other.isLeader).toBe(true);

        // 2. a third candidate follows; then the leader shuts down
        const third = make({ ...keys, acquireMode });
        await third.start();
        if (acquireMode === 'wait') {
          await eventually(
            async () => (await lockHolders(server.url, keys.key1, keys.key2)).some((r) => !r.granted),
            { what: 'the third candidate to queue' },
          );
        } else {
          await eventually(() => third.state === LockState.FOLLOWER, {
            what: 'the third candidate to follow',
          });
        }
        const handedOver = deferred<number>();
        third.onAcquired(() => handedOver.resolve(performance.now()));
        const t1 = performance.now();
        await other.shutdown();
        const gracefulMs = (await within(handedOver.promise, 5000, 'the follower to lead')) - t1;
        expect(third.isLeader).toBe(true);
        await Promise.all([first.shutdown(), third.shutdown()]);
        return { terminateMs, gracefulMs };
      } finally {
        await admin.end().catch(() => {});
      }
    }

    it('LeaderLock.inspect() behind PgBouncer, while the holder’s last statement is the pooler guard’s check of its backend (run after each ownership check): the leader’s priority; under the takeover delay, pending', async () => {
      await withBouncer({ poolMode: 'session' }, async (_bouncer, make) => {
        const keys = randomKeys();
        const pinned = (q: string): boolean => q.startsWith('/* pgleaderlock:pinned */');
        // a first acquisition proves nothing before it: it holds the lock for the delay
        const lock = make({
          ...keys,
          acquireMode,
          priority: 4,
          healthIntervalMs: 500,
          takeoverDelayMs: 4000,
        });
        const fenced = deferred<void>();
        lock.onTakeoverFence(() => fenced.resolve());
        await lock.start();
        await within(fenced.promise, 5000, 'the takeover delay to begin');
        const pid = await holderPid(server.url, keys.key1, keys.key2);
        const during = await inspectDuring(server.url, pid, keys, pinned, 3000);
        expect(lock.isLeader).toBe(false);
        expect(during.seen).toMatchObject({ pending: true, leader: { priority: 4 } });

        await within(lock.waitForLeadership(), 5000, 'the term to open');
        const after = await inspectDuring(server.url, pid, keys, pinned, 3000);
        expect(after.seen).toMatchObject({ pending: false, leader: { priority: 4 } });
      });
    });

    it('PgBouncer stopped and started on the same port: the leader leaves LEADER within 50 ms of its own session connection hearing it (5 s health interval); once it is back, one of the two leads', async () => {
      await withBouncer({ poolMode: 'session' }, async (bouncer, make) => {
        const terms = recordTerms();
        const keys = randomKeys();
        // every client each lock opens, when it heard its connection end, and whether it is a
        // lock session (it ran the session's preparation): PgBouncer closes its clients one
        // by one (21–48 ms apart on a loaded machine), so another client, even the lock's own
        // probe, is no baseline for how fast the lock reacts to its session's end
        type Seen = { ended: Deferred<number>; at: number | null; session: boolean };
        const clients = new Map<string, Seen[]>();
        const all = [0, 1].map((i) => {
          const id = `${randomKeys().key1}-stop${i}`;
          const own: Seen[] = [];
          clients.set(id, own);
          return make({
            ...keys,
            id,
            acquireMode,
            healthIntervalMs: 5000,
            connect: async () => {
              const c = new pg.Client({
                connectionString: bouncer.url,
                application_name: `pgleaderlock:${id}`,
              });
              const rec: Seen = { ended: deferred<number>(), at: null, session: false };
              const heard = (): void => {
                rec.at ??= performance.now();
                rec.ended.resolve(rec.at);
              };
              c.on('error', heard);
              c.on('end', heard);
              interceptQueries(c, (args, send) => {
                if (statementText(args).startsWith('/* pgleaderlock:prepare */')) rec.session = true;
                return send(...args);
              });
              own.push(rec);
              await c.connect();
              return c;
            },
          });
        });
        await Promise.all(all.map((l) => l.start()));
        await eventually(() => all.some((l) => l.isLeader), { what: 'a leader' });
        const leader = all.find((l) => l.isLeader)!;
        const left = deferred<number>();
        leader.onStateChange((from) => {
          if (from === LockState.LEADER) left.resolve(performance.now());
        });
        const port = bouncer.port;
        const open = (clients.get(leader.id) ?? []).filter((c) => c.at === null);
        const sessions = open.filter((c) => c.session);
        const t0 = performance.now();
        await bouncer.stop();
        const leftAt = await within(left.promise, 1000, 'the leader to leave LEADER');
        const heard = await within(
          Promise.all(open.map((c) => c.ended.promise)),
          1000,
          "the leader's connections to hear it",
        );
        console.log(
          `[pgbouncer] stopped (${acquireMode}): the leader left LEADER at +${(leftAt - t0).toFixed(1)} ms; its ${heard.length} open connection(s) heard it at ${open.map((c) => `+${((c.at as number) - t0).toFixed(1)}${c.session ? ' (its session)' : ''}`).join(', ')} ms`,
        );
        // from its session connection's own 'error'/'end', not from its 5 s health interval
        expect(sessions).toHaveLength(1);
        expectNearBaseline(
          `${acquireMode} mode: PgBouncer stopped → the leader out of LEADER, against its session connection hearing it`,
          { subject: leftAt - t0, baseline: (sessions[0]?.at as number) - t0 },
          { overMs: 50 },
        );
        expect(all.filter((l) => l.isLeader)).toHaveLength(0);

        await bouncer.start();
        expect(bouncer.port).toBe(port);
        const t1 = performance.now();
        await eventually(() => all.filter((l) => l.isLeader).length === 1, {
          what: 'a leader after PgBouncer is back',
          timeoutMs: 10_000,
        });
        await sleep(300);
        expect(terms.overlaps()).toEqual([]);
        // leader first, so that no waiting follower is cancelled here (that has a test of its own)
        const next = all.find((l) => !l.isLeader)!;
        await all.find((l) => l.isLeader)?.shutdown();
        await within(next.waitForLeadership(), 5000, 'the other candidate to lead');
        console.log(
          `[pgbouncer] restart, ${acquireMode}: a leader ${(performance.now() - t1).toFixed(0)} ms after the start`,
        );
      });
    });
  });

  it('a full pool (session mode, pool size 1): the probe gets no backend within queryTimeoutMs, which is a refusal, never a pass', async () => {
    await withBouncer({ poolMode: 'session', defaultPoolSize: 1 }, async (_bouncer, make) => {
      const lock = make({ ...randomKeys(), acquireMode, queryTimeoutMs: 500 });
      const seen = watch(lock);
      await lock.start();
      await within(seen.tried.promise, 10_000, 'a refusal');
      await sleep(1000); // and it stays refused
      const err = seen.errors[0] as LockError;
      expect(err.code).toBe('ERR_PGLEADERLOCK_UNSAFE');
      expect(err.message).toMatch(/could not be checked.*no answer within 500 ms/);
      expect(seen.everLeader).toBe(false);
    });
  });

  it('shutdown() while the probe waits for a backend (session mode, pool size 1, a reset query that takes 1 s): the probe connection is closed within 100 ms of the call, no error is reported', async () => {
    // the backend the session frees goes back to the pool only after the reset query: a
    // probe not abandoned would wait for it (and then run), over 1 s. PgBouncer itself lists
    // a waiting client until it would serve it, so the probe's socket is read on this side
    const slowReset = { serverResetQuery: 'SELECT pg_sleep(1)' };
    await withBouncer({ poolMode: 'session', defaultPoolSize: 1, ...slowReset }, async (bouncer, make) => {
      const lock = make({ ...randomKeys(), acquireMode, queryTimeoutMs: 5000 });
      const seen = watch(lock);
      const starting = lock.start();
      // the session holds the one backend (once PgBouncer's own start-up check has freed it);
      // its probe, the lock's second client, waits for one
      const closed = await stopWhileProbeWaits(bouncer, () => lock.shutdown());
      await starting;
      console.log(
        `[pgbouncer] shutdown during the pooler probe: its connection closed ${closed.toFixed(1)} ms after the call`,
      );
      // bound: compat/pgbouncer-probe-closed
      expect(closed).toBeLessThan(100);
      expect(seen.errors).toEqual([]);
      expect(seen.everLeader).toBe(false);
    });
  });

  it('a backend that still carries another session’s marker (server_reset_query off) is refused: the pooler does not reset backends between clients', async () => {
    await withBouncer({ poolMode: 'session', serverResetQuery: '' }, async (bouncer, make) => {
      // two backends left marked by another client: the lock's session gets one (its own
      // marker overwrites it), its probe the other
      const clients = [0, 1].map(() => new pg.Client({ connectionString: bouncer.url }));
      await Promise.all(clients.map((c) => c.connect()));
      await Promise.all(
        clients.map((c) => c.query("SELECT set_config('pgleaderlock.session', 'someone-else', false)")),
      );
      await Promise.all(clients.map((c) => c.end()));
      const lock = make({ ...randomKeys(), acquireMode });
      const seen = watch(lock);
      await lock.start();
      await within(seen.tried.promise, 10_000, 'a refusal');
      const err = seen.errors[0] as LockError;
      expect(err.code).toBe('ERR_PGLEADERLOCK_UNSAFE');
      expect(err.message).toContain('carries another lock session');
      expect(seen.everLeader).toBe(false);
    });
  });

  it('refused behind transaction pooling at start, the lock stops (a definite refusal before its first session ends the run); started again once the pooler is restarted in session mode, it leads', async () => {
    await withBouncer({ poolMode: 'transaction' }, async (bouncer, make) => {
      const lock = make({
        ...randomKeys(),
        acquireMode,
        retryStrategy: new ExponentialBackoff({ baseMs: 100, maxMs: 200 }),
      });
      const seen = watch(lock);
      const stopped = new Promise<void>((resolve) => lock.onStopped(() => resolve()));
      await lock.start();
      await within(seen.tried.promise, 10_000, 'a refusal');
      // run AC (2026-12-03) missed onStopped here beside a Node.js line: on a loaded machine the
      // probe at connect can be handed a backend of its own and pass, the first acquisition
      // then runs on a backend without the session's marker, and that definite refusal was
      // retried for ever (fixed: src/leader/steps.ts `served`; test/unit/pooler-retry.test.ts).
      // A probe unanswered within queryTimeoutMs (2 s here) is a refusal too, but not a
      // definite one, retried (src/core/pooler.ts): the run ends at the first definite one
      const definite = (e: Error): boolean => isDefiniteRefusal(e);
      await within(stopped, 20_000, 'onStopped after a definite refusal').catch((err: Error) => {
        throw new Error(
          `${err.message}; now ${Math.round(performance.now())} ${lock.state}; states ${seen.states.join(', ')}; errors: ${seen.errors.map((e) => e.message).join(' | ')}`,
          { cause: err },
        );
      });
      if (seen.errors.length > 1) {
        console.log(
          `[pgbouncer] ${acquireMode}: ${seen.errors.length - 1} undecided refusal(s) before the definite one`,
        );
      }
      expect(lock.state).toBe(LockState.STOPPED);
      expect(seen.errors.map((e) => (e as LockError).code)).toEqual(
        seen.errors.map(() => 'ERR_PGLEADERLOCK_UNSAFE'),
      );
      // the definite refusal reported once, and the run ended on it (not retried)
      expect(seen.errors.filter(definite)).toHaveLength(1);
      expect(definite(seen.errors.at(-1) as Error)).toBe(true);
      expect(seen.everLeader).toBe(false);
      await bouncer.reconfigure('session');
      await lock.start();
      expect(await lock.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
    });
  });

  it("a pooler that rejects the 'options' startup parameter: onError names it, never the password; the default back-off makes at most 6 attempts in 3 s", async () => {
    // PgBouncer's default ignore_startup_parameters (extra_float_digits) does not include `options`
    await withBouncer({ poolMode: 'session' }, async (bouncer, make) => {
      const lock = make({
        ...randomKeys(),
        acquireMode,
        clientConfig: { options: '-c statement_timeout=0' },
        // the default: 100 ms doubling, each delay in [d/2, d]: attempts at 0 and at least 50,
        // 150, 350, 750 and 1,550 ms later (the next at 3,150 ms at the earliest)
        retryStrategy: new ExponentialBackoff(),
      });
      const seen = watch(lock);
      await lock.start();
      await sleep(3000); // the window in which connection attempts are counted
      const rejected = bouncer.log().match(/closing because: unsupported startup parameter/g) ?? [];
      console.log(
        `[pgbouncer] rejected startup parameter, ${acquireMode}: ${rejected.length} connection attempts and ` +
          `${seen.errors.length} errors in 3 s; first: ${seen.errors[0]?.message}`,
      );
      expect(seen.errors.length).toBeGreaterThanOrEqual(1);
      expect(seen.errors[0]?.message).toMatch(/\boptions\b/);
      for (const err of seen.errors) {
        expect(err.message).not.toContain(TEST_PASSWORD);
        expect(String((err.cause as Error | undefined)?.message ?? '')).not.toContain(TEST_PASSWORD);
      }
      expect(rejected.length).toBeGreaterThanOrEqual(1);
      expect(rejected.length).toBeLessThanOrEqual(6);
      expect(seen.everLeader).toBe(false);
    });
  });
});

describe('wait mode, PgBouncer in session mode', () => {
  // Shutting down a waiting follower cancels its wait with a CancelRequest, which goes through
  // PgBouncer. PgBouncer < 1.19.1 drops the cancel, or crashes (pgbouncer#801), when the cancel's
  // client socket is closed before PgBouncer has forwarded it.
  it('10 followers shut down one at a time while they wait: each shutdown resolves within 10 s, each follower leaves the queue, and PgBouncer keeps running', async () => {
    await withBouncer({ poolMode: 'session' }, async (bouncer, make) => {
      const keys = randomKeys();
      const leader = make({ ...keys, acquireMode: 'wait' });
      await leader.start();
      await within(leader.waitForLeadership(), 5000, 'a leader');
      const waiting = async () =>
        (await lockHolders(server.url, keys.key1, keys.key2)).filter((r) => !r.granted).length;
      for (let i = 0; i < 10; i++) {
        const follower = make({ ...keys, acquireMode: 'wait', waitSliceMs: 30_000 });
        await within(follower.start(), 5000, `follower ${i + 1} to start`);
        await eventually(async () => (await waiting()) === 1, { what: `follower ${i + 1} to queue` });
        await within(follower.shutdown(), 10_000, `follower ${i + 1} to shut down`);
        await eventually(async () => (await waiting()) === 0, {
          what: `follower ${i + 1} to leave the queue`,
        });
        // throws "PgBouncer exited on its own: … FATAL …" if the cancel crashed it
        await bouncer.show('CLIENTS');
      }
      expect(leader.isLeader).toBe(true);
    });
  });
});

describe('a pooler that round-robins its backends, one candidate alone', () => {
  // docs/safety.md, "What a pooler could still hide": with nobody else on the pool, a pooler
  // that hands out its backends in turn gives two statements in a row of the lock session two
  // backends: the statement run right after the grant sees it, before LEADER. Which pool
  // sizes line a grant up with the session's own backend depends on how many statements
  // connecting takes, so every size from 3 to 10 is tried (before that second statement
  // existed, 7 let the candidate lead until its next ownership check)
  it('transaction mode, server_round_robin = 1, pool sizes 3 to 10 (all warm), both acquire modes: never enters LEADER in 1 s of attempts; refuses with ERR_PGLEADERLOCK_UNSAFE', async () => {
    const entered: string[] = [];
    for (let size = 3; size <= 10; size++) {
      for (const acquireMode of ['wait', 'poll'] as const) {
        await withBouncer(
          { poolMode: 'transaction', defaultPoolSize: size, serverRoundRobin: true },
          async (bouncer, make) => {
            // open `size` server connections, so that every one is in the rotation
            const warm = Array.from({ length: size }, () => new pg.Client({ connectionString: bouncer.url }));
            for (const c of warm) c.on('error', () => {});
            await Promise.all(warm.map((c) => c.connect()));
            await Promise.all(warm.map((c) => c.query('SELECT pg_sleep(0.1)')));
            await Promise.all(warm.map((c) => c.end()));
            const lock = make({ ...randomKeys(), acquireMode, healthIntervalMs: 100 });
            const seen = watch(lock);
            await lock.start();
            await sleep(1000);
            await lock.shutdown();
            if (seen.everLeader) entered.push(`pool ${size} ${acquireMode}`);
            expect(
              seen.errors.some((e) => e instanceof LockError && e.code === 'ERR_PGLEADERLOCK_UNSAFE'),
              `pool ${size}, ${acquireMode}: no refusal`,
            ).toBe(true);
          },
        );
      }
    }
    expect(entered, 'entered LEADER behind a round-robin transaction pooler').toEqual([]);
  });
});

describe.each(['wait', 'poll'] as const)(
  'a pooler that round-robins its backends (%s mode)',
  (acquireMode) => {
    // docs/safety.md, "What a pooler could still hide": with server_round_robin the probe at
    // connect may be handed another backend than the lock session's, and a candidate may take
    // the lock; the marker on every statement, the key check, the second statement and the
    // probe kept while leading must still keep a second candidate from leading, and end any
    // leadership within a few ownership checks
    it('five candidates started at once through transaction mode, pool size 20, server_round_robin = 1: over 3 s (5 ms samples, 3 rounds) never two isLeader; whoever entered LEADER left it with ERR_PGLEADERLOCK_UNSAFE within 500 ms (5 health intervals); no lock row left', async () => {
      const SPAN_MS = 500;
      const led: string[] = [];
      for (let round = 0; round < 3; round++) {
        await withBouncer(
          { poolMode: 'transaction', defaultPoolSize: 20, serverRoundRobin: true },
          async (_bouncer, make) => {
            const keys = randomKeys();
            const all = [0, 1, 2, 3, 4].map(() => make({ ...keys, acquireMode, healthIntervalMs: 100 }));
            // each LEADER span, timed by the state changes themselves (not by the sampling)
            const since = new Map<LeaderLock, number>();
            const spans: { lock: LeaderLock; from: number; ms: number }[] = [];
            const ended = new Map<LeaderLock, ReturnType<typeof deferred<void>>>();
            // when each lock was refused as behind a sharing pooler
            const refused = new Map<LeaderLock, { at: number; message: string }[]>();
            for (const l of all) {
              ended.set(l, deferred<void>());
              refused.set(l, []);
              l.onError((err) => {
                if (err instanceof LockError && err.code === 'ERR_PGLEADERLOCK_UNSAFE')
                  refused.get(l)?.push({ at: performance.now(), message: err.message });
              });
              l.onStateChange((from, to) => {
                if (to === LockState.LEADER) since.set(l, performance.now());
                if (from === LockState.LEADER) {
                  const at = since.get(l) as number;
                  spans.push({ lock: l, from: at, ms: performance.now() - at });
                  since.delete(l);
                  ended.get(l)?.resolve();
                }
              });
            }
            await Promise.all(all.map((l) => l.start()));
            const end = performance.now() + 3000;
            let samples = 0;
            let most = 0;
            while (performance.now() < end) {
              samples += 1;
              most = Math.max(most, all.filter((l) => l.isLeader).length);
              await sleep(5);
            }
            // one that entered LEADER near the end of the window has until its span's budget
            // (one that enters during that wait is past the window, and not counted)
            const open = [...since.entries()];
            await Promise.all(
              open.map(([l, from]) =>
                within(
                  ended.get(l)?.promise as Promise<void>,
                  Math.max(0, from + SPAN_MS + 200 - performance.now()),
                  `${l.id} to leave LEADER behind a pooler that shares backends`,
                ).catch(() => {}),
              ),
            );
            const stillLeading = open.filter(([l, from]) => since.get(l) === from).map(([l]) => l.id);
            console.log(
              `[pgbouncer] round robin, ${acquireMode}, round ${round + 1}: ${samples} samples, at most ${most} isLeader at once; ` +
                `led: ${spans.length ? spans.map((s) => `${s.lock.id} ${s.ms.toFixed(0)} ms`).join(', ') : 'nobody'}` +
                `${stillLeading.length ? `; still leading: ${stillLeading.join(', ')}` : ''}`,
            );
            expect(samples).toBeGreaterThan(100);
            expect(most).toBeLessThanOrEqual(1);
            expect(stillLeading, 'still leading behind a pooler that shares backends').toEqual([]);
            for (const span of spans) {
              led.push(span.lock.id);
              expect(span.ms, `${span.lock.id} led behind a pooler that shares backends`).toBeLessThanOrEqual(
                SPAN_MS,
              );
              // leaving LEADER is a loss; the refusal comes from the lock's next attempt
              const refusal = () => refused.get(span.lock)?.find((r) => r.at >= span.from);
              await eventually(() => refusal() !== undefined, { timeoutMs: 3000 }).catch(() => {});
              expect(
                refusal()?.message,
                `${span.lock.id} led, and was not refused with ERR_PGLEADERLOCK_UNSAFE after it`,
              ).toMatch(/pooler/);
            }
            await Promise.all(all.map((l) => l.shutdown()));
            let rows: unknown[] = [];
            await eventually(
              async () => {
                rows = await lockHolders(server.url, keys.key1, keys.key2);
                return rows.length === 0;
              },
              { timeoutMs: 2000, what: 'no pg_locks row for the key' },
            ).catch(() => {
              throw new Error(`a lock row stayed behind on a pooled backend: ${JSON.stringify(rows)}`);
            });
          },
        );
      }
      console.log(`[pgbouncer] round robin, ${acquireMode}: ${led.length} LEADER span(s) in 3 rounds`);
    });
  },
);
