/**
 * PartitionedLeadership's promises about its own process and sessions, against PostgreSQL:
 * never two runs of one partition at once in one process, never a statement sent on a
 * connection that is busy, and nothing left queued on the server once `shutdown()` resolves.
 */
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { type Endpoint, endpointsOf } from '../../src/core/endpoints.js';
import { FREE_STRANDED } from '../../src/core/statements.js';
import type { PartitionedLeadershipOptions } from '../../src/index.js';
import { keysOf } from '../../src/partitions/sql.js';
import { adminQuery, databaseUrl, eventually, sessionsLike, terminate } from '../harness/db.js';
import { interceptingConnect } from '../harness/intercept.js';
import { TIMER_EARLY_MS } from '../harness/timers.js';
import { partitionWorker } from '../harness/workers.js';

const uniq = () => `psafe-${Date.now()}-${Math.random().toString(36).slice(2, 7)}`;

/** The harness's worker, with a 500 ms health interval and no takeover delay. */
const worker = (name: string, partitions: number, extra: Partial<PartitionedLeadershipOptions> = {}) =>
  partitionWorker({ name, partitions, healthIntervalMs: 500, takeoverDelayMs: 0, ...extra });

/** Rows of pg_locks for this name's member locks that are still waiting (not granted). */
async function queuedMemberLocks(name: string): Promise<{ pid: number }[]> {
  return adminQuery(
    databaseUrl(),
    `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 2
        AND classid = $1::int4::oid`,
    [keysOf(name).members],
  );
}

