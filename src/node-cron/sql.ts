/**
 * The claims table and the statements on it. One row per fire that a leader claimed:
 * `(fire_at, scope, task)` is the primary key, so a fire can be claimed once; the claim
 * also names the epoch it was made under.
 */
import { show } from '../core/validate.js';

export const DEFAULT_CLAIMS_TABLE = 'pgleaderlock_cron_claims';

/** `table` or `schema.table`, each part a plain identifier; returned quoted. */
export function quoteClaimsTable(name: unknown): string {
  // no `$`: the name is also written inside a dollar-quoted block (createClaimsSql)
  if (typeof name !== 'string' || !/^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$/.test(name)) {
    throw new TypeError(
      `table must be a table name like "claims" or "schema.claims", received ${show(name)}`,
    );
  }
  return name
    .split('.')
    .map((part) => `"${part}"`)
    .join('.');
}

/** A quoted name as `LeaderLock.fencingTable` gives it (`"t"` or `"s"."t"`). */
export function isQuotedName(name: unknown): name is string {
  return typeof name === 'string' && /^"(?:[^"]|"")+"(\."(?:[^"]|"")+")?$/.test(name);
}

/**
 * Create the table if it is missing. Only then: `CREATE TABLE IF NOT EXISTS` asks for the
 * `CREATE` right on the schema even when the table exists, which a role that only uses a
 * table made for it does not have (PostgreSQL 15+ no longer grants it on `public`).
 */
export function createClaimsSql(table: string): string {
  return `/* pgleaderlock:cron-claims-table */ DO $$ BEGIN
    IF to_regclass('${table}') IS NULL THEN
      CREATE TABLE IF NOT EXISTS ${table} (
        fire_at timestamptz NOT NULL, scope text NOT NULL, task text NOT NULL,
        epoch int8 NOT NULL, leader_id text NOT NULL,
        claimed_at timestamptz NOT NULL DEFAULT now(), finished_at timestamptz,
        PRIMARY KEY (fire_at, scope, task));
    END IF;
  END $$`;
}

/**
 * Claim a fire, in one statement: the row is inserted only if the lock's epoch row still
 * holds this term's epoch, and only once per fire. `FOR SHARE` makes a claim and a new
 * leader's epoch increment (an UPDATE of that row) take turns: a claim that reads the row
 * first commits before the increment can; one that comes second waits for the increment,
 * re-reads the row, finds another epoch and inserts nothing.
 *
 * One row back: `claimed` (inserted), or `pending` when the fire is held by an unfinished
 * claim of an older epoch (a previous term's, which may still be withdrawn: its term ended
 * while it was in flight), or none (claimed in this term or finished, or this epoch is no
 * longer current).
 *
 * $1 fire_at, $2 scope, $3 task, $4 leader id, $5 key1, $6 key2, $7 epoch.
 */
export function claimSql(claims: string, epochs: string): string {
  return `/* pgleaderlock:cron-claim */ WITH ins AS (
    INSERT INTO ${claims} AS c (fire_at, scope, task, epoch, leader_id)
    SELECT $1::timestamptz, $2::text, $3::text, e.epoch, $4::text
      FROM ${epochs} e
     WHERE e.key1 = $5::int4 AND e.key2 = $6::int4 AND e.epoch = $7::int8
       FOR SHARE
    ON CONFLICT DO NOTHING
    RETURNING c.epoch)
  SELECT 'claimed' AS outcome FROM ins
  UNION ALL
  SELECT 'pending' FROM ${claims} x
   WHERE NOT EXISTS (SELECT 1 FROM ins)
     AND x.fire_at = $1::timestamptz AND x.scope = $2::text AND x.task = $3::text
     AND x.epoch < $7::int8 AND x.finished_at IS NULL`;
}

/** Mark a claimed fire finished. $1 fire_at, $2 scope, $3 task, $4 epoch. */
export function finishSql(claims: string): string {
  return `/* pgleaderlock:cron-finish */ UPDATE ${claims} SET finished_at = now()
    WHERE fire_at = $1::timestamptz AND scope = $2::text AND task = $3::text AND epoch = $4::int8`;
}

/** Withdraw a claim that will not run (its term ended while it was made). Same parameters. */
export function withdrawSql(claims: string): string {
  return `/* pgleaderlock:cron-withdraw */ DELETE FROM ${claims}
    WHERE fire_at = $1::timestamptz AND scope = $2::text AND task = $3::text AND epoch = $4::int8`;
}

/** Delete this scope's claims of fires older than $2 milliseconds. $1 scope. */
export function cleanupSql(claims: string): string {
  return `/* pgleaderlock:cron-cleanup */ DELETE FROM ${claims}
    WHERE fire_at < now() - $2::float8 * interval '1 millisecond' AND scope = $1::text`;
}
