/** Fencing epochs per partition (PartitionedLeadership `fencing: true`) against PostgreSQL. */
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { deferred } from '../../src/core/clock.js';
import {
  FencedError,
  type PartitionedLeadership,
  type PartitionedLeadershipOptions,
  type PartitionTerm,
} from '../../src/index.js';
import { assign } from '../../src/partitions/assign.js';
import { keysOf } from '../../src/partitions/sql.js';
import { adminQuery, databaseUrl, eventually } from '../harness/db.js';
import { partitionWorker } from '../harness/workers.js';

const TABLE = 'pgleaderlock_epochs';
const uniq = () => `pfence-${Date.now()}-${Math.random().toString(36).slice(2, 7)}`;

/** The harness's worker, with fencing on and no takeover delay. */
const worker = (name: string, partitions: number, extra: Partial<PartitionedLeadershipOptions> = {}) =>
  partitionWorker({ name, partitions, takeoverDelayMs: 0, fencing: true, ...extra });

async function writer(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: databaseUrl(), application_name: 'pgleaderlock-test-writer' });
  c.on('error', () => {});
  await c.connect();
  await c.query('CREATE TABLE IF NOT EXISTS partition_writes (name text, p int4, epoch int8)');
  onTestFinished(() => c.end());
  return c;
}

/** The epoch row of each partition of `name`, from the table. */
async function epochRows(name: string): Promise<Map<number, bigint>> {
  const rows = await adminQuery<{ p: number; epoch: string }>(
    databaseUrl(),
    `SELECT key2 AS p, epoch::text AS epoch FROM ${TABLE} WHERE key1 = $1`,
    [keysOf(name).partitions],
  );
  return new Map(rows.map((r) => [r.p, BigInt(r.epoch)]));
}

/** Each worker's latest term per partition, from onAssigned. */
function termsOf(w: PartitionedLeadership): Map<number, PartitionTerm> {
  const terms = new Map<number, PartitionTerm>();
  w.onAssigned((p, term) => terms.set(p, term));
  return terms;
}

