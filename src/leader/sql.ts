/**
 * The SQL the lock session runs. Keys are always bound as $1::int4, $2::int4. Each
 * statement starts with a `/* pgleaderlock:<name> *\/` comment: it names the statement in
 * `pg_stat_activity.query` (and lets the unit tests' fake server tell them apart).
 * Each statement checks the session marker (statements.ts).
 */

import pg from 'pg';
import { type Directive, forwardPayload, type NewHandover, payload } from '../core/handover.js';
import { idTag } from '../core/identity.js';
import { HELD_HERE, KEY_LOCKS, same } from '../core/statements.js';

/**
 * What a granting statement also does, in its outer SELECT (so after the grant): take the
 * key a second time (`twice`: re-entrant, so only a count in this backend's own lock table:
 * the release's first unlock then says whether this backend still holds the key, at no
 * cost, where reading `pg_locks` cost a third of the release; releaseSql); arm
 * `idle_session_timeout` to $4 (PG14+, when $4 is not null; armed only once leader so that
 * idle followers are never cut); commit without waiting for the WAL flush (the statement
 * writes nothing durable: a NOTIFY is not kept across a crash anyway); measure on the server's clock how long the statement
 * waited for the grant (`waited_ms`: the lease can then count from the grant itself, with
 * no extra round trip); and send the `acquired` event ($5) on the key's channel ($6)
 * (handover.ts), committed with the statement, so before any term can open.
 */
const ON_GRANT = `CASE WHEN a.ok THEN pg_try_advisory_lock($1::int4, $2::int4) END AS twice,
  CASE WHEN a.ok AND $4::text IS NOT NULL THEN set_config('idle_session_timeout', $4, false) END AS idle,
  CASE WHEN a.ok THEN set_config('synchronous_commit', 'off', true) END AS async_commit,
  CASE WHEN a.ok THEN extract(epoch FROM clock_timestamp() - statement_timestamp())::float8 * 1000 END AS waited_ms,
  CASE WHEN a.ok THEN (SELECT count(*) FROM pg_notify($6, $5)) END AS announced,
  CASE WHEN a.ok THEN floor(extract(epoch FROM clock_timestamp()) * 1000)::float8 END AS server_ms`;

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

/** What a release needs; every value is written into the statement as a literal. */
export interface ReleaseValues {
  key1: number;
  key2: number;
  /** The releasing lock's id and session marker, named by its `released` event (handover.ts). */
  id: string;
  token: string;
  channel: string;
  /**
   * A handover to a named successor (succession.ts), carried by the `released` event: a new
   * one, its deadlines computed by the server (now + `timeoutMs`, now + 2 × `timeoutMs`), or
   * one forwarded by a yield, its deadlines known. Null: a plain release.
   */
  handover: NewHandover | Directive | null;
  /** Fencing: the quoted table and this leadership's epoch, to mark it released. */
  fencing: { table: string; epoch: bigint } | null;
  /** PG14+: turn `idle_session_timeout` (armed with the grant) off again: the session follows on. */
  disarm: boolean;
}

/**
 * A clean release, in one round trip (a simple-protocol query, hence literals): in its own
 * transaction, mark the fencing epoch released and send the `released` event, both only on
 * this session's own backend while it holds the key; commit without waiting for the WAL
 * flush (a `released` mark lost in a crash only costs the next holder its takeover delay);
 * then unlock (again only on that backend: never someone else's hold). The event is
 * committed before the unlock, so the next holder, granted by the unlock, receives it with
 * its grant. The guard against a false proof: a grant holds the key twice (ON_GRANT), and
 * the event is sent only if one unlock returns true (this backend held the key: after a
 * `pg_advisory_unlock_all()` there it is false) and a re-entrant try-lock right after it
 * returns true (the key is still held here: after a stray single unlock by another client
 * on this backend, the count was 1, the unlock freed the key, and a waiter already has it).
 * Both only touch this backend's own lock table while the key is held here; reading
 * `pg_locks` for the same answer was a third of the release round trip. The last
 * statement frees the key whatever its count (`pg_advisory_unlock_all()`: the session
 * holds no other advisory lock); `ok` says it was held. The fencing mark still reads
 * `pg_locks` (only with fencing on).
 */