describe('PartitionedLeadership in one process', () => {
  it('never two runs of one partition at once: after its member session is terminated, a rejoin starts a partition’s new run only once the old one (ignoring its abort for 1.5 s) has returned', async () => {
    const name = uniq();
    const w = worker(name, 4, { id: 'solo' });
    const running = new Map<number, number>();
    let overlaps = 0;
    let runs = 0;
    const oldEnded = new Map<number, number>();
    const newStarted = new Map<number, number>();
    let terminatedAt = 0;
    w.runForEach(async (partition, term) => {
      runs += 1;
      if (terminatedAt > 0) newStarted.set(partition, performance.now());
      const now = (running.get(partition) ?? 0) + 1;
      running.set(partition, now);
      if (now > 1) overlaps += 1;
      try {
        await new Promise<void>((resolve) => term.signal.addEventListener('abort', () => resolve()));
        if (terminatedAt > 0 && !newStarted.has(partition)) {
          await new Promise((r) => setTimeout(r, 1500)); // ignores its abort for 1.5 s
          oldEnded.set(partition, performance.now());
        }
      } finally {
        running.set(partition, (running.get(partition) ?? 1) - 1);
      }
    });
    await w.start();
    expect(await w.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    expect(runs).toBe(4);
    const [member] = await sessionsLike(databaseUrl(), 'pgleaderlock:solo#p4');
    terminatedAt = performance.now();
    await terminate(databaseUrl(), member?.pid as number);
    // the worker rejoins within about 100 ms and takes the partitions back; their runs wait
    await eventually(() => newStarted.size === 4, { timeoutMs: 10_000, what: 'the four new runs' });
    expect(overlaps).toBe(0);
    expect(oldEnded.size).toBe(4);
    for (const [partition, started] of newStarted) {
      // each partition's new run started once its own old run had returned
      expect(started).toBeGreaterThanOrEqual((oldEnded.get(partition) as number) - 1);
    }
  });

  it('never a statement on a busy connection: over three deaths seen by the ring watch, no client is asked for a query while one runs', async () => {
    const name = uniq();
    let overlapping = 0;
    let queries = 0;
    /** A connect hook that counts queries sent while another is still running on that client. */
    const connect = (): Promise<pg.Client> => {
      let active = 0;
      return interceptingConnect(databaseUrl, (args, send) => {
        queries += 1;
        if (active > 0) overlapping += 1;
        active += 1;
        const settle = () => {
          active -= 1;
        };
        const p = send(...args) as Promise<unknown>;
        p.then(settle, settle);
        return p;
      })();
    };
    const watcher = worker(name, 8, { id: 'w0', connect });
    await watcher.start();
    for (let i = 1; i <= 3; i++) {
      const id = `w${i}`;
      const other = worker(name, 8, { id });
      await other.start();
      await eventually(() => watcher.memberIds.length === 2, { what: `${id} to be seen` });
      const [session] = await sessionsLike(databaseUrl(), `pgleaderlock:${id}#p8`);
      await terminate(databaseUrl(), session?.pid as number);
      const stopped = other.shutdown(); // so that it does not join again
      await eventually(() => watcher.memberIds.length === 1 && watcher.owned.size === 8, {
        timeoutMs: 10_000,
        what: `${id}'s death to be seen and its partitions taken`,
      });
      await stopped;
    }
    expect(queries).toBeGreaterThan(20);
    expect(overlapping).toBe(0);
  });

  it('nothing left queued: once shutdown() resolves, no backend of the worker waits for a lock, over ten joins and leaves', async () => {
    const name = uniq();
    const stay = worker(name, 8, { id: 'stay' });
    await stay.start();
    for (let i = 0; i < 10; i++) {
      const w = worker(name, 8, { id: `leaver${i}` });
      await w.start();
      // the leaver's ring watch queues for the member after it
      await eventually(async () => (await queuedMemberLocks(name)).length >= 2, {
        what: 'both ring watches to queue',
      });
      const watchPids = (await sessionsLike(databaseUrl(), `pgleaderlock:leaver${i}#watch`)).map(
        (s) => s.pid,
      );
      expect(watchPids).toHaveLength(1);
      await w.shutdown();
      const queued = (await queuedMemberLocks(name)).map((r) => r.pid);
      expect(queued.filter((pid) => watchPids.includes(pid))).toEqual([]);
    }
  });
});

describe('PartitionedLeadership callbacks', () => {
  it('a hung onAssigned is reported after callbackTimeoutMs and delays neither a rebalance, nor the lease, nor shutdown({ timeoutMs })', async () => {
    const name = uniq();
    const a = worker(name, 8, { id: 'a', callbackTimeoutMs: 300 });
    const errors: { code?: unknown; at: number }[] = [];
    a.onError((e) => errors.push({ code: (e as { code?: unknown }).code, at: performance.now() }));
    a.onAssigned(() => new Promise<void>(() => {})); // never settles
    const startedAt = performance.now();
    await a.start();
    await eventually(() => a.owned.size === 8, { what: 'a to own all 8' });
    // the first hung callback is reported after its deadline
    await eventually(() => errors.some((e) => e.code === 'ERR_PGLEADERLOCK_CALLBACK_TIMEOUT'), {
      what: 'the callback timeout to be reported',
    });
    const reported = errors.find((e) => e.code === 'ERR_PGLEADERLOCK_CALLBACK_TIMEOUT')?.at ?? 0;
    expect(reported - startedAt).toBeGreaterThanOrEqual(300 - TIMER_EARLY_MS);
    // bound: integration/partitions-safety-callback-timeout
    expect(reported - startedAt).toBeLessThan(300 + 1000);
    // a joiner gets its share while a's callbacks (8 × 300 ms) are still queued
    const b = worker(name, 8, { id: 'b' });
    const joinAt = performance.now();
    await b.start();
    await eventually(() => b.owned.size === 4 && a.owned.size === 4, { what: 'the 4/4 split' });
    // bound: integration/partitions-safety-join
    expect(performance.now() - joinAt).toBeLessThan(1000);
    // the lease is renewed meanwhile
    expect((a.leaseExpiresAt as number) - performance.now()).toBeGreaterThan(0);
    const stopAt = performance.now();
    await a.shutdown({ timeoutMs: 2000 });
    // bound: integration/partitions-safety-1000
    expect(performance.now() - stopAt).toBeLessThan(1000);
    await eventually(() => b.owned.size === 8, { what: 'b to take a’s share' });
  });
});

describe('freeing what a moved lock session left on its backend (core FREE_STRANDED)', {
  tags: ['pg-major'],
}, () => {
  /** A client holding (k, 1) and (k, 2): (k, 1) stands for the session's anchor key (the lock, or a member lock). */
  async function holder(): Promise<{ client: pg.Client; pid: number; k: number }> {
    const client = new pg.Client({ connectionString: databaseUrl() });
    client.on('error', () => {});
    await client.connect();
    onTestFinished(() => client.end().catch(() => {}));
    const k = 700_000 + Math.floor(Math.random() * 100_000);
    await client.query('SELECT pg_advisory_lock($1, 1), pg_advisory_lock($1, 2)', [k]);
    const [row] = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows;
    return { client, pid: row?.pid as number, k };
  }
  const heldBy = async (pid: number) =>
    (
      await adminQuery<{ n: number }>(
        databaseUrl(),
        `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = $1`,
        [pid],
      )
    )[0]?.n;

  it('run on the backend itself, freeing all (a worker): every advisory lock there is released, the backend lives', async () => {
    const { client, pid, k } = await holder();
    expect(await heldBy(pid)).toBe(2);
    await client.query(FREE_STRANDED, [k, 1, pid, true]);
    expect(await heldBy(pid)).toBe(0);
    expect((await client.query('SELECT 1 AS one')).rows[0]).toEqual({ one: 1 });
  });

  it('run on the backend itself, not freeing all (a lock): only the anchor key is released, held twice as a grant holds it', async () => {
    const { client, pid, k } = await holder();
    await client.query('SELECT pg_advisory_lock($1, 1)', [k]); // the anchor twice, as ON_GRANT takes it
    expect(await heldBy(pid)).toBe(2);
    await client.query(FREE_STRANDED, [k, 1, pid, false]);
    expect(await heldBy(pid)).toBe(1);
    const [left] = (
      await client.query<{ objid: string }>(
        `SELECT objid::text FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`,
      )
    ).rows;
    expect(left?.objid).toBe('2');
  });

  it('run on another backend: that backend is terminated, and its locks with it', async () => {
    const { pid, k } = await holder();
    const other = new pg.Client({ connectionString: databaseUrl() });
    await other.connect();
    onTestFinished(() => other.end().catch(() => {}));
    await other.query(FREE_STRANDED, [k, 1, pid, true]);
    await eventually(async () => (await heldBy(pid)) === 0, { what: 'the backend to end' });
    expect(await sessionsLike(databaseUrl(), '')).not.toContainEqual(expect.objectContaining({ pid }));
  });

  it('a backend that does not hold the anchor key (its pid reused by another connection) is left alone', async () => {
    const { client, pid, k } = await holder();
    const other = new pg.Client({ connectionString: databaseUrl() });
    await other.connect();
    onTestFinished(() => other.end().catch(() => {}));
    const { rows } = await other.query(FREE_STRANDED, [k, 3, pid, true]);
    expect(rows).toEqual([]);
    expect(await heldBy(pid)).toBe(2);
    expect((await client.query('SELECT 1 AS one')).rows[0]).toEqual({ one: 1 });
  });
});

describe('runForEach handle', () => {
  it('stop() aborts the current runs of every partition and resolves once they have settled; no run starts after it', {
    tags: ['pg-major'],
  }, async () => {
    const name = uniq();
    const w = worker(name, 4, { id: 'h' });
    let running = 0;
    let started = 0;
    const handle = w.runForEach(async (_p, term) => {
      started += 1;
      running += 1;
      try {
        await new Promise<void>((resolve) => term.signal.addEventListener('abort', () => resolve()));
        await new Promise((r) => setTimeout(r, 50)); // winds down after its abort
      } finally {
        running -= 1;
      }
    });
    await w.start();
    await eventually(() => running === 4, { what: 'four runs' });
    await handle.stop();
    expect(running).toBe(0);
    expect(w.owned.size).toBe(4); // the partitions stay owned: only the work stopped
    const other = worker(name, 4, { id: 'i' });
    await other.start();
    await eventually(() => w.owned.size === 2 && other.owned.size === 2, { what: 'a rebalance' });
    expect(await w.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    const named = await sessionsLike(databaseUrl(), 'pgleaderlock:h#p4');
    expect(named, 'only the member session carries the member’s name').toHaveLength(1);
    const [member] = named;
    const assignedBefore = w.stats().acquisitions;
    await terminate(databaseUrl(), member?.pid as number); // partitions lost and taken again
    await eventually(() => w.stats().acquisitions > assignedBefore && w.owned.size === 2, {
      timeoutMs: 10_000,
      what: 'new terms on the worker after its rejoin',
    });
    expect(started).toBe(4); // none of them ran the stopped function
  });
});

describe('session names', { tags: ['pg-major'] }, () => {
  it('a worker’s ring watch session is named pgleaderlock:<id>#watch from its first moment: while workers join and watch each other, pgleaderlock:<id>#p<P> names only the member session', async () => {
    // the mechanism: the default connection opens under the name the session asks for
    const [endpoint] = endpointsOf({ connectionString: databaseUrl() }, 'pgleaderlock:x#p4', 2000);
    const client = await (endpoint as Endpoint).connect('pgleaderlock:x#watch');
    try {
      const { rows: own } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const rows = await adminQuery<{ application_name: string }>(
        databaseUrl(),
        'SELECT application_name FROM pg_stat_activity WHERE pid = $1',
        [own[0]?.pid],
      );
      expect(rows).toEqual([{ application_name: 'pgleaderlock:x#watch' }]);
    } finally {
      await client.end();
    }

    // what an operator sees: sample pg_stat_activity while two workers join and each one's
    // ring watch connects to watch the other (the watch connects only once it has a target)
    const name = uniq();
    const suffix = Math.random().toString(36).slice(2, 7);
    const ids = [`m${suffix}`, `n${suffix}`];
    const names = ids.map((id) => `pgleaderlock:${id}#p4`);
    const seen = new Map<string, Set<number>>(names.map((n) => [n, new Set()]));
    const admin = new pg.Client({ connectionString: databaseUrl() });
    await admin.connect();
    onTestFinished(() => admin.end());
    let sampling = true;
    let samples = 0;
    const sampler = (async () => {
      while (sampling) {
        const { rows } = await admin.query<{ pid: number; application_name: string }>(
          'SELECT pid, application_name FROM pg_stat_activity WHERE application_name = ANY($1)',
          [names],
        );
        for (const r of rows) seen.get(r.application_name)?.add(r.pid);
        samples += 1;
      }
    })();
    const [first, second] = ids.map((id) => worker(name, 4, { id })) as [
      ReturnType<typeof worker>,
      ReturnType<typeof worker>,
    ];
    await first.start();
    await second.start();
    await eventually(() => first.owned.size === 2 && second.owned.size === 2, { what: 'a rebalance' });
    expect(await first.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    expect(await second.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    // both ring watches are connected (each queued on the other's member lock)
    await eventually(async () => (await queuedMemberLocks(name)).length === 2, { what: 'both ring watches' });
    sampling = false;
    await sampler;
    expect(samples).toBeGreaterThan(10);
    const holders = await adminQuery<{ pid: number }>(
      databaseUrl(),
      `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2
          AND classid = $1::int4::oid ORDER BY pid`,
      [keysOf(name).members],
    );
    expect(holders).toHaveLength(2);
    const memberPids = new Set(holders.map((h) => h.pid));
    for (const n of names) {
      const pids = [...(seen.get(n) as Set<number>)];
      expect(pids, n).toHaveLength(1);
      expect(memberPids.has(pids[0] as number), `${n} is a member session`).toBe(true);
    }
  });
});
