/**
 * The statements every session runs, whichever election it serves (prepare.ts, pooler.ts):
 * marking the backend, reading back the settings, and the pooler probe.
 *
 * Session marker: on connect the session stores a random token in the custom setting
 * `pgleaderlock.session` (session scope). Every later statement checks that the backend
 * it runs on still carries that token. Behind a transaction- or statement-mode pooler the
 * token proves nothing is shared: another client's statements on our backend, or ours on
 * another backend, show up as a missing or different token (docs/safety.md, "Poolers").
 */

import pg from 'pg';

/** A value {@link inline} writes as a literal. */
export type Literal = string | number | null;

/**
 * `sql` with each `$n` replaced by `values[n-1]` as a literal (integers only for numbers,
 * strings quoted by the driver), for the simple query protocol, which carries no parameters.
 * The statements that wait on the server (a wait slice in `pg_advisory_lock`) are sent this
 * way: in the extended protocol, pgpool-II (`allow_sql_comments = on`) sends its own
 * catalog queries on the same backend after the pipelined Execute, while holding its
 * shared relation cache; behind a statement that waits for the lock, they wait too, and
 * every other client of the pool that needs that cache, the lock's holder included, stalls
 * until the wait ends (docs/safety.md, "pgpool-II"). A simple query is parsed, and its
 * catalog lookups done, before it is sent.
 */
export function inline(sql: string, values: readonly Literal[]): string {
  return sql.replace(/\$(\d+)/g, (_, n: string) => {
    const v = values[Number(n) - 1];
    if (v === undefined) throw new RangeError(`no value for $${n}`);
    if (v === null) return 'NULL';
    if (typeof v === 'number') {
      if (!Number.isSafeInteger(v)) throw new RangeError(`$${n} must be an integer, got ${v}`);
      return `(${v})`;
    }
    return pg.escapeLiteral(v);
  });
}

/** pg_locks rows (alias `l`) of the advisory key ($1, $2) in this database, held or awaited. */
export const KEY_LOCKS = `l.locktype = 'advisory'
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid = $1::int4::oid AND l.objid = $2::int4::oid AND l.objsubid = 2`;

/** This backend holds (key1, key2): the ownership test. */
export const HELD_HERE = `EXISTS (SELECT 1 FROM pg_locks l WHERE ${KEY_LOCKS} AND l.pid = pg_backend_pid() AND l.granted)`;

/** The session marker of this backend equals the token in parameter `$n`. */
export const same = (n: number): string =>
  `coalesce(current_setting('pgleaderlock.session', true) = $${n}, false)`;

/**
 * On connect: what the server is, who we are on it, and the session marker ($1) and
 * application_name ($2) set in the same round trip (a `connect` hook's client may not
 * have set application_name; `inspect` shows it).
 */
export const PREPARE = `/* pgleaderlock:prepare */ SELECT current_setting('server_version_num')::int AS version,
  pg_is_in_recovery() AS recovery, pg_backend_pid() AS pid,
  host(inet_server_addr()) AS server_addr, inet_server_port() AS server_port,
  set_config('pgleaderlock.session', $1, false) AS marker, set_config('application_name', $2, false) AS app`;

/**
 * Pooler probe, run on a second connection through the same path: which backend serves
 * it, the session marker it carries (any lock session's), and whether it holds the key.
 */
export const PROBE = `/* pgleaderlock:probe */ SELECT pg_backend_pid() AS pid,
  nullif(current_setting('pgleaderlock.session', true), '') AS marker, ${HELD_HERE} AS held`;

/**
 * Behind a pooler, on the lock session right after one of its own statements: a pooler that
 * hands out its backends in turn (PgBouncer's `server_round_robin`) gives this one another
 * backend than the statement before (pooler.ts). It reads `pg_locks` (`held`, keys $1, $2;
 * marker $3) as every lock statement does, so that pgpool-II sends it to the primary and
 * never load-balances it to a standby.
 */
export const PINNED = `/* pgleaderlock:pinned */ SELECT pg_backend_pid() AS pid, ${same(3)} AS same, ${HELD_HERE} AS held`;

/**
 * Free what a lock session left on backend $3 once it proved not to be pinned to it (a
 * pooler moved it or shares it), so that no key stays held on a pooled backend. Nothing
 * happens unless backend $3 still holds the session's anchor key ($1, $2: the lock, or a
 * worker's member lock): a pid that now serves another connection is never ended. On that
 * backend itself, unlock the anchor key (twice: a grant holds the key twice,
 * leader/sql.ts `ON_GRANT`) or, with $4, every advisory lock there (a worker's partitions
 * too); elsewhere, terminate that backend (the role may lack the right: best effort).
 */
export const FREE_STRANDED = `/* pgleaderlock:free-stranded */ SELECT
  CASE WHEN l.pid = pg_backend_pid()
       THEN CASE WHEN $4::boolean THEN (SELECT true FROM (SELECT pg_advisory_unlock_all()) u)
            ELSE (SELECT bool_or(pg_advisory_unlock($1::int4, $2::int4)) FROM generate_series(1, 2)) END
       ELSE pg_terminate_backend(l.pid) END AS freed
  FROM pg_locks l WHERE ${KEY_LOCKS} AND l.granted AND l.pid = $3`;

/** The settings named in $1, as the server applied them. */
export const READ_SETTINGS = `/* pgleaderlock:settings */ SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])`;
