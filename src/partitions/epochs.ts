import type pg from 'pg';
import { epochFloor, FencedError, fencedWrite } from '../core/fencing.js';
import { show } from '../core/validate.js';
import type { PartitionTerm } from './term.js';
import type { Terms } from './terms.js';

/**
 * Fencing epochs per partition (`fencing: true`): the table of LeaderLock's fencing
 * (fencing.ts), one row per partition, keyed (the name's partition key namespace,
 * partition). The member session bumps the rows of the partitions it has just taken,
 * while holding their locks and before their terms open, in one statement; a fenced write
 * of an older term of that partition is then refused, and one in flight delays the bump
 * until it commits (its row is share-locked).
 */

/**
 * $1 the partition namespace, $2 the partitions, $3 the worker's id, $4 the server's
 * timeline (epochs of a promoted standby exceed the old primary's: `epochFloor`, as in
 * `bumpSql`). Partitions with no row yet get one at the floor; rows that exist are
 * incremented unless a fenced write holds them (`SKIP LOCKED`): those are not returned,
 * and their terms wait (the write may be a previous owner's, still in flight), so that one
 * open write never stalls the rest. Rows are locked in partition order.
 */
export function bumpPartitionsSql(table: string): string {
  const floor = epochFloor('$4');
  return `/* pgleaderlock:bump-partitions */ WITH ins AS (
      INSERT INTO ${table} AS t (key1, key2, epoch, leader_id, released)
      SELECT $1::int4, p, ${floor}, $3, false FROM unnest($2::int4[]) p ORDER BY p
      ON CONFLICT (key1, key2) DO NOTHING
      RETURNING key2, epoch),
    free AS (
      SELECT key2 FROM ${table} WHERE key1 = $1::int4 AND key2 = ANY($2::int4[])
      ORDER BY key2 FOR UPDATE SKIP LOCKED),
    upd AS (
      UPDATE ${table} AS t SET epoch = GREATEST(t.epoch + 1, ${floor}), leader_id = $3,
        updated_at = now(), released = false
      FROM free WHERE t.key1 = $1::int4 AND t.key2 = free.key2
      RETURNING t.key2, t.epoch)
    SELECT key2 AS partition, epoch::text AS epoch FROM ins
    UNION ALL SELECT key2, epoch::text FROM upd`;
}

/** The rows a bump returned, as partition → epoch. */
export function epochsOf(rows: readonly { partition: number; epoch: string }[]): Map<number, bigint> {
  return new Map(rows.map((r) => [r.partition, BigInt(r.epoch)]));
}

/**
 * `workers.fenced(client, term, fn)`: the checks (fencing on, a client, a term this worker
 * issued, a function, the partition owned now), then the fenced write (core/fencing.ts) on
 * the partition's epoch row.
 */
export async function fencedPartitionWrite<T>(
  w: { table: string | null; key: number; terms: Terms; owned: ReadonlySet<number> },
  client: pg.ClientBase,
  term: PartitionTerm,
  fn: (client: pg.ClientBase) => Promise<T>,
): Promise<T> {
  if (w.table === null) throw new FencedError('fencing is not enabled: pass fencing: true');
  if (typeof (client as { query?: unknown } | null)?.query !== 'function') {
    throw new TypeError(`fenced needs a pg client as its first argument, received ${show(client)}`);
  }
  if (!w.terms.issued(term)) {
    throw new TypeError(
      `fenced needs a term this worker issued (from runForEach or onAssigned), received ${show(term)}`,
    );
  }
  if (typeof fn !== 'function') throw new TypeError(`fenced needs a function, received ${show(fn)}`);
  if (!w.owned.has(term.partition)) {
    throw new FencedError(`fenced write refused: partition ${term.partition} is not owned by this worker`);
  }
  return fencedWrite(client, w.table, { key1: w.key, key2: term.partition }, term, fn);
}
