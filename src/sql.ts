/** The SQL the lock session runs. Keys are always bound as $1::int4, $2::int4. */
export const TRY_LOCK = 'SELECT pg_try_advisory_lock($1::int4, $2::int4) AS ok, pg_backend_pid() AS pid';
/**
 * PG14+: take the lock and, only if granted, arm idle_session_timeout in the same round trip
 * (a follower must never be cut for being idle). The subquery is not flattened because
 * pg_try_advisory_lock is volatile, so the lock call runs once, before the CASE.
 */
export const TRY_LOCK_ARMED = `SELECT l.ok, l.pid,
  CASE WHEN l.ok THEN set_config('idle_session_timeout', $3, false) END AS idle
  FROM (SELECT pg_try_advisory_lock($1::int4, $2::int4) AS ok, pg_backend_pid() AS pid) AS l`;
/**
 * Wait mode: block server-side in pg_advisory_lock for at most lock_timeout (one slice),
 * arming idle_session_timeout in the same statement once granted (so a waiter whose client
 * vanished and was granted the lock anyway is cut by the server within serverReleaseMs).
 */
export const WAIT_LOCK = `SELECT true AS ok, l.pid, set_config('idle_session_timeout', $3, false) AS idle
  FROM (SELECT pg_advisory_lock($1::int4, $2::int4) AS locked, pg_backend_pid() AS pid) AS l`;
export const WAIT_LOCK_PRE14 =
  'SELECT true AS ok, l.pid FROM (SELECT pg_advisory_lock($1::int4, $2::int4) AS locked, pg_backend_pid() AS pid) AS l';
export const PREPARE = `SELECT current_setting('server_version_num')::int AS version,
  pg_is_in_recovery() AS recovery, pg_backend_pid() AS pid`;
export const READ_SETTINGS = 'SELECT name, setting FROM pg_settings WHERE name = ANY($1::text[])';
export const UNLOCK = 'SELECT pg_advisory_unlock($1::int4, $2::int4) AS ok';
/**
 * Liveness and ownership in one round trip: is the backend still the one that acquired,
 * and does it still hold (key1, key2)? Advisory keys are stored as unsigned OIDs in
 * pg_locks, hence `::int4::oid`; the two-key form has objsubid = 2.
 */
export const CHECK = `SELECT pg_backend_pid() AS pid, EXISTS (
  SELECT 1 FROM pg_locks
   WHERE locktype = 'advisory'
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
     AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2
     AND pid = pg_backend_pid() AND granted) AS held`;
/** pg_locks rows (alias `l`) of the advisory key ($1, $2) in this database, held or awaited. */
export const KEY_LOCKS = `l.locktype = 'advisory'
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND l.classid = $1::int4::oid AND l.objid = $2::int4::oid AND l.objsubid = 2`;
/** The application_name of the backend holding (key1, key2), if any. */
export const CURRENT_HOLDER = `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE ${KEY_LOCKS} AND l.granted`;
/**
 * The ownership check that also announces this leader's id on the key's channel (the first
 * check of a term): no extra round trip, no extra stage in the health loop. The NOTIFY is
 * sent when the statement's transaction commits, right after it.
 */
export const CHECK_ANNOUNCE = `${CHECK}, (SELECT count(*) FROM pg_notify($3, $4)) AS announced`;

/** The NOTIFY channel of a key pair: an identifier-safe name from the unsigned keys. */
export function channelFor(key1: number, key2: number): string {
  return `pgleaderlock_${(key1 >>> 0).toString(16)}_${(key2 >>> 0).toString(16)}`;
}
