/** Errors of partitioned leadership. */
import { endsTheRun, PgLeaderLockError } from '../core/errors.js';

/** Workers of one name were started with different partition counts. */
export class PartitionMismatchError extends PgLeaderLockError {
  override name = 'PartitionMismatchError';
  constructor(name: string, otherId: string, theirs: number, ours: number) {
    super(
      `partition count mismatch for ${JSON.stringify(name)}: worker ${otherId} runs with partitions ${theirs}, this one with ${ours}; every worker of a name must use the same count (stop them all to change it)`,
      { code: 'ERR_PGLEADERLOCK_PARTITION_MISMATCH' },
    );
  }
}

/** SQLSTATE 53200 taking partition locks: what to raise, and why. */
export function lockTableFull(
  partitions: number,
  workers: number,
  backoffMs: number,
  cause: unknown,
): PgLeaderLockError {
  return new PgLeaderLockError(
    `PostgreSQL's lock table is full (SQLSTATE 53200) taking partition locks: ${partitions} partitions over ${workers} worker(s) need ${partitions} advisory locks plus two per worker, in a table the whole server shares (about max_locks_per_transaction × (max_connections + background processes + max_prepared_transactions) slots); raise max_locks_per_transaction, or check with pgleaderlock doctor --partitions ${partitions} (docs/partitions.md, "Sizing"). Next attempt in ${Math.round(backoffMs / 1000)} s, so as not to keep the table full for other clients`,
    { code: 'ERR_PGLEADERLOCK_LOCK_TABLE_FULL', cause },
  );
}

/**
 * Errors that end a join instead of being retried: another partition count, or a definite
 * refusal (a pooler that shares backends, a hot standby; `endsTheRun`, the rule `LeaderLock`
 * follows too: nothing has served while joining): `start()` rejects with them.
 */
export function refusesToJoin(err: unknown): boolean {
  return err instanceof PartitionMismatchError || endsTheRun(err, false);
}
