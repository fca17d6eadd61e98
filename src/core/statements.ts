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
  set_config('pgleaderlock.session', $1, false) AS marker, set_config('application_name', $2, false) AS app`;

/**
 * Pooler probe, run on a second connection through the same path: which backend serves
 * it, the session marker it carries (any lock session's), and whether it holds the key.
 */
export const PROBE = `/* pgleaderlock:probe */ SELECT pg_backend_pid() AS pid,
  nullif(current_setting('pgleaderlock.session', true), '') AS marker, ${HELD_HERE} AS held`;

/** The settings named in $1, as the server applied them. */
export const READ_SETTINGS = `/* pgleaderlock:settings */ SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])`;
