/**
 * Through Debian's pgpool-II (`pgpool2`, 4.3) in streaming-replication mode, in front of a
 * primary and a streaming standby, load balancing on (docs/safety.md, "pgpool-II"):
 *  - candidates keep one leader at a time;
 *  - with `allow_sql_comments = on`, the first election after pgpool starts does not stall
 *    (it waited a whole wait slice in 2 of 6 trials while the wait statement went in the
 *    extended protocol);
 *  - the lock logs the pgpool front once, with the risky settings;
 *  - `doctor` fails on `failover_on_backend_shutdown = on` and names the fix;
 *  - `break` refuses through such a pgpool (a terminate would detach the primary), and
 *    succeeds without taking the pool down when the setting is off.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaderLock, LockError } from '../../src/index.js';
import { cli } from '../harness/cli.js';
import { type Cluster, startCluster } from '../harness/cluster.js';
import { eventually, randomKeys } from '../harness/db.js';
import { type Pgpool, startPgpool } from '../harness/pgpool.js';
import { useTermRecorder } from '../harness/terms.js';

let cluster: Cluster;
beforeAll(async () => {
  cluster = await startCluster();
}, 60_000);
afterAll(async () => {
  await cluster?.dispose();
});

function pgpool(settings: Record<string, string | number | boolean>): Promise<Pgpool> {
  return startPgpool({
    backends: cluster.nodes.map((n) => ({ host: '127.0.0.1', port: n.port })),
    settings: { load_balance_mode: true, ...settings },
  });
}

/** An unrelated client of the pool: a fresh connection and a `SELECT 1`. */
async function poolWorks(url: string): Promise<boolean> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000, query_timeout: 3000 });
  c.on('error', () => {});
  try {
    await c.connect();
    await c.query('SELECT 1');
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => {});
  }
}

/** Holders of the key on the primary itself, read there directly. */
async function holdersOnPrimary(keys: { key1: number; key2: number }): Promise<number[]> {
  const rows = await cluster.primary.query<{ pid: number }>(
    `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
        AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2`,
    [keys.key1, keys.key2],
  );
  return rows.map((r) => r.pid);
}

/** A client of the pool holding a session lock on `keys` (an abandoned holder, for `break`). */
async function holding(
  url: string,
  keys: { key1: number; key2: number },
): Promise<pg.Client & AsyncDisposable> {
  const holder = new pg.Client({ connectionString: url });
  holder.on('error', () => {});
  await holder.connect();
  await holder.query('SELECT pg_advisory_lock($1::int4, $2::int4)', [keys.key1, keys.key2]);
  return Object.assign(holder, { [Symbol.asyncDispose]: () => holder.end().catch(() => {}) });
}

/** `pgleaderlock break --yes --min-age 0s` of `keys` through `url`. */
const breakThrough = (url: string, keys: { key1: number; key2: number }) =>
  cli([
    'break',
    '--dsn',
    url,
    '--key1',
    String(keys.key1),
    '--key2',
    String(keys.key2),
    '--min-age',
    '0s',
    '--yes',
  ]);

const quiet = () => {};
const recordTerms = useTermRecorder();