export function releaseSql(v: ReleaseValues): string {
  const lit = (s: string): string => pg.escapeLiteral(s);
  const keys = (sql: string): string =>
    sql.replaceAll('$1::int4', `(${v.key1 | 0})::int4`).replaceAll('$2::int4', `(${v.key2 | 0})::int4`);
  const mine = `coalesce(current_setting('pgleaderlock.session', true) = ${lit(v.token)}, false)`;
  const holding = `${mine} AND ${keys(HELD_HERE)}`;
  const mark = v.fencing
    ? `UPDATE ${v.fencing.table} SET released = true WHERE key1 = (${v.key1 | 0}) AND key2 = (${v.key2 | 0})
         AND epoch = ${BigInt(v.fencing.epoch)} AND ${holding};`
    : '';
  const unlock = keys('pg_advisory_unlock($1::int4, $2::int4)');
  // held here before the unlock, and still held after it (the count was 2, or nobody queued)
  const guard = `CASE WHEN ${mine} THEN CASE WHEN ${unlock} THEN ${keys('pg_try_advisory_lock($1::int4, $2::int4)')} ELSE false END ELSE false END`;
  return `/* pgleaderlock:release */ BEGIN;
  ${mark}
  SELECT set_config('synchronous_commit', 'off', true), pg_notify(${lit(v.channel)}, ${event(v, lit)}) WHERE ${guard};
  COMMIT;
  SELECT ${mine} AS same,
    CASE WHEN ${mine} THEN CASE WHEN ${unlock} THEN (SELECT true FROM pg_advisory_unlock_all() r) ELSE false END
      ELSE false END AS ok${v.disarm ? `, set_config('idle_session_timeout', '0', false) AS disarmed` : ''}`;
}

/** The `released` event's payload, as SQL: a literal, or a new directive whose deadlines the server computes. */
function event(v: ReleaseValues, lit: (s: string) => string): string {
  const h = v.handover;
  if (h === null) return lit(payload('released', v.id, v.token));
  if ('until' in h) return lit(forwardPayload(v.id, v.token, h));
  return `json_build_object('e', 'released', 'id', ${lit(v.id)}, 's', ${lit(v.token)}, 'to', ${lit(h.to)},
    'back', ${h.back === null ? 'NULL::text' : lit(h.back)},
    'until', floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + ${Math.ceil(h.timeoutMs)},
    'backUntil', floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint + ${2 * Math.ceil(h.timeoutMs)})::text`;
}

/** Wait mode: the candidates queued for (key1, key2) and the `acquired` payload their wait carries (its priority). */
export const QUEUED = `/* pgleaderlock:queued */ SELECT a.application_name, a.query FROM pg_locks l
  JOIN pg_stat_get_activity(NULL) a ON a.pid = l.pid WHERE ${KEY_LOCKS} AND NOT l.granted ORDER BY a.query_start`;

/**
 * A handover's successor ($3, its application_name): whether it holds (key1, key2), waits for
 * it (wait mode), or has a session at all (poll mode: idle between attempts). The function
 * under pg_stat_activity, not the view: a third of the time (0.6 against 1.2–3.3 ms here).
 */
export const SUCCESSOR = `/* pgleaderlock:successor */ SELECT
  coalesce(bool_or(l.granted), false) AS holds, coalesce(bool_or(NOT l.granted), false) AS waits,
  count(s.pid)::int AS sessions
  FROM pg_stat_get_activity(NULL) s LEFT JOIN pg_locks l ON l.pid = s.pid AND ${KEY_LOCKS}
  WHERE s.application_name = $3`;

