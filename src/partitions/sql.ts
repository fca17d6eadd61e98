/**
 * The statements of partitioned leadership. Two advisory-key namespaces per name:
 * `(kMembers, slot)` is a worker's member lock, held by its member session for as long
 * as it is a member; `(kPartitions, p)` is partition p's lock, held by its owner's
 * member session. Members are read from `pg_locks` (the server's own view: a worker
 * whose session ended is no member, with no time-to-live to wait out).
 */
import pg from 'pg';
import { keysFromName } from '../core/keys.js';
import { same } from '../core/statements.js';
import { hash32 } from './assign.js';

/** The two key namespaces of a name, and its NOTIFY channel. */
export function keysOf(name: string): { members: number; partitions: number; channel: string } {
  const members = keysFromName(`${name}\u0000members`)[0];
  const partitions = keysFromName(`${name}\u0000partitions`)[0];
  return { members, partitions, channel: `pgleaderlock_p_${(members >>> 0).toString(16)}` };
}

/** A worker's member slot (key2 of its member lock): non-negative, from its id. */
export function slotOf(id: string): number {
  return hash32(id) & 0x7fffffff;
}

/** application_name of a worker's member session: its id and partition count. */
export function memberAppName(id: string, partitions: number): string {
  return `pgleaderlock:${id}#p${partitions}`;
}

/** A member read back from pg_locks: id, partition count, slot, backend pid. */
export interface MemberRow {
  id: string;
  partitions: number;
  slot: number;
  pid: number;
}

/** Parse `pgleaderlock:<id>#p<P>`; null for anything else (a watch session, another program). */
export function parseMember(app: string | null, slot: number, pid: number): MemberRow | null {
  const m = /^pgleaderlock:(.+)#p(\d+)$/.exec(app ?? '');
  return m ? { id: m[1] as string, partitions: Number(m[2]), slot, pid } : null;
}

const IN_DB = `l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())`;

/**
 * One round trip per reconcile: the members (holders of member locks, $1) and the
 * partitions ($2) this session holds, and the backend and marker ($3) it ran on (a pooler
 * that moved the session is refused). Also the ownership check behind the lease.
 */
export const RECONCILE = `/* pgleaderlock:partitions */
  SELECT (SELECT coalesce(json_agg(json_build_object('app', a.application_name, 'slot', l.objid::text::int8, 'pid', l.pid)), '[]')
            FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
           WHERE ${IN_DB} AND l.classid = $1::int4::oid) AS members,
         (SELECT coalesce(array_agg(l.objid::text::int4 ORDER BY l.objid::text::int4), '{}')
            FROM pg_locks l WHERE ${IN_DB} AND l.classid = $2::int4::oid AND l.pid = pg_backend_pid()) AS held,
         pg_backend_pid() AS pid, ${same(3)} AS same`;

/**
 * Take the partitions in $2 that are free; returns those taken, and the backend and marker
 * ($3) it ran on. On a backend without the marker it takes nothing.
 */
export const TAKE = `/* pgleaderlock:take */ SELECT pg_backend_pid() AS pid, ${same(3)} AS same,
  (SELECT array_agg(p) FROM unnest($2::int4[]) p
    WHERE CASE WHEN ${same(3)} THEN pg_try_advisory_lock($1, p) ELSE false END) AS taken`;

/** The member lock ($1, $2), taken only on a backend that carries the session's marker ($3). */
export const MEMBER_LOCK = `/* pgleaderlock:member */ SELECT pg_backend_pid() AS pid, ${same(3)} AS same,
  CASE WHEN ${same(3)} THEN pg_try_advisory_lock($1, $2) ELSE false END AS got`;

/** Release the partitions in $2 held by this session, on a backend that carries its marker ($3). */
export const GIVE = `/* pgleaderlock:give */ SELECT count(*) FILTER (WHERE CASE WHEN ${same(3)} THEN pg_advisory_unlock($1, p) ELSE false END)::int AS released FROM unnest($2::int4[]) p`;

/**
 * Hand partitions back cleanly, in one round trip: the `released` notices (the partitions
 * whose runs returned) are committed first, then the locks go, then a `freed` notice wakes
 * the others to take them. A worker that takes one of them has therefore always heard its
 * `released` first, and opens its term without the takeover delay.
 */
export function giveScript(o: {
  partitionsKey: number;
  /** The member session's marker: nothing is announced or unlocked on a backend without it. */
  token: string;
  channel: string;
  released: readonly string[];
  freed: string;
  give: readonly number[];
}): string {
  const lit = (text: string): string => pg.escapeLiteral(text);
  const mine = `coalesce(current_setting('pgleaderlock.session', true) = ${lit(o.token)}, false)`;
  const notify = (text: string): string => `SELECT pg_notify(${lit(o.channel)}, ${lit(text)}) WHERE ${mine};`;
  const partitions = o.give.map((p) => p | 0).join(',');
  return `/* pgleaderlock:give */ BEGIN;
  ${o.released.map(notify).join('\n  ')}
  COMMIT;
  SELECT count(*) FILTER (WHERE CASE WHEN ${mine} THEN pg_advisory_unlock(${o.partitionsKey | 0}, p) ELSE false END) FROM unnest(ARRAY[${partitions}]::int4[]) p;
  ${notify(o.freed)}`;
}

/** Who owns each partition, for inspect(): partition → application_name of its holder. */
export const OWNERS = `/* pgleaderlock:owners */
  SELECT l.objid::text::int4 AS partition, a.application_name AS app, l.pid
    FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
   WHERE ${IN_DB} AND l.classid = $1::int4::oid`;
