/**
 * The SQL the lock session runs. Keys are always bound as $1::int4, $2::int4. Each
 * statement starts with a `/* pgleaderlock:<name> *\/` comment: it names the statement in
 * `pg_stat_activity.query` (and lets the unit tests' fake server tell them apart).
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
const HELD_HERE = `EXISTS (SELECT 1 FROM pg_locks l WHERE ${KEY_LOCKS} AND l.pid = pg_backend_pid() AND l.granted)`;

/** The session marker of this backend equals the token in parameter `$n`. */
const same = (n: number): string => `coalesce(current_setting('pgleaderlock.session', true) = $${n}, false)`;

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

/**
 * Free the key held by backend $3 when this session has proven not to be pinned to it
 * (a pooler moved it): unlock if this statement runs there, else terminate that backend.
 * Nothing happens unless backend $3 still holds the key.
 */
export const FREE_STRANDED = `/* pgleaderlock:free-stranded */ SELECT
  CASE WHEN l.pid = pg_backend_pid() THEN pg_advisory_unlock($1::int4, $2::int4)
       ELSE pg_terminate_backend(l.pid) END AS freed
  FROM pg_locks l WHERE ${KEY_LOCKS} AND l.granted AND l.pid = $3`;

export const READ_SETTINGS = `/* pgleaderlock:settings */ SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])`;

/**
 * What a granting statement also does, in its outer SELECT (so after the grant): arm
 * `idle_session_timeout` to $4 (PG14+, when $4 is not null; armed only once leader so that
 * idle followers are never cut), and measure on the server's clock how long the statement
 * waited for the grant (`waited_ms`: the lease can then count from the grant itself, with
 * no extra round trip).
 */
const ON_GRANT = `CASE WHEN a.ok AND $4::text IS NOT NULL THEN set_config('idle_session_timeout', $4, false) END AS idle,
  CASE WHEN a.ok THEN extract(epoch FROM clock_timestamp() - statement_timestamp())::float8 * 1000 END AS waited_ms`;

/**
 * One acquisition attempt, in one statement (so on one backend even behind a pooler):
 *  - `same`: this backend carries our marker ($3);
 *  - `held_before`: this backend already holds the key before our attempt. Advisory locks
 *    are re-entrant per backend, so that means another client shares the backend;
 *  - `ok`: the lock was taken, which is attempted only when `same AND NOT held_before`;
 *  - then ON_GRANT.
 * `lock` is `pg_try_advisory_lock` (poll) or a wait in `pg_advisory_lock` (wait mode,
 * bounded by the session's lock_timeout). The lock call is in a CASE branch, so it never
 * runs when the checks fail.
 */
function acquire(name: string, lock: string): string {
  return `/* pgleaderlock:${name} */ SELECT a.pid, a.same, a.held_before, a.ok, ${ON_GRANT}
  FROM (SELECT s.pid, s.same, s.held_before,
          CASE WHEN s.same AND NOT s.held_before THEN ${lock} ELSE false END AS ok
        FROM (SELECT pg_backend_pid() AS pid, ${same(3)} AS same, ${HELD_HERE} AS held_before) s) a`;
}

export const TRY_LOCK = acquire('try-lock', 'pg_try_advisory_lock($1::int4, $2::int4)');
export const WAIT_LOCK = acquire('wait-lock', '(SELECT true FROM pg_advisory_lock($1::int4, $2::int4) w)');

/**
 * After a wait ended by lock_timeout (55P03): PostgreSQL may have granted the lock just
 * before the timeout was processed, and then the session holds it although the statement
 * failed (LockErrorCleanup records the grant). Same columns as an acquisition (`ok`: held
 * now), with ON_GRANT if it is.
 */
export const LATE_GRANT = `/* pgleaderlock:late-grant */ SELECT a.pid, a.same, false AS held_before, a.ok, ${ON_GRANT}
  FROM (SELECT pg_backend_pid() AS pid, ${same(3)} AS same, ${HELD_HERE} AS ok) a`;

/** Release, only on the backend that carries our marker ($3): never someone else's hold. */
export const UNLOCK = `/* pgleaderlock:unlock */ SELECT ${same(3)} AS same,
  CASE WHEN ${same(3)} THEN pg_advisory_unlock($1::int4, $2::int4) ELSE false END AS ok`;

/**
 * Liveness and ownership in one round trip: the backend, whether it carries our marker
 * ($3), and whether it still holds (key1, key2). Advisory keys are stored as unsigned OIDs
 * in pg_locks, hence `::int4::oid`; the two-key form has objsubid = 2.
 */
export const CHECK = `/* pgleaderlock:check */ SELECT pg_backend_pid() AS pid, ${same(3)} AS same, ${HELD_HERE} AS held`;

/**
 * The ownership check that also announces this leader's id ($5) on the key's channel ($4):
 * the first check of a leadership (kept off the handoff's path: a NOTIFY costs a commit
 * that signals every listening session). No extra round trip; the NOTIFY is sent when the
 * statement's transaction commits, right after it.
 */
export const CHECK_ANNOUNCE = `/* pgleaderlock:check-announce */ SELECT pg_backend_pid() AS pid, ${same(3)} AS same,
  ${HELD_HERE} AS held, (SELECT count(*) FROM pg_notify($4, $5)) AS announced`;

/** The backend holding (key1, key2), if any, and its application_name. */
export const CURRENT_HOLDER = `/* pgleaderlock:holder */ SELECT l.pid, a.application_name FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid WHERE ${KEY_LOCKS} AND l.granted`;

/** The NOTIFY channel of a key pair: an identifier-safe name from the unsigned keys. */
export function channelFor(key1: number, key2: number): string {
  return `pgleaderlock_${(key1 >>> 0).toString(16)}_${(key2 >>> 0).toString(16)}`;
}