describe('pgpool-II (streaming replication, load balancing on)', () => {
  it('allow_sql_comments = on: the first election after pgpool starts takes no wait slice (5 fresh pgpools, 3 candidates each, slice 30 s): within 5 s each, and no candidate is refused as behind a sharing pooler', async () => {
    const firsts: number[] = [];
    const errors: Error[] = [];
    for (let trial = 0; trial < 5; trial++) {
      await using pool = await pgpool({ allow_sql_comments: true, failover_on_backend_shutdown: false });
      const name = `pgpool-stall-${trial}-${Date.now()}`;
      const locks = [0, 1, 2].map(
        (i) =>
          new LeaderLock({
            name,
            connectionString: pool.url,
            acquireMode: 'wait',
            waitSliceMs: 30_000,
            id: `c${i}`,
          }),
      );
      for (const l of locks)
        l.onError((err) => {
          errors.push(err);
        });
      try {
        const t0 = performance.now();
        await Promise.all(locks.map((l) => l.start()));
        await eventually(() => locks.some((l) => l.isLeader), { timeoutMs: 40_000, what: 'a leader' });
        firsts.push(performance.now() - t0);
      } finally {
        await Promise.all(locks.map((l) => l.shutdown({ timeoutMs: 5000 }).catch(() => {})));
      }
    }
    console.log(
      `[pgpool] first election after pgpool starts: ${firsts.map((t) => t.toFixed(0)).join(', ')} ms`,
    );
    // bound: compat/pgpool-first-election
    for (const t of firsts) expect(t).toBeLessThan(5000);
    // pgpool announces another backend's pid at connect, so the pooler guard runs: each of its
    // statements must reach the primary, never a standby chosen for load balancing
    expect(errors.filter((e) => e instanceof LockError && e.code === 'ERR_PGLEADERLOCK_UNSAFE')).toEqual([]);
  }, 240_000);

  it('three candidates in each mode, leaders stepping down in turn: never two holders on the primary, no two terms overlapping (the handovers included), a leader after each step-down, no refusal as a sharing pooler; the lock logs the pgpool front once', async () => {
    await using pool = await pgpool({ failover_on_backend_shutdown: true });
    for (const acquireMode of ['wait', 'poll'] as const) {
      const keys = randomKeys();
      const logged: Record<string, unknown>[] = [];
      const locks = [0, 1, 2].map(
        (i) =>
          new LeaderLock({
            ...keys,
            connectionString: pool.url,
            acquireMode,
            takeoverDelayMs: 0,
            id: `${acquireMode}-${i}`,
            logger: {
              debug: quiet,
              info: quiet,
              error: quiet,
              warn: (fields: Record<string, unknown>) => {
                if (fields.event === 'pgpool') logged.push(fields);
              },
            },
          }),
      );
      const errors: Error[] = [];
      for (const l of locks)
        l.onError((err) => {
          errors.push(err);
        });
      const terms = recordTerms(); // every term, the step-downs' handovers included
      let maxHolders = 0;
      try {
        await Promise.all(locks.map((l) => l.start()));
        for (let round = 0; round < 4; round++) {
          await eventually(() => locks.some((l) => l.isLeader), { timeoutMs: 10_000, what: 'a leader' });
          const until = performance.now() + 300;
          while (performance.now() < until) {
            maxHolders = Math.max(maxHolders, (await holdersOnPrimary(keys)).length);
          }
          await locks.find((l) => l.isLeader)?.stepDown();
        }
      } finally {
        await Promise.all(locks.map((l) => l.shutdown({ timeoutMs: 5000 }).catch(() => {})));
      }
      expect(terms.overlaps()).toEqual([]);
      expect(terms.spans.length).toBeGreaterThanOrEqual(4); // a term after each step-down
      expect(maxHolders).toBe(1);
      expect(errors.filter((e) => e instanceof LockError && e.code === 'ERR_PGLEADERLOCK_UNSAFE')).toEqual(
        [],
      );
      // one warning per lock, naming the setting and its fix
      expect(logged.length).toBe(3);
      expect(String((logged[0]?.risks as string[] | undefined)?.[0])).toContain(
        'failover_on_backend_shutdown = on',
      );
      expect(String((logged[0]?.fixes as string[] | undefined)?.[0])).toContain(
        'failover_on_backend_shutdown = off',
      );
    }
    expect(await poolWorks(pool.url)).toBe(true);
  }, 120_000);

  it('doctor: failover_on_backend_shutdown = on fails naming the setting and the fix (exit 1); with it and failover_on_backend_error off, exit 0', async () => {
    {
      await using pool = await pgpool({ failover_on_backend_shutdown: true });
      const r = await cli(['doctor', '--dsn', pool.url, '--json', '--timeout', '5s'], undefined, 60_000);
      const report = JSON.parse(r.stdout) as {
        checks: { id: string; verdict: string; reason: string; fix?: string }[];
      };
      const check = (id: string) => report.checks.find((c) => c.id === id);
      expect(r.code).toBe(1);
      expect(check('pgpool')?.reason).toContain('pgpool-II 4.');
      expect(check('pooler')?.reason).toContain('pgpool-II');
      expect(check('pgpool.failover_on_backend_shutdown')?.verdict).toBe('fail');
      expect(check('pgpool.failover_on_backend_shutdown')?.fix).toContain(
        'failover_on_backend_shutdown = off',
      );
      expect(check('pgpool.failover_on_backend_error')?.verdict).toBe('warn');
      expect(check('exclusion')?.verdict).toBe('ok');
    }
    {
      await using pool = await pgpool({
        failover_on_backend_shutdown: false,
        failover_on_backend_error: false,
      });
      const r = await cli(['doctor', '--dsn', pool.url, '--timeout', '5s'], undefined, 60_000);
      expect(r.stdout).toMatch(/ok +pgpool\.failover_on_backend_shutdown/);
      expect(r.stdout).toMatch(/ok +pgpool\.failover_on_backend_error/);
      expect(r.code).toBe(0);
    }
  }, 120_000);

  it('break through pgpool with failover_on_backend_shutdown = on refuses (exit 1, naming the setting), and the holder and the pool are untouched', async () => {
    await using pool = await pgpool({ failover_on_backend_shutdown: true });
    const keys = randomKeys();
    await using _holder = await holding(pool.url, keys);
    const [pid] = await holdersOnPrimary(keys);
    const r = await breakThrough(pool.url, keys);
    expect(r.code).toBe(1);
    expect(r.stdout + r.stderr).toContain('failover_on_backend_shutdown = on');
    expect(r.stdout + r.stderr).toContain('refusing');
    expect(await holdersOnPrimary(keys)).toEqual([pid]);
    expect(await poolWorks(pool.url)).toBe(true);
    expect((await pool.nodes()).map((n) => n.status)).not.toContain('down');
  }, 60_000);

  it('break through pgpool with failover_on_backend_shutdown = off terminates the holder; an unrelated client of the pool still works and both nodes stay up', async () => {
    await using pool = await pgpool({ failover_on_backend_shutdown: false });
    const keys = randomKeys();
    await using _holder = await holding(pool.url, keys);
    const r = await breakThrough(pool.url, keys);
    expect(r.stdout + r.stderr).toContain('terminated');
    expect(r.code).toBe(0);
    expect(await holdersOnPrimary(keys)).toEqual([]);
    expect(await poolWorks(pool.url)).toBe(true);
    expect((await pool.nodes()).map((n) => n.status)).not.toContain('down');
  }, 60_000);

  it('why break refuses: with failover_on_backend_shutdown = on, a pg_terminate_backend of a pgpool client’s backend, even from a direct connection to the primary, takes the pool down for an unrelated client', async () => {
    await using pool = await pgpool({ failover_on_backend_shutdown: true });
    const keys = randomKeys();
    await using holder = await holding(pool.url, keys);
    const [pid] = await holdersOnPrimary(keys);
    expect(await poolWorks(pool.url)).toBe(true);
    await cluster.primary.query('SELECT pg_terminate_backend($1::int)', [pid]);
    await holder.query('SELECT 1').catch(() => {}); // pgpool's child reads the termination
    await eventually(async () => !(await poolWorks(pool.url)), {
      timeoutMs: 10_000,
      what: 'the pool to fail an unrelated client',
    });
  }, 60_000);
});
