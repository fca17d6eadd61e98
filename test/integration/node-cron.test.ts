/**
 * pgleaderlock/node-cron against PostgreSQL and the real node-cron v4 (docs/node-cron.md):
 * replicas in processes of their own (test/fixtures/node-cron-replica.fixture.ts) run a
 * task every second; each fire runs once across them, also across stepDowns timed at the
 * fire's second; an old leader that has not noticed its loss cannot claim; a claim racing
 * a new leader's epoch increment waits for it and fails; an unreachable database skips the
 * fire; the defaults of timeoutMs and retainMs, and the 10-minute sweep interval, hold.
 */
import { type ChildProcess, fork } from 'node:child_process';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import cron from 'node-cron';
import pg from 'pg';
import { afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { scheduleReport } from '../../examples/node-cron.js';
import { type Clock, FixedInterval } from '../../src/index.js';
import { fireKey, leaderCoordinator, type Queryable } from '../../src/node-cron/index.js';
import { useChildren } from '../harness/children.js';
import { claimsOf, handoverAtClaim } from '../harness/cron-handover.js';
import {
  adminQuery,
  assertNoSessions,
  databaseUrl,
  eventually,
  randomKeys,
  testTag,
  within,
} from '../harness/db.js';
import { proxyTo } from '../harness/fault-proxy.js';
import { fixtureScript } from '../harness/fixture-bundle.js';
import { useLocks } from '../harness/locks.js';
import { TIMER_EARLY_MS } from '../harness/timers.js';

const FIXTURE = path.join(import.meta.dirname, '../fixtures/node-cron-replica.fixture.ts');
const CLAIMS = 'pgleaderlock_cron_claims';
const quiet = { info() {}, warn() {}, error() {}, debug() {} };
/** The blocked claim's timeoutMs (the default, 5 s, is the unit test's: test/unit/node-cron.test.ts). */
const CLAIM_TIMEOUT_MS = 1500;
/** The most the blocked-claim test's set-up (a row inserted, the task scheduled) may take before its fire. */
const SETUP_MS = 400;

interface Report {
  ev: string;
  id: string;
  at: number;
  fireAt?: string;
  term?: number | null;
  epoch?: string;
  reason?: string;
  calledAt?: number;
}

const locks = useLocks();
const track = useChildren();
const pools: pg.Pool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.end()));
});

/** A pool for claims whose connections carry this test's tag (the leak guard sees them). */
function claimsPool(url = databaseUrl()): pg.Pool {
  const pool = new pg.Pool({
    connectionString: url,
    max: 2,
    application_name: `pgleaderlock:${locks.tag}-claims`,
  });
  pool.on('error', () => {});
  pools.push(pool);
  return pool;
}

/** A claim row written directly, its fire `age` (an interval) before the server's now(). */
async function seedClaim(scope: string, task: string, age: string): Promise<void> {
  await adminQuery(
    databaseUrl(),
    `INSERT INTO ${CLAIMS} (fire_at, scope, task, epoch, leader_id) VALUES (now() - $3::interval, $1, $2, 0, 'seeded')`,
    [scope, task, age],
  );
}

async function tasksOf(scope: string): Promise<string[]> {
  const rows = await adminQuery<{ task: string }>(
    databaseUrl(),
    `SELECT task FROM ${CLAIMS} WHERE scope = $1 ORDER BY task`,
    [scope],
  );
  return rows.map((r) => r.task);
}

/** `pool`, with the coordinator's sweeps (its cleanup DELETEs) in `sweeps` as they are sent. */
function watchSweeps(pool: Queryable): { pool: Queryable; sweeps: Promise<pg.QueryResult>[] } {
  const sweeps: Promise<pg.QueryResult>[] = [];
  return {
    sweeps,
    pool: {
      query(text, values) {
        const result = pool.query(text, values);
        if (text.includes('pgleaderlock:cron-cleanup')) sweeps.push(result);
        return result as never;
      },
    },
  };
}

