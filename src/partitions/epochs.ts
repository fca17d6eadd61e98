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
 * timeline (epochs of a promoted standby exceed the old primary's, as in `bumpSql`). Rows
 * are locked in partition order, so two bumps never deadlock.
 */
export function bumpPartitionsSql(table: string): string {
  const floor = 'GREATEST((($4::int8 - 1) << 32) + 1, 1)';
  return `/* pgleaderlock:bump-partitions */ INSERT INTO ${table} AS t (key1, key2, epoch, leader_id, released)
    SELECT $1::int4, p, ${floor}, $3, false FROM unnest($2::int4[]) p ORDER BY p
    ON CONFLICT (key1, key2) DO UPDATE SET epoch = GREATEST(t.epoch + 1, ${floor}),
      leader_id = EXCLUDED.leader_id, updated_at = now(), released = false
    RETURNING key2 AS partition, epoch::text AS epoch`;
}

/** The rows a bump returned, as partition → epoch. */
export function epochsOf(rows: readonly { partition: number; epoch: string }[]): Map<number, bigint> {
  return new Map(rows.map((r) => [r.partition, BigInt(r.epoch)]));
}
