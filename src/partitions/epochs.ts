import { epochFloor } from '../core/fencing.js';

/**
 * Fencing epochs per partition (`fencing: true`): the table of LeaderLock's fencing
 * (fencing.ts), one row per partition, keyed (the name's partition key namespace,
 * partition). The ownership session bumps the rows of the partitions it has just taken,
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
