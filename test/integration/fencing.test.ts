/** Fencing tokens against PostgreSQL. */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { deferred } from '../../src/core/clock.js';
import { FencedError, LeaderLock, LockState } from '../../src/index.js';
import {
  adminClient,
  adminQuery,
  databaseUrl,
  eventually,
  holderPid,
  lockHolders,
  randomKeys,
  terminate,
} from '../harness/db.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();
const TABLE = 'pgleaderlock_epochs';

/** A fencing leader that stays down once it loses. */
async function fencedLeader(keys: { key1: number; key2: number }): Promise<LeaderLock> {
  const lock = locks.make({ ...keys, fencing: true, autoReacquire: false });
  await lock.start();
  await lock.waitForLeadership();
  return lock;
}

async function writer(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: databaseUrl(), application_name: 'pgleaderlock-test-writer' });
  c.on('error', () => {});
  await c.connect();
  await c.query(
    'CREATE TABLE IF NOT EXISTS fenced_writes (k int4, epoch int8, at timestamptz DEFAULT clock_timestamp())',
  );
  return c;
}

describe('fencing', () => {
  it('epochs strictly increase across 100 failovers', async () => {
    const keys = randomKeys();
    const epochs: bigint[] = [];
    const [a, b] = [0, 1].map(() => {
      // one slice for the test: a slice ending just before a stepDown would leave the queue empty for a round trip
      const l = locks.make({ ...keys, acquireMode: 'wait', fencing: true, waitSliceMs: 60_000 });
      l.onAcquired((term) => {
        if (term.epoch !== null) epochs.push(term.epoch);
      });
      return l;
    }) as [LeaderLock, LeaderLock];
    await a.start();
    await a.waitForLeadership();
    await b.start();
    // one admin session, read every 2 ms: what the rounds wait for is the handover, not the
    // polling (a new connection per read and 20 ms between reads were most of the 11 s)
    await using admin = await adminClient(databaseUrl());
    const queued = async (): Promise<boolean> =>
      (await lockHolders(admin, keys.key1, keys.key2)).length === 2;
    for (let i = 0; i < 100; i++) {
      await eventually(queued, { what: 'both queued', intervalMs: 2 });
      const leader = a.isLeader ? a : b;
      const other = leader === a ? b : a;
      await leader.stepDown();
      await eventually(() => other.isLeader, { what: `failover ${i + 1}`, intervalMs: 2 });
    }
    await eventually(() => epochs.length === 101);
    for (let i = 1; i < epochs.length; i++) expect(epochs[i]).toBe((epochs[i - 1] as bigint) + 1n);
    const [row] = await adminQuery<{ epoch: string }>(
      databaseUrl(),
      `SELECT epoch::text AS epoch FROM ${TABLE} WHERE key1 = $1 AND key2 = $2`,
      [keys.key1, keys.key2],
    );
    expect(BigInt(row?.epoch ?? '0')).toBe(epochs.at(-1));
  });

  it('a fenced write from a superseded term is refused; a current one commits', {
    tags: ['pg-major'],
  }, async () => {
    const keys = randomKeys();
    const client = await writer();
    try {
      const a = await fencedLeader(keys);
      expect(a.term?.epoch).toBeGreaterThan(0n);
      await a.fenced(client, (c) =>
        c.query('INSERT INTO fenced_writes (k, epoch) VALUES ($1, $2)', [keys.key1, a.term?.epoch]),
      );

      // a write that passed its own term check, but reaches the epoch row only after a newer leader bumped it
      const gate = deferred<void>();
      const slow = Object.create(client) as pg.Client;
      slow.query = ((text: string, values?: unknown[]) =>
        String(text).includes('FOR SHARE')
          ? gate.promise.then(() => client.query(text, values))
          : client.query(text, values)) as pg.Client['query'];
      const stale = a.fenced(slow, (c) =>
        c.query('INSERT INTO fenced_writes (k, epoch) VALUES ($1, -1)', [keys.key1]),
      );
      const b = locks.make({ ...keys, fencing: true });
      await b.start();
      await terminate(databaseUrl(), await holderPid(databaseUrl(), keys.key1, keys.key2));
      await b.waitForLeadership();
      expect(b.term?.epoch).toBe(2n);
      gate.resolve();
      await expect(stale).rejects.toBeInstanceOf(FencedError);
      await expect(stale).rejects.toThrow(/term \d+ has epoch \d+, the current epoch is \d+/);
      const { rows } = await client.query('SELECT epoch FROM fenced_writes WHERE k = $1 ORDER BY at', [
        keys.key1,
      ]);
      // only the write of the current term (epoch 1) is there; the stale one (-1) was rolled back
      expect(rows.map((r) => String(r.epoch))).toEqual(['1']);
      // and a process that is not leader cannot write at all
      await expect(a.fenced(client, async () => 1)).rejects.toThrow(/not the leader/);
    } finally {
      await client.end();
    }
  });

  it("a newer leader's increment waits until an in-flight fenced write has committed", async () => {
    const keys = randomKeys();
    const client = await writer();
    try {
      const a = await fencedLeader(keys);
      const inside = deferred<void>();
      const finish = deferred<void>();
      const write = a.fenced(client, async (c) => {
        inside.resolve();
        await finish.promise; // holding the epoch row FOR SHARE
        await c.query('INSERT INTO fenced_writes (k, epoch) VALUES ($1, 1)', [keys.key1]);
      });
      await inside.promise;
      const b = locks.make({ ...keys, fencing: true, queryTimeoutMs: 5000 });
      await b.start();
      await terminate(databaseUrl(), await holderPid(databaseUrl(), keys.key1, keys.key2));
      await eventually(() => a.state === LockState.STOPPED);
      // b holds the advisory lock but its epoch increment is blocked behind the fenced write
      await eventually(
        async () =>
          (
            await adminQuery(
              databaseUrl(),
              "SELECT 1 FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%pgleaderlock:bump%'",
              [`pgleaderlock:${b.id}`],
            )
          ).length === 1,
        { what: "b's epoch increment to wait for the fenced write's row lock" },
      );
      expect(b.isLeader).toBe(false);
      finish.resolve();
      await write; // the write of the old term commits: it was current when it took the row
      expect(await b.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      expect(b.term?.epoch).toBe(2n);
    } finally {
      await client.end();
    }
  });

  it('rejects a bad table name, and fenced() without fencing', async () => {
    expect(() => new LeaderLock({ key1: 1, key2: 2, fencing: { table: 'x; DROP TABLE y' } })).toThrow(
      /fencing.table must be a table name/,
    );
    const lock = new LeaderLock({ key1: 1, key2: 2, connectionString: databaseUrl() });
    await expect(lock.fenced({} as pg.Client, async () => 1)).rejects.toThrow(/fencing is not enabled/);
  });

  it('a role without CREATE on the schema leads with fencing once the table exists (PostgreSQL 15+ takes that right from ordinary roles on public)', {
    tags: ['pg-major'],
  }, async () => {
    const keys = randomKeys();
    const schema = `nocreate_${locks.tag}`.toLowerCase();
    const table = `${schema}.epochs`;
    const role = schema;
    await adminQuery(databaseUrl(), `CREATE SCHEMA ${schema}`);
    const first = locks.make({ ...keys, fencing: { table } }); // the admin creates the table
    await first.start();
    expect(await first.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
    await first.shutdown();
    await adminQuery(databaseUrl(), `CREATE ROLE ${role} LOGIN PASSWORD 'pw'`);
    try {
      // USAGE, not CREATE, on the table's schema (as ordinary roles have on public since PostgreSQL 15)
      await adminQuery(databaseUrl(), `GRANT USAGE ON SCHEMA ${schema} TO ${role}`);
      await adminQuery(databaseUrl(), `GRANT SELECT, INSERT, UPDATE ON ${table} TO ${role}`);
      const url = new URL(databaseUrl());
      url.username = role;
      url.password = 'pw';
      const denied = new pg.Client({ connectionString: url.toString() });
      await denied.connect();
      await expect(denied.query(`CREATE TABLE IF NOT EXISTS ${table} (x int)`)).rejects.toMatchObject({
        code: '42501',
      });
      await denied.end();
      const lock = locks.make({ ...keys, fencing: { table }, connectionString: url.toString() });
      await lock.start();
      expect(await lock.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      expect(lock.term?.epoch).toBe(2n);
      await lock.shutdown();
    } finally {
      await adminQuery(
        databaseUrl(),
        `DROP SCHEMA ${schema} CASCADE; DROP OWNED BY ${role}; DROP ROLE ${role}`,
      ).catch(() => {});
    }
  });

  it.each(['wait', 'poll'] as const)(
    '%s mode: an epoch table of an older version (no `released` column) that a transaction reads: the lock does not lead while the column cannot be added, its wait to add it ends within queryTimeoutMs + 250 ms, and once the reader ends the lock leads with the column added',
    async (mode) => {
      const keys = randomKeys();
      const table = `pgll_old_epochs_${(keys.key2 >>> 0).toString(16)}`;
      await adminQuery(
        databaseUrl(),
        `CREATE TABLE ${table} (key1 int4 NOT NULL, key2 int4 NOT NULL, epoch int8 NOT NULL,
          leader_id text, updated_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (key1, key2))`,
      );
      await using reader = await adminClient(databaseUrl());
      await reader.query('BEGIN');
      await reader.query(`SELECT count(*) FROM ${table}`); // ACCESS SHARE until the reader ends
      const queryTimeoutMs = 500;
      const lock = locks.make({ ...keys, acquireMode: mode, fencing: { table }, queryTimeoutMs });
      lock.onError(() => {});
      let led = 0;
      lock.onAcquired(() => {
        led += 1;
      });
      await lock.start();
      await using watcher = await adminClient(databaseUrl());
      // the lock's backend waits to add the column: from when to when (the server's clock)
      const waits = (): Promise<{ now: string; started: string | null }[]> =>
        watcher.query(
          `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8::text AS now,
             (SELECT (extract(epoch FROM query_start) * 1000)::float8::text FROM pg_stat_activity
               WHERE query LIKE '%pgleaderlock:fencing-table%' AND query LIKE $1 AND wait_event_type = 'Lock'
               LIMIT 1) AS started`,
          [`%${table}%`],
        );
      let started: number | null = null;
      await eventually(
        async () => {
          const [row] = await waits();
          started = row?.started ? Number(row.started) : null;
          return started !== null;
        },
        { what: 'the lock to wait to add the column' },
      );
      let ended = 0;
      await eventually(
        async () => {
          const [row] = await waits();
          ended = Number(row?.now);
          return !row?.started || Number(row.started) !== started; // over (a later attempt may wait again)
        },
        { what: 'the wait to end', intervalMs: 10 },
      );
      const waitedMs = ended - Number(started);
      console.log(
        `[fencing] ${mode}: the wait to add the column ended ${waitedMs.toFixed(0)} ms after it began (queryTimeoutMs ${queryTimeoutMs})`,
      );
      // bound: integration/fencing-column-wait
      expect(waitedMs).toBeLessThan(queryTimeoutMs + 250);
      expect([lock.isLeader, led]).toEqual([false, 0]);
      await reader.query('ROLLBACK');
      expect(await lock.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
      const [col] = await adminQuery<{ n: string }>(
        databaseUrl(),
        `SELECT count(*)::text AS n FROM pg_attribute WHERE attrelid = $1::regclass AND attname = 'released'`,
        [table],
      );
      expect(col?.n).toBe('1');
      await lock.shutdown();
      await adminQuery(databaseUrl(), `DROP TABLE ${table}`);
    },
  );
});