/** The real time, whatever a test does to the global `performance.now` (given to locks as their clock). */
const realNow = performance.now.bind(performance);
const realClock: Clock = {
  now: realNow,
  setTimeout: (fn, ms) => setTimeout(fn, ms).unref(),
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** Two replicas of one service: the same lock, the same task, each in a process of its own. */
function startReplicas(leaderWaitMs: number) {
  const tag = testTag();
  const lockName = `${tag}-lock`;
  const reports: Report[] = [];
  const procs = new Map<string, ChildProcess>();
  for (const n of [0, 1]) {
    const id = `${tag}-r${n}`;
    const proc = fork(
      fixtureScript(FIXTURE).script,
      [JSON.stringify({ url: databaseUrl(), lockName, id, task: 'tick', leaderWaitMs })],
      {
        execArgv: fixtureScript(FIXTURE).execArgv,
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      },
    );
    proc.on('message', (m: Report) => reports.push(m));
    procs.set(id, track(proc));
  }
  /** The replica that acquired last (it leads until it steps down). */
  const leader = (): string | undefined => reports.filter((r) => r.ev === 'acquired').at(-1)?.id;
  const stop = async (): Promise<void> => {
    await Promise.all(
      [...procs.values()].map(
        (p) =>
          new Promise<void>((resolve) => {
            if (p.exitCode !== null || p.signalCode !== null) return resolve();
            p.once('exit', () => resolve());
            p.disconnect();
            setTimeout(() => p.kill('SIGKILL'), 5000).unref();
          }),
      ),
    );
    await assertNoSessions(tag);
  };
  return { tag, lockName, reports, procs, leader, stop };
}

type Replicas = ReturnType<typeof startReplicas>;

/** What two replicas ran, fire by fire, over a run with handovers (see the describe below). */
async function outcome(
  r: Replicas,
  first: number,
  last: number,
  handovers: { slot: number; offset: number }[],
) {
  const slots = Array.from({ length: (last - first) / 1000 + 1 }, (_, i) => first + i * 1000);
  const iso = (s: number) => new Date(s).toISOString();
  const runs = (s: number) => r.reports.filter((x) => x.ev === 'run' && x.fireAt === iso(s));
  const skips = (s: number, id: string | undefined) =>
    r.reports.filter((x) => x.ev === 'skipped' && x.id === id && x.fireAt === iso(s));
  const missed = slots.filter((s) => runs(s).length === 0);
  const table = slots.map((s) => {
    const h = handovers.find((x) => x.slot === s);
    const byReplica = [...r.procs.keys()].map((id) => {
      const run = runs(s).find((x) => x.id === id);
      const skip = skips(s, id)[0];
      return run ? `ran +${run.at - s} ms` : skip ? `skipped +${skip.at - s} ms` : 'still waiting';
    });
    return `${iso(s).slice(11, 19)}${h ? ` stepDown at ${h.offset} ms` : ''}: ${byReplica.join(' | ')}`;
  });
  // the claims in the database: one scope, that of the replicas' lock
  const claims = await adminQuery<{ fire_at: Date; epoch: string; finished: boolean }>(
    databaseUrl(),
    `SELECT fire_at, epoch::text AS epoch, finished_at IS NOT NULL AS finished FROM ${CLAIMS}
      WHERE leader_id LIKE $1 AND fire_at BETWEEN $2 AND $3 ORDER BY fire_at`,
    [`${r.tag}-%`, iso(first), iso(last)],
  );
  return { slots, runs, skips, missed, table: table.join('\n  '), claims };
}

describe('two replica processes, real node-cron, a task every second; 2 quiet fires, then 3 stepDowns timed at fires', {
  tags: ['node-line'],
}, () => {
  // one run of two services side by side (4 processes), one per leaderWaitMs; each test
  // checks one of them
  const offsets = [-2, 0, 2]; // each stepDown this many ms from a fire's second
  const results = new Map<
    number,
    Awaited<ReturnType<typeof outcome>> & { steady: number[]; replicas: Replicas }
  >();
  beforeAll(async () => {
    const t0 = Date.now();
    const services = [1000, 0].map((w) => ({ leaderWaitMs: w, r: startReplicas(w) }));
    try {
      await eventually(
        () => services.every(({ r }) => r.reports.filter((x) => x.ev === 'ready').length === 2 && r.leader()),
        // generous: on a loaded 2-core machine a tsx process takes seconds to start
        { timeoutMs: 30_000, what: 'both services started, one replica of each leading' },
      );
      console.log(`4 replicas started, one of each service leading, in ${Date.now() - t0} ms`);
      const first = Math.ceil(Date.now() / 1000) * 1000 + 1000;
      const steady = [first, first + 1000];
      const handovers = offsets.map((offset, i) => ({ slot: first + 2000 + i * 1000, offset }));
      const last = first + 2000 + offsets.length * 1000; // one more fire after the last handover
      for (const h of handovers) {
        await sleep(Math.max(0, h.slot - 400 - Date.now()));
        const from = services.map(({ r }) => r.leader());
        for (const [i, { r }] of services.entries()) {
          r.procs.get(from[i] ?? '')?.send({ stepDownAt: h.slot + h.offset });
        }
        await eventually(() => services.every(({ r }, i) => r.leader() !== from[i]), {
          timeoutMs: 2000,
          what: `handovers at ${new Date(h.slot).toISOString()}`,
        });
      }
      await sleep(Math.max(0, last + 700 - Date.now()));
      for (const { leaderWaitMs, r } of services) {
        results.set(leaderWaitMs, { ...(await outcome(r, first, last, handovers)), steady, replicas: r });
      }
    } catch (err) {
      for (const { r } of services) console.log(JSON.stringify(r.reports));
      throw err;
    } finally {
      await Promise.all(services.map(({ r }) => r.stop()));
    }
    for (const [w, o] of results) console.log(`leaderWaitMs ${w}: ${o.missed.length} missed\n  ${o.table}`);
  }, 60_000);

  /** Checks that hold for both services. */
  function common(o: NonNullable<ReturnType<typeof results.get>>): void {
    expect(Math.max(...o.slots.map((s) => o.runs(s).length))).toBe(1); // never twice
    for (const run of o.replicas.reports.filter((x) => x.ev === 'run')) expect(run.term).not.toBeNull(); // in a term
    for (const s of o.steady) {
      expect(o.runs(s)).toHaveLength(1); // no handover: the leader runs every fire
      const follower = [...o.replicas.procs.keys()].find((id) => id !== o.runs(s)[0]?.id);
      // the follower's node-cron fired too, and was refused
      expect(o.skips(s, follower)).toEqual([expect.objectContaining({ reason: 'not-elected' })]);
    }
    // leadership really moved: both replicas ran fires
    expect(new Set(o.replicas.reports.filter((x) => x.ev === 'run').map((x) => x.id)).size).toBe(2);
    // the database agrees: one claim per fire that ran, under the epoch of the term it ran in
    expect(o.claims.map((c) => c.fire_at.getTime())).toEqual(o.slots.filter((s) => o.runs(s).length === 1));
    for (const c of o.claims) {
      expect(c.finished).toBe(true); // onComplete marked it
      expect(c.epoch).toBe(o.runs(c.fire_at.getTime())[0]?.epoch);
    }
  }

  it('leaderWaitMs 1000: each fire runs exactly once, on the leader, also the fires at the stepDowns', () => {
    const o = results.get(1000);
    expect(o).toBeDefined();
    if (!o) return;
    common(o);
    expect(o.missed).toEqual([]);
  });

  it('leaderWaitMs 0: each fire runs at most once, on the leader; a fire at a stepDown may be skipped', () => {
    const o = results.get(0);
    expect(o).toBeDefined();
    if (!o) return;
    common(o);
    expect(o.missed.length).toBeLessThanOrEqual(offsets.length); // at most the handover's own fire
  });
});

describe('pgleaderlock/node-cron, in process', () => {
  it('an old leader that lost its session but has not noticed cannot claim a fire: the new epoch refuses it', async () => {
    const keys = randomKeys();
    const proxy = await proxyTo(databaseUrl());
    try {
      const old = locks.make({
        ...keys,
        fencing: true,
        connectionString: proxy.url(databaseUrl()),
        healthIntervalMs: 1000,
        queryTimeoutMs: 1000,
        autoReacquire: false,
      });
      await old.start();
      await old.waitForLeadership();
      const next = locks.make({
        ...keys,
        fencing: true,
        retryStrategy: new FixedInterval({ intervalMs: 10 }),
      });
      await next.start();
      const pool = claimsPool();
      const [oldC, nextC] = [old, next].map((l) =>
        leaderCoordinator(l, { pool, name: `${locks.tag}-scope` }),
      );
      const warmAt = Math.floor(Date.now() / 1000) * 1000;
      expect(await oldC?.shouldRun(fireKey('tick', new Date(warmAt)), 30_000)).toBe(true); // the table exists, the pool is connected

      // the server sees the old leader's session vanish; the old leader hears nothing until
      // its next check times out (healthIntervalMs + queryTimeoutMs)
      proxy.blackhole();
      proxy.resetUpstream();
      await eventually(() => next.isLeader, { timeoutMs: 900, what: 'the follower to lead' });
      const key = fireKey('tick', new Date(Math.floor(Date.now() / 1000) * 1000 + 60_000));
      expect(old.isLeader).toBe(true); // it still believes it leads
      expect(await oldC?.shouldRun(key, 30_000)).toBe(false);
      expect(old.isLeader).toBe(true); // so only the epoch refused it
      const scope = `${locks.tag}-scope`;
      expect((await claimsOf(scope)).map((c) => c.fire_at.getTime())).toEqual([warmAt]);
      expect(await nextC?.shouldRun(key, 30_000)).toBe(true);
      expect((await claimsOf(scope)).at(-1)?.epoch).toBe(String(next.term?.epoch));
    } finally {
      await proxy.close();
    }
  });

  it('a claim racing a new epoch increment waits for it, then fails', async () => {
    const keys = randomKeys();
    const lock = locks.make({ ...keys, fencing: true });
    await lock.start();
    await lock.waitForLeadership();
    const pool = claimsPool();
    const coordinator = leaderCoordinator(lock, { pool, name: `${locks.tag}-scope` });
    const second = Math.floor(Date.now() / 1000) * 1000;
    expect(await coordinator.shouldRun(fireKey('tick', new Date(second)), 30_000)).toBe(true);

    // a new leader's increment in flight: the epoch row updated, not yet committed
    const bump = new pg.Client({
      connectionString: databaseUrl(),
      application_name: `pgleaderlock:${locks.tag}-bump`,
    });
    bump.on('error', () => {});
    await bump.connect();
    try {
      await bump.query('BEGIN');
      await bump.query('UPDATE pgleaderlock_epochs SET epoch = epoch + 1 WHERE key1 = $1 AND key2 = $2', [
        keys.key1,
        keys.key2,
      ]);
      let settled = false;
      const claim = coordinator.shouldRun(fireKey('tick', new Date(second + 1000)), 30_000).finally(() => {
        settled = true;
      });
      await eventually(
        async () =>
          (
            await adminQuery(
              databaseUrl(),
              `SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock'`,
              [`pgleaderlock:${locks.tag}-claims`],
            )
          ).length === 1,
        { what: 'the claim to wait on the epoch row' },
      );
      expect(settled).toBe(false);
      await bump.query('COMMIT');
      expect(await claim).toBe(false);
      expect(lock.isLeader).toBe(true); // refused by the epoch, not by a lost lease
      expect(await claimsOf(`${locks.tag}-scope`)).toHaveLength(1);
    } finally {
      await bump.end();
    }
  });

  it('a term that ends while its claim is in flight: the next leader (leaderWaitMs) asks again, never in a tight loop, until the withdrawal is in, and runs the fire', {
    tags: ['pg-major'],
  }, async () => {
    // how soon after the withdrawal: test/timing/node-cron-handover.test.ts (one file at a time)
    const h = await handoverAtClaim(locks);
    // the old claim was still there, of the old epoch, when the next leader asked
    expect(h.epochsBefore).toEqual([h.oldEpoch]);
    expect(h.oldRun).toBe(false); // never outside its term
    expect(h.nextRun).toBe(true);
    expect(h.withdrawnAt).toBeGreaterThan(h.askedAt);
    // asked again until the withdrawal was in: pending each time before, claimed once after
    const outcomes = h.asks.map((a) => a.outcome);
    expect(outcomes.at(-1)).toBe('claimed');
    expect(outcomes.slice(0, -1).every((o) => o === 'pending')).toBe(true);
    expect(outcomes.length).toBeGreaterThan(1);
    // no more than one ask sent after the withdrawal was answered: the first one took the fire
    expect(h.asks.filter((a) => a.sentAt > h.withdrawnAt).length).toBeLessThanOrEqual(1);
    // not in a tight loop: a pause of 20 ms after each answer allows at most one ask per 20 ms
    // of waiting (load only makes them fewer); how regular: test/timing/node-cron-handover.test.ts
    expect(h.asks.length).toBeLessThanOrEqual((h.withdrawnAt - h.askedAt) / 15 + 2);
    expect(h.epochsAfter).toEqual([h.nextEpoch]);
  });

  it('a database that does not answer at fire time: node-cron skips the fire after timeoutMs', async () => {
    const keys = randomKeys();
    const lock = locks.make({ ...keys, fencing: true });
    await lock.start();
    await lock.waitForLeadership();
    const proxy = await proxyTo(databaseUrl());
    try {
      const pool = claimsPool(proxy.url(databaseUrl()));
      const timeoutMs = 400;
      const coordinator = leaderCoordinator(lock, { pool, name: `${locks.tag}-scope`, timeoutMs });
      expect(await coordinator.shouldRun(fireKey('warm', new Date(0)), 30_000)).toBe(true);
      proxy.blackhole();
      const ran: number[] = [];
      const skipped: { fireAt: number; at: number; reason: string | undefined }[] = [];
      const task = cron.schedule('* * * * * *', () => void ran.push(Date.now()), {
        name: 'tick',
        distributed: true,
        runCoordinator: coordinator,
        logger: quiet,
      });
      task.on('execution:skipped', (ctx) => {
        skipped.push({ fireAt: ctx.date.getTime(), at: Date.now(), reason: ctx.reason });
      });
      try {
        await eventually(() => skipped.length > 0, { timeoutMs: 2500, what: 'a skipped fire' });
      } finally {
        await task.destroy();
      }
      const [skip] = skipped;
      console.log(
        `database blackholed: fire skipped ${skip ? skip.at - skip.fireAt : '?'} ms after its second`,
      );
      expect(ran).toEqual([]);
      expect(skip?.reason).toBe('coordinator-error');
      expect((skip?.at ?? 0) - (skip?.fireAt ?? 0)).toBeGreaterThanOrEqual(timeoutMs - TIMER_EARLY_MS);
      // bound: integration/node-cron-blackholed-skip
      expect((skip?.at ?? 0) - (skip?.fireAt ?? 0)).toBeLessThan(2 * timeoutMs);
    } finally {
      await proxy.close();
    }
  });

  it('old claims are deleted after a claim: its own scope’s, older than retainMs or ttlMs if longer', async () => {
    const keys = randomKeys();
    const lock = locks.make({ ...keys, fencing: true });
    await lock.start();
    await lock.waitForLeadership();
    const pool = claimsPool();
    const [mine, other] = [`${locks.tag}-mine`, `${locks.tag}-other`];
    const now = Math.floor(Date.now() / 1000) * 1000;
    const at = (ms: number) => fireKey('tick', new Date(ms));
    // claims made by coordinators that keep them 24 h (their own sweeps delete none of these)
    const otherC = leaderCoordinator(lock, { pool, name: other });
    expect(await otherC.shouldRun(at(now - 7_200_000), 30_000)).toBe(true);
    const earlier = leaderCoordinator(lock, { pool, name: mine });
    expect(await earlier.shouldRun(at(now - 7_200_000), 30_000)).toBe(true);
    expect(await earlier.shouldRun(at(now - 30_000), 30_000)).toBe(true);
    // retainMs 1 s, but node-cron's ttlMs 60 s: a coordinator's first claim sweeps (then at
    // most every 10 minutes) what is older than 60 s
    const mineC = leaderCoordinator(lock, { pool, name: mine, retainMs: 1000 });
    expect(await mineC.shouldRun(at(now), 60_000)).toBe(true);
    await eventually(async () => (await claimsOf(mine)).length === 2, {
      what: 'the old claim to be deleted',
    });
    expect((await claimsOf(mine)).map((c) => c.fire_at.getTime())).toEqual([now - 30_000, now]);
    expect((await claimsOf(other)).map((c) => c.fire_at.getTime())).toEqual([now - 7_200_000]); // another scope
  });

  // timeoutMs 1.5 s here, not the default 5 s: what this test adds to the unit test of the default
  // (test/unit/node-cron.test.ts, on the manual clock) is a claim held up by a real row lock
  // and node-cron skipping the fire, not the length of the wait
  it(`timeoutMs (${CLAIM_TIMEOUT_MS} ms): a claim blocked on a row lock is given up ${CLAIM_TIMEOUT_MS} ms after the fire; node-cron logs it, skips the fire (coordinator-error), and the claim committing later is not run`, async () => {
    const keys = randomKeys();
    const lock = locks.make({ ...keys, fencing: true });
    await lock.start();
    await lock.waitForLeadership();
    const pool = claimsPool();
    const scope = `${locks.tag}-scope`;
    const claims: Promise<pg.QueryResult>[] = [];
    let claimSentAt = 0;
    const watched: Queryable = {
      query(text, values) {
        const result = pool.query(text, values);
        if (text.includes('/* pgleaderlock:cron-claim */')) {
          claims.push(result);
          claimSentAt = Date.now();
        }
        return result as never;
      },
    };
    const coordinator = leaderCoordinator(lock, { pool: watched, name: scope, timeoutMs: CLAIM_TIMEOUT_MS });
    const warm = Math.floor(Date.now() / 1000) * 1000 - 1000;
    expect(await coordinator.shouldRun(fireKey('warm', new Date(warm)), 30_000)).toBe(true); // table made, pool connected
    // another transaction holds the fire's row, uncommitted: the claim's INSERT waits on it
    const blocker = new pg.Client({
      connectionString: databaseUrl(),
      application_name: `pgleaderlock:${locks.tag}-blocker`,
    });
    blocker.on('error', () => {});
    await blocker.connect(); // before the fire's second is chosen: connecting can be slow under load
    // the fire's second: at least SETUP_MS + 100 ms ahead, so that a set-up that takes less
    // than SETUP_MS leaves it 100 ms before the fire
    const chosenAt = Date.now();
    const fireAt = Math.ceil((chosenAt + SETUP_MS + 100) / 1000) * 1000;
    try {
      await blocker.query('BEGIN');
      await blocker.query(
        `INSERT INTO ${CLAIMS} (fire_at, scope, task, epoch, leader_id) VALUES ($1, $2, 'tick', 0, 'blocker')`,
        [new Date(fireAt).toISOString(), scope],
      );
      const ran: number[] = [];
      const logged: string[] = [];
      const task = cron.schedule(
        `${new Date(fireAt).getSeconds()} * * * * *`,
        () => void ran.push(Date.now()),
        {
          name: 'tick',
          distributed: true,
          runCoordinator: coordinator,
          logger: { ...quiet, error: (message) => void logged.push(String(message)) },
        },
      );
      // set up before the fire (else it comes a minute later): the blocking row and the schedule
      // bound: integration/node-cron-setup
      expect(Date.now() - chosenAt).toBeLessThan(SETUP_MS);
      let skip: { fireAt: number; at: number; reason: string } | undefined;
      try {
        skip = await within(
          new Promise<{ fireAt: number; at: number; reason: string }>((resolve) => {
            task.on('execution:skipped', (ctx) => {
              resolve({ fireAt: ctx.date.getTime(), at: Date.now(), reason: String(ctx.reason) });
            });
          }),
          fireAt + CLAIM_TIMEOUT_MS + 2000 - Date.now(),
          'the fire to be skipped',
        );
      } finally {
        await task.destroy();
      }
      console.log(
        `claim blocked (timeoutMs ${CLAIM_TIMEOUT_MS}): fire skipped ${skip.at - fireAt} ms after its second, ${skip.at - claimSentAt} ms after the claim was sent`,
      );
      expect(skip.fireAt).toBe(fireAt);
      expect(skip.reason).toBe('coordinator-error');
      expect(skip.at - fireAt).toBeGreaterThanOrEqual(CLAIM_TIMEOUT_MS - TIMER_EARLY_MS);
      // bound: integration/node-cron-claim-blocked
      expect(skip.at - fireAt).toBeLessThan(CLAIM_TIMEOUT_MS + 600);
      expect(logged).toEqual(['Run coordinator failed; skipping execution (fail-closed)']);
      expect(claims).toHaveLength(2); // the warm-up's, and the fire's, still waiting
      // the blocker goes away: the late claim commits, and nobody runs the fire
      await blocker.query('ROLLBACK');
      expect((await claims[1])?.rows).toEqual([{ outcome: 'claimed' }]);
      expect((await tasksOf(scope)).filter((t) => t === 'tick')).toHaveLength(1);
      expect(ran).toEqual([]);
    } finally {
      await blocker.end();
    }
  });

  it('default retainMs (24 h): a sweep deletes its scope’s claim fired 24 h 1 min ago, keeps one fired 23 h 59 min ago and another scope’s', async () => {
    const keys = randomKeys();
    const lock = locks.make({ ...keys, fencing: true });
    await lock.start();
    await lock.waitForLeadership();
    const { pool, sweeps } = watchSweeps(claimsPool());
    const [mine, other] = [`${locks.tag}-mine`, `${locks.tag}-other`];
    const now = Math.floor(Date.now() / 1000) * 1000;
    // the other scope's first claim makes the table and sweeps (nothing of its own yet)
    const otherC = leaderCoordinator(lock, { pool, name: other });
    expect(await otherC.shouldRun(fireKey('tick', new Date(now)), 30_000)).toBe(true);
    expect(sweeps).toHaveLength(1);
    await sweeps[0];
    await seedClaim(mine, 'older', '24 hours 1 minute');
    await seedClaim(mine, 'newer', '23 hours 59 minutes');
    await seedClaim(other, 'older', '24 hours 1 minute');
    // retainMs not given; 30 s is node-cron's default ttlMs, shorter: 24 h it is
    const mineC = leaderCoordinator(lock, { pool, name: mine });
    expect(await mineC.shouldRun(fireKey('tick', new Date(now)), 30_000)).toBe(true);
    expect(sweeps).toHaveLength(2);
    expect((await sweeps[1])?.rowCount).toBe(1);
    expect(await tasksOf(mine)).toEqual(['newer', 'tick']);
    expect(await tasksOf(other)).toEqual(['older', 'tick']);
  });

  it('sweeps: one after a coordinator’s first claim, none at a claim 1 ms short of 10 minutes later, one at a claim 10 minutes later (performance.now() set)', {
    tags: ['pg-major'],
  }, async () => {
    const keys = randomKeys();
    // the lock keeps the real time: its lease must not end when the test moves performance.now()
    const lock = locks.make({ ...keys, fencing: true, clock: realClock });
    await lock.start();
    await lock.waitForLeadership();
    const { pool, sweeps } = watchSweeps(claimsPool());
    const scope = `${locks.tag}-scope`;
    const coordinator = leaderCoordinator(lock, { pool, name: scope });
    const second = Math.floor(Date.now() / 1000) * 1000;
    /** A claim of the fire `n` seconds after `second`, with performance.now() reading `now` meanwhile. */
    const claimAt = async (now: number, n: number): Promise<boolean> => {
      const spy = vi.spyOn(performance, 'now').mockReturnValue(now);
      try {
        return await coordinator.shouldRun(fireKey('tick', new Date(second + n * 1000)), 30_000);
      } finally {
        spy.mockRestore();
      }
    };
    const t0 = realNow();
    expect(await claimAt(t0, 0)).toBe(true);
    expect(sweeps).toHaveLength(1);
    await sweeps[0];
    await seedClaim(scope, 'old', '25 hours'); // what any later sweep deletes
    expect(await claimAt(t0 + 599_999, 1)).toBe(true);
    expect(sweeps).toHaveLength(1); // the sweep would have been sent before shouldRun resolved
    expect(await tasksOf(scope)).toEqual(['old', 'tick', 'tick']);
    expect(await claimAt(t0 + 600_000, 2)).toBe(true);
    expect(sweeps).toHaveLength(2);
    expect((await sweeps[1])?.rowCount).toBe(1);
    expect(await tasksOf(scope)).toEqual(['tick', 'tick', 'tick']);
  });

  it('a role without CREATE on the schema claims through a table made for it', {
    tags: ['pg-major'],
  }, async () => {
    const keys = randomKeys();
    const lock = locks.make({ ...keys, fencing: true });
    await lock.start();
    await lock.waitForLeadership();
    const [role, schema] = [`${locks.tag}_cron`, `${locks.tag}_s`];
    const url = databaseUrl();
    await adminQuery(url, `CREATE SCHEMA ${schema}`);
    try {
      // the table made by a role that may (here the admin's first claim)
      const admin = leaderCoordinator(lock, {
        pool: claimsPool(),
        table: `${schema}.claims`,
        name: locks.tag,
      });
      expect(await admin.shouldRun(fireKey('tick', new Date(0)), 30_000)).toBe(true);
      await adminQuery(url, `CREATE ROLE ${role} LOGIN PASSWORD 'cron'`);
      await adminQuery(url, `GRANT USAGE ON SCHEMA ${schema} TO ${role}`); // no CREATE
      await adminQuery(url, `GRANT SELECT, INSERT, UPDATE, DELETE ON ${schema}.claims TO ${role}`);
      await adminQuery(url, `GRANT SELECT, UPDATE ON pgleaderlock_epochs TO ${role}`);
      const asRole = new URL(url);
      [asRole.username, asRole.password] = [role, 'cron'];
      const pool = claimsPool(asRole.toString());
      const coordinator = leaderCoordinator(lock, { pool, table: `${schema}.claims`, name: locks.tag });
      expect(await coordinator.shouldRun(fireKey('tick', new Date(1000)), 30_000)).toBe(true);
      await coordinator.onComplete(fireKey('tick', new Date(1000)));
      await pool.end();
      pools.splice(pools.indexOf(pool), 1);
    } finally {
      await adminQuery(url, `DROP SCHEMA ${schema} CASCADE`);
      await adminQuery(
        url,
        `DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '${role}') THEN
        REVOKE ALL ON pgleaderlock_epochs FROM ${role}; DROP ROLE ${role}; END IF; END $$`,
      );
    }
  });

  it('examples/node-cron.ts runs its task on the leader', { tags: ['node-line', 'pg-major'] }, async () => {
    const ran: number[] = [];
    const stop = await scheduleReport(databaseUrl(), async () => void ran.push(Date.now()), {
      name: `${testTag()}-report`,
      expression: '* * * * * *',
    });
    try {
      await eventually(() => ran.length >= 1, { timeoutMs: 3000, what: 'the report to run' });
    } finally {
      await stop();
    }
  });
});