/**
 * Liveness and ownership in one round trip: the backend, whether it carries our marker
 * ($3), whether it still holds (key1, key2), and whether the server is still a primary (a
 * lock on a server that became a standby excludes nobody on the new primary). Advisory keys are stored as unsigned OIDs
 * in pg_locks, hence `::int4::oid`; the two-key form has objsubid = 2.
 */
export const CHECK = `/* pgleaderlock:check */ SELECT pg_backend_pid() AS pid, ${same(3)} AS same, ${HELD_HERE} AS held,
  pg_is_in_recovery() AS recovery`;

/**
 * The same check while the lock is held for the takeover delay (the term not yet open):
 * tagged `pending` so that `inspect` (which reads the holder's last statement in
 * pg_stat_activity) can tell a pending holder from a leader.
 */
export const CHECK_PENDING = CHECK.replace('pgleaderlock:check', 'pgleaderlock:pending');

/** The backend holding (key1, key2), if any: its application_name and last statement (its id, core/identity.ts). */
export const CURRENT_HOLDER = `/* pgleaderlock:holder */ SELECT l.pid, a.application_name, a.query FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid WHERE ${KEY_LOCKS} AND l.granted`;

/** What a candidate's statements carry: its priority, and its id (shown when its application_name cannot carry it). */
export interface Mark {
  readonly priority: number;
  readonly id: string;
}

/**
 * A statement as the lock session sends it: tagged with the candidate's priority right after
 * its name, so that it shows in `pg_stat_activity.query` whatever the session ran last
 * (`inspect`, `status`), even in a long statement that the view cuts off
 * (`track_activity_query_size`, 1 kB by default); then, in a comment of its own, the id when
 * its application_name cannot carry it (core/identity.ts `idTag`): a view that cuts the id
 * off still shows the priority whole.
 */
export function tagged(sql: string, mark: Mark, pending = false): string {
  const tag = `/* p=${mark.priority}${pending ? PENDING_MARK : ''} */${idTag(mark.id)}`;
  const named = /^\/\* pgleaderlock:[a-z-]+ \*\//.exec(sql);
  return named ? `${named[0]} ${tag}${sql.slice(named[0].length)}` : `${tag} ${sql}`;
}

/**
 * The one tag of a candidate's statements (`tagged`), for every statement its session sends:
 * its own, the lock session's (core/lock-session.ts), the pooler guard's, the fencing
 * table's and the key channel's.
 */
export class StatementTag {
  /** A check under the takeover delay runs (and the pooler guard's check after it): tagged `pending`. */
  pending = false;
  private readonly mark: Mark;

  constructor(priority: number, id: string) {
    this.mark = { priority, id };
  }

  /** `sql` tagged (a bound function: handed on as is). */
  readonly apply = (sql: string): string => tagged(sql, this.mark, this.pending);
}

/**
 * In a `tagged` statement's tag: the statement is part of a check made while the lock is
 * held for the takeover delay (behind a pooler, the pooler guard's check that follows it).
 */
const PENDING_MARK = ', pending';

/** `inspect`: the holder's last statement was part of a check under the takeover delay. */
export const PENDING_STATEMENT = `(a.query LIKE '/* pgleaderlock:pending */%' OR a.query LIKE '/* pgleaderlock:% /* p=%${PENDING_MARK} */%')`;

/** The priority a pgleaderlock statement carries: a wait's `acquired` payload (`"p":N`), or a `tagged` statement's `/* p=N *\/`. */
export function priorityOf(query: string | null): number | null {
  const m = /"p":(-?\d+)|\/\* p=(-?\d+)(?:, pending)? \*\//.exec(query ?? '');
  return m ? Number(m[1] ?? m[2]) : null;
}

/** lock_timeout: the slice ended with the lock still held elsewhere. (A cancel, 57014, is an error.) */
export const SLICE_ENDED = '55P03';
