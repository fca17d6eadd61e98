/**
 * Fencing tokens (optional, `fencing: true`). On each acquisition, in the lock session and
 * while holding the lock, the per-key epoch in a small table is incremented; the new term
 * carries it. `fenced()` runs a caller's write in a transaction that first reads the epoch
 * row FOR SHARE: a write from a term whose epoch is no longer current is rejected, and a
 * newer leader's increment (an UPDATE of that row) waits until an in-flight fenced write
 * has committed. Guarantees hold for writes in the same database as the table.
 */
import pg from 'pg';
import type { Connection } from './connection.js';
import { PgLeaderLockError, sqlStateOf } from './errors.js';
import { show } from './validate.js';

export const DEFAULT_FENCING_TABLE = 'pgleaderlock_epochs';

/** A fenced write refused: this process's term is over, or a newer leader has taken over. */
export class FencedError extends PgLeaderLockError {
  override name = 'FencedError';
  constructor(message: string) {
    super(message, { code: 'ERR_PGLEADERLOCK_FENCED' });
  }
}

/** `schema.table` or `table`, each part an identifier; returned quoted. */
export function quoteTable(name: unknown): string {
  if (typeof name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$/.test(name)) {
    throw new TypeError(
      `fencing.table must be a table name like "epochs" or "schema.epochs", received ${show(name)}`,
    );
  }
  return name
    .split('.')
    .map((part) => pg.escapeIdentifier(part))
    .join('.');
}

/** The `fencing` option: the quoted table when on, null when off. */
export function fencingTableOf(fencing: unknown): string | null {
  if (fencing === undefined || fencing === false) return null;
  if (fencing === true) return quoteTable(DEFAULT_FENCING_TABLE);
  if (typeof fencing === 'object' && fencing !== null && !Array.isArray(fencing)) {
    const unknown = Object.keys(fencing).find((k) => k !== 'table');
    if (unknown !== undefined) {
      throw new TypeError(`fencing takes { table }, received an unknown key ${JSON.stringify(unknown)}`);
    }
    return quoteTable((fencing as { table?: unknown }).table ?? DEFAULT_FENCING_TABLE);
  }
  throw new TypeError(`fencing must be a boolean or { table }, received ${show(fencing)}`);
}

/**
 * The epoch table. `released` records whether the holder of the current epoch released
 * cleanly (its work had stopped): the takeover delay reads it (handover.ts). Tables made by
 * earlier versions get the column added.
 */
function createTableSql(table: string): string {
  // created only when missing: CREATE TABLE IF NOT EXISTS asks for CREATE on the schema
  // even when the table exists, a right ordinary roles lack on `public` since PostgreSQL 15
  return `DO $$ BEGIN
    IF to_regclass(${pg.escapeLiteral(table)}) IS NULL THEN
      CREATE TABLE ${table} (
        key1 int4 NOT NULL, key2 int4 NOT NULL, epoch int8 NOT NULL,
        leader_id text, updated_at timestamptz NOT NULL DEFAULT now(),
        released boolean NOT NULL DEFAULT false,
        PRIMARY KEY (key1, key2));
    END IF;
    -- only when missing: ALTER TABLE locks the table, and fenced writes would queue behind it
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = ${pg.escapeLiteral(table)}::regclass
                    AND attname = 'released' AND NOT attisdropped) THEN
      ALTER TABLE ${table} ADD COLUMN released boolean NOT NULL DEFAULT false;
    END IF;
  END $$`;
}

/**
 * Create the epoch table if missing (createTableSql), within `timeoutMs` on the server: on a
 * table of an older version the column added waits for open fenced writes, and new fenced
 * writes would queue behind it. Used by both the lock and the partitions' sessions; `tag`
 * marks the statements as the session marks its others (the lock's carry its priority).
 */
export async function ensureFencingTable(
  conn: Pick<Connection, 'simple'>,
  table: string,
  timeoutMs: number,
  tag: (sql: string) => string = (sql) => sql,
): Promise<void> {
  const ms = `'${Math.ceil(timeoutMs)}ms'`;
  try {
    await conn.simple(
      tag(`/* pgleaderlock:fencing-table */ BEGIN; SET LOCAL lock_timeout = ${ms};
        SET LOCAL statement_timeout = ${ms}; ${createTableSql(table)}; COMMIT`),
    );
  } catch (err) {
    // the failed statement left the transaction open
    await conn.simple(tag('/* pgleaderlock:fencing-table */ ROLLBACK')).catch(() => {});
    // two sessions creating it at once: one wins, the other sees a duplicate
    if (!['42P07', '23505'].includes(sqlStateOf(err) ?? '')) throw err;
  }
}

/**
 * The next epoch for (key1, key2), and whether the previous epoch's holder released it
 * cleanly (`prev_released`; null when there was no row). The CTE reads the row as it was
 * before this statement (same snapshot).
 *
 * Across a failover: the epoch is at least `(timeline - 1) * 2^32 + 1`, $4 being the
 * server's timeline. A promoted standby runs on a newer timeline, so its epochs exceed every
 * epoch of the old one, even increments the old primary made that never reached the standby
 * (up to 2^32 per timeline). On timeline 1 epochs are 1, 2, 3, …
 */
export function bumpSql(table: string): string {
  const floor = epochFloor('$4');
  return `/* pgleaderlock:bump */ WITH prev AS (SELECT released FROM ${table} WHERE key1 = $1::int4 AND key2 = $2::int4)
    INSERT INTO ${table} AS t (key1, key2, epoch, leader_id, released) VALUES ($1::int4, $2::int4, ${floor}, $3, false)
    ON CONFLICT (key1, key2) DO UPDATE SET epoch = GREATEST(t.epoch + 1, ${floor}), leader_id = EXCLUDED.leader_id,
      updated_at = now(), released = false
    RETURNING epoch::text AS epoch, (SELECT released FROM prev) AS prev_released`;
}

/** The lowest epoch on the timeline in parameter `timeline`: `(timeline - 1) * 2^32 + 1`; timeline 0 (unknown, primary.ts) gives 1. */
export function epochFloor(timeline: string): string {
  return `GREATEST(((${timeline}::int8 - 1) << 32) + 1, 1)`;
}

/**
 * Run `fn(client)` in a transaction on `client` (not the lock's own session), committed
 * only if `term`'s epoch is still the current one; the epoch row stays share-locked until
 * the commit, so a newer leader's increment waits for it.
 */
export async function fencedWrite<T>(
  client: pg.ClientBase,
  table: string,
  keys: { key1: number; key2: number },
  term: { readonly id: number; readonly epoch: bigint | null; readonly signal: AbortSignal },
  fn: (client: pg.ClientBase) => Promise<T>,
): Promise<T> {
  if (term.epoch === null) throw new FencedError('this term has no epoch: enable fencing');
  await client.query('BEGIN');
  try {
    const { rows } = await client.query<{ epoch: string }>(
      `SELECT epoch::text AS epoch FROM ${table} WHERE key1 = $1::int4 AND key2 = $2::int4 FOR SHARE`,
      [keys.key1, keys.key2],
    );
    const current = rows[0] ? BigInt(rows[0].epoch) : null;
    if (current !== term.epoch) {
      throw new FencedError(
        `fenced write refused: term ${term.id} has epoch ${term.epoch}, the current epoch is ${current ?? 'none'}`,
      );
    }
    if (term.signal.aborted) throw new FencedError(`fenced write refused: term ${term.id} has ended`);
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}
