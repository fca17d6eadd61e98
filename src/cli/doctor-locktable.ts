/**
 * `doctor --partitions P [--workers N]`: whether P partitions over N workers fit in the
 * server's shared lock table (docs/partitions.md, "Sizing").
 *
 * PostgreSQL sizes its shared lock table (src/backend/storage/lmgr/lock.c, `NLOCKENTS`)
 * at `max_locks_per_transaction × (MaxBackends + max_prepared_transactions)` entries, where
 * MaxBackends counts every process that may take locks: `max_connections`, the autovacuum
 * workers and their launcher, `max_worker_processes` and `max_wal_senders`. The table is a
 * shared hash that may grow into shared memory left spare, so a server often holds more
 * before SQLSTATE 53200, but nothing guarantees it: the estimate is the figure to plan with.
 * Every advisory lock held takes one entry, whoever holds it: a group needs P (its
 * partitions) plus 2 per worker (its member lock, and the lock its ring watch waits for).
 */
import type pg from 'pg';
import type { Check } from './doctor-check.js';

export interface LockTableSize {
  /** `max_locks_per_transaction × (MaxBackends + max_prepared_transactions)`. */
  readonly entries: number;
  /** How the figure was made, for the report. */
  readonly formula: string;
}

const SETTINGS = [
  'max_locks_per_transaction',
  'max_connections',
  'autovacuum_max_workers',
  'autovacuum_worker_slots',
  'max_worker_processes',
  'max_wal_senders',
  'max_prepared_transactions',
] as const;

/** The shared lock table's planned size, from the server's settings. */
export async function lockTableSize(client: pg.Client): Promise<LockTableSize> {
  const { rows } = await client.query<{ name: string; setting: string }>(
    'SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])',
    [[...SETTINGS]],
  );
  const v = (name: (typeof SETTINGS)[number]): number =>
    Number(rows.find((r) => r.name === name)?.setting ?? 0);
  // PostgreSQL 18 reserves autovacuum_worker_slots; before, autovacuum_max_workers
  const autovacuum = v('autovacuum_worker_slots') || v('autovacuum_max_workers');
  const backends = v('max_connections') + autovacuum + 1 + v('max_worker_processes') + v('max_wal_senders');
  const perTx = v('max_locks_per_transaction');
  const prepared = v('max_prepared_transactions');
  return {
    entries: perTx * (backends + prepared),
    formula: `max_locks_per_transaction ${perTx} × (${backends} processes that may lock + max_prepared_transactions ${prepared})`,
  };
}

/** Verdict for P partitions over N workers: ok up to half the table, warn up to all of it, else fail. */
export function lockTableCheck(size: LockTableSize, partitions: number, workers: number): Check {
  const needed = partitions + 2 * workers;
  const share = needed / size.entries;
  const text = `${partitions} partitions over ${workers} worker(s) hold ${needed} advisory locks; the server's shared lock table holds about ${size.entries} (${size.formula}), shared with every other lock on the server`;
  const fix =
    'raise max_locks_per_transaction (a server restart) so that the table holds at least twice the group, or use fewer partitions';
  if (share > 1) {
    return {
      id: 'locktable',
      verdict: 'fail',
      reason: `${text}: more than PostgreSQL sizes the table for. Past that, locks take shared memory left spare, which nothing guarantees: expect SQLSTATE 53200 (the workers then back off and retry), for other clients too`,
      fix,
    };
  }
  if (share > 0.5) {
    return {
      id: 'locktable',
      verdict: 'warn',
      reason: `${text}: more than half of it, little is left for the rest of the workload`,
      fix,
    };
  }
  return { id: 'locktable', verdict: 'ok', reason: `${text}: ${Math.round(share * 100)} % of it` };
}