describe('PartitionedLeadership fencing', () => {
  it('each take of a partition bumps its epoch; a write from an earlier term is refused by the epoch, the current one commits', {
    tags: ['pg-major'],
  }, async () => {
    const name = uniq();
    const client = await writer();
    const a = worker(name, 8, { id: 'fa' });
    const aTerms = termsOf(a);
    await a.start();
    expect(await a.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    await eventually(() => aTerms.size === 8, { what: 'the onAssigned callbacks' });
    const first = new Map([...aTerms].map(([p, t]) => [p, t.epoch]));
    expect(first.size).toBe(8);
    expect(await epochRows(name)).toEqual(first); // the terms carry the table's epochs
    const moved = assign(['fa', 'fb'], 8).get('fb') ?? [];
    const p = moved[0] as number;
    const early = aTerms.get(p) as PartitionTerm;

    // b joins and takes its share: one bump each; b leaves and a takes them back: one more
    const b = worker(name, 8, { id: 'fb' });
    const bTerms = termsOf(b);
    await b.start();
    await eventually(
      async () => (await b.waitForBalance({ timeoutMs: 50 })) && b.owned.size === moved.length,
      {
        what: 'b to own its share',
      },
    );
    for (const q of moved) expect(bTerms.get(q)?.epoch).toBe((first.get(q) as bigint) + 1n);
    await b.shutdown();
    await eventually(() => a.owned.size === 8, { what: 'a to own everything again' });
    for (const q of moved) expect(aTerms.get(q)?.epoch).toBe((first.get(q) as bigint) + 2n);
    const unmoved = [...Array(8).keys()].filter((q) => !moved.includes(q));
    for (const q of unmoved) expect(aTerms.get(q)?.epoch).toBe(first.get(q)); // never moved: same term

    // a owns p again, under a newer term: the early term's write is refused by its epoch
    const stale = a.fenced(client, early, (c) =>
      c.query('INSERT INTO partition_writes VALUES ($1, $2, $3)', [name, p, early.epoch]),
    );
    await expect(stale).rejects.toBeInstanceOf(FencedError);
    await expect(stale).rejects.toMatchObject({
      code: 'ERR_PGLEADERLOCK_FENCED',
      message: expect.stringContaining(`the current epoch is ${(first.get(p) as bigint) + 2n}`),
    });
    const current = aTerms.get(p) as PartitionTerm;
    await a.fenced(client, current, (c) =>
      c.query('INSERT INTO partition_writes VALUES ($1, $2, $3)', [name, p, current.epoch]),
    );
    const written = await client.query<{ epoch: string }>(
      'SELECT epoch::text AS epoch FROM partition_writes WHERE name = $1',
      [name],
    );
    expect(written.rows.map((r) => r.epoch)).toEqual([String(current.epoch)]);

    // bad arguments are rejected, naming them: another worker's term, no term, no function
    const bTerm = bTerms.get(p) as PartitionTerm;
    await expect(a.fenced(client, bTerm, async () => 1)).rejects.toThrow(
      /fenced needs a term this worker issued \(from runForEach or onAssigned\), received/,
    );
    await expect(a.fenced(client, undefined as never, async () => 1)).rejects.toBeInstanceOf(TypeError);
    await expect(a.fenced(client, current, 'x' as never)).rejects.toThrow(
      /fenced needs a function, received "x"/,
    );
    await expect(a.fenced({} as never, current, async () => 1)).rejects.toThrow(/fenced needs a pg client/);

    // a partition no longer owned is refused before any query
    await a.shutdown();
    await expect(a.fenced(client, current, async () => 'never')).rejects.toMatchObject({
      code: 'ERR_PGLEADERLOCK_FENCED',
      message: expect.stringContaining(`partition ${p} is not owned`),
    });
  });

  it('a fenced write left open past the next owner’s queryTimeoutMs delays only its own partition: the next owner keeps its session and its other partitions, and opens that one once the write committed', async () => {
    const name = uniq();
    const client = await writer();
    const moved = assign(['ga', 'gb'], 4).get('gb') as number[];
    const p = moved[0] as number;
    const gate = deferred<void>();
    onTestFinished(() => gate.resolve()); // never leave the transaction open
    const inWrite = deferred<void>();
    const committed = deferred<number>();
    // a's work on p: a fenced write that stays open until the gate, even after p is revoked
    // (drainTimeoutMs 100: a releases p while the write is still open)
    const a = worker(name, 4, { id: 'ga', drainTimeoutMs: 100 });
    a.runForEach(async (q, term) => {
      if (q !== p) return;
      await a.fenced(client, term, async (c) => {
        await c.query('INSERT INTO partition_writes VALUES ($1, $2, $3)', [name, q, term.epoch]);
        inWrite.resolve();
        await gate.promise;
      });
      committed.resolve(performance.now());
    });
    await a.start();
    await inWrite.promise;
    const before = (await epochRows(name)).get(p) as bigint;

    // b: queryTimeoutMs 1000 (the worker default here); the write stays open 2 s
    const b = worker(name, 4, { id: 'gb' });
    const errors: Error[] = [];
    b.onError((err) => errors.push(err));
    const opened = deferred<{ at: number; epoch: bigint | null }>();
    b.onAssigned((q, term) => {
      if (q === p) opened.resolve({ at: performance.now(), epoch: term.epoch });
    });
    await b.start();
    const others = moved.filter((q) => q !== p);
    await eventually(() => others.every((q) => b.owned.has(q)), { what: 'b to own its other partitions' });
    const [bPid] = (
      await adminQuery<{ pid: number }>(
        databaseUrl(),
        'SELECT pid FROM pg_stat_activity WHERE application_name = $1',
        ['pgleaderlock:gb#p4'],
      )
    ).map((r) => r.pid);
    await new Promise((r) => setTimeout(r, 2000));
    // b holds p's lock (its session) but has not opened it: the epoch is still a's
    const holder = await adminQuery<{ pid: number }>(
      databaseUrl(),
      `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND classid = $1::int4::oid AND objid = $2::int4::oid`,
      [keysOf(name).partitions, p],
    );
    expect(holder.map((r) => r.pid)).toEqual([bPid]);
    expect(b.owned.has(p)).toBe(false);
    expect(others.every((q) => b.owned.has(q))).toBe(true);
    expect(b.stats().losses).toBe(0);
    expect(errors).toEqual([]);
    expect((await epochRows(name)).get(p)).toBe(before);

    gate.resolve();
    const commitAt = await committed.promise;
    const next = await opened.promise;
    expect(next.epoch).toBe(before + 1n);
    expect(next.at).toBeGreaterThanOrEqual(commitAt - 50); // opened once a's write was in (same process, two sockets)
    const written = await client.query<{ epoch: string }>(
      'SELECT epoch::text AS epoch FROM partition_writes WHERE name = $1',
      [name],
    );
    expect(written.rows.map((r) => BigInt(r.epoch))).toEqual([before]);
  });

  it('without fencing a term has no epoch and fenced() refuses; a bad fencing option is refused by name', async () => {
    const name = uniq();
    const w = worker(name, 2, { fencing: false });
    const terms = termsOf(w);
    await w.start();
    expect(await w.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    await eventually(() => terms.size === 2, { what: 'the onAssigned callbacks' });
    expect([...terms.values()].map((t) => t.epoch)).toEqual([null, null]);
    const client = await writer();
    await expect(w.fenced(client, terms.get(0) as PartitionTerm, async () => 1)).rejects.toMatchObject({
      code: 'ERR_PGLEADERLOCK_FENCED',
      message: expect.stringContaining('fencing is not enabled'),
    });
    expect(() => worker(name, 2, { fencing: { table: 'bad name;' } })).toThrow(
      /fencing\.table must be a table name.*received "bad name;"/,
    );
    expect(() => worker(name, 2, { fencing: { tabel: 'x' } as never })).toThrow(
      /fencing takes \{ table \}, received an unknown key "tabel"/,
    );
    expect(() => worker(name, 2, { fencing: [] as never })).toThrow(
      /fencing must be a boolean or \{ table \}, received/,
    );
    expect(() => worker(name, 2, { fencing: 'yes' as never })).toThrow(
      /fencing must be a boolean or \{ table \}, received "yes"/,
    );
  });
});
