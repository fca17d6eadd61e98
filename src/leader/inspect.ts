/**
 * Who holds a key and who waits for it, from pg_locks joined with pg_stat_activity, on a
 * short-lived connection of its own to the primary (the lock's hosts are surveyed as the
 * lock does, primary.ts). Never takes the lock. Informational: by the time you read it, it
 * may have changed.
 */

import type pg from 'pg';
import { systemClock } from '../core/clock.js';
import { Connection } from '../core/connection.js';
import { type Endpoint, endpointsOf } from '../core/endpoints.js';
import { ConnectionError, describe } from '../core/errors.js';
import { idOfSession } from '../core/identity.js';
import { keysFromName } from '../core/keys.js';
import { connectFound, findPrimaryOnly } from '../core/primary.js';
import { hookEndpoints } from '../core/shared-options.js';
import { KEY_LOCKS } from '../core/statements.js';
import { checkKey, checkPositiveDuration } from '../core/validate.js';
import { PENDING_STATEMENT, priorityOf } from './sql.js';

/** Options of `LeaderLock.inspect()`: where, and which key. */
export interface InspectOptions {
  /** As for LeaderLock, several hosts included (the primary among them is inspected). */
  connectionString?: string;
  /** Opens a connected client; inspect closes it. */
  connect?: (() => Promise<pg.Client>) | readonly (() => Promise<pg.Client>)[];
  /** First advisory lock key (with `key2`, or give `name`). */
  key1?: number;
  /** Second advisory lock key. */
  key2?: number;
  /** Instead of key1/key2. */
  name?: string;
  /** Deadline for connecting and the query. Default 5000. */
  timeoutMs?: number;
}

/** A session holding or waiting for the key, as `LeaderLock.inspect()` reports it. */
export interface Candidate {
  /**
   * The candidate's id, whole (from its `pgleaderlock:<id>` application_name, or from its
   * statement's tag for an id that name cannot carry: core/identity.ts), or the raw
   * application_name of another client.
   */
  id: string;
  /** Backend pid. */
  pid: number;
  /** Client address (null on Unix sockets). */
  clientAddr: string | null;
  /**
   * Leader: when its session started (the lock was taken at or after it; PostgreSQL does
   * not record when). Waiter: when it started waiting (PG14+), else when its statement began.
   */
  since: Date | null;
  /**
   * Its `priority` (docs/choosing-the-leader.md), read from the statement it runs or ran
   * last: every statement of a candidate's lock session from its first attempt on carries it
   * (its set-up before that, which holds and waits for nothing, does not). Null when that statement
   * does not show it (another client, a version before priorities).
   */
  priority: number | null;
}

/** What `LeaderLock.inspect()` found: who holds the key, who waits. */
export interface LockInspection {
  /** The server inspected: `host:port` of the primary, or `connect()`. */
  host: string;
  /** The session holding the lock, or null if none does. */
  leader: Candidate | null;
  /**
   * The holder holds the lock for the takeover delay: its term has not opened yet (read
   * from its last statement; not yet shown right after a grant, until its first check under
   * the delay: one round trip, a few behind a pooler or with fencing).
   */
  pending: boolean;
  /** In the order PostgreSQL queued them (oldest wait first). */
  waiters: Candidate[];
}

const INSPECT = `SELECT l.pid, l.granted, a.application_name, host(a.client_addr) AS client_addr,
    a.backend_start, (to_jsonb(l) ->> 'waitstart')::timestamptz AS waitstart, a.query_start,
    ${PENDING_STATEMENT} AS pending, a.query
  FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
  WHERE ${KEY_LOCKS}
  ORDER BY l.granted DESC, waitstart NULLS LAST, a.query_start`;

interface Row {
  pid: number;
  granted: boolean;
  application_name: string | null;
  client_addr: string | null;
  backend_start: Date | null;
  waitstart: Date | null;
  query_start: Date | null;
  pending: boolean;
  query: string | null;
}

function candidate(r: Row, since: Date | null): Candidate {
  const app = r.application_name ?? '';
  return {
    id: idOfSession(app, r.query) ?? app,
    pid: r.pid,
    clientAddr: r.client_addr,
    since,
    priority: priorityOf(r.query),
  };
}

export async function inspect(options: InspectOptions): Promise<LockInspection> {
  let key1: number;
  let key2: number;
  if (options.name !== undefined) [key1, key2] = keysFromName(options.name);
  else {
    key1 = checkKey('key1', options.key1);
    key2 = checkKey('key2', options.key2);
  }
  const timeoutMs =
    options.timeoutMs === undefined ? 5000 : checkPositiveDuration('timeoutMs', options.timeoutMs);
  const endpoints: Endpoint[] = options.connect
    ? hookEndpoints(options.connect)
    : endpointsOf(
        options.connectionString === undefined ? {} : { connectionString: options.connectionString },
        'pgleaderlock-inspect',
        timeoutMs,
      );
  let found: Awaited<ReturnType<typeof findPrimaryOnly>>;
  try {
    found = await findPrimaryOnly(endpoints, { clock: systemClock, queryTimeoutMs: timeoutMs });
  } catch (err) {
    throw new ConnectionError(`inspect could not connect: ${describe(err)}`, { cause: err });
  }
  const host = found.endpoint.label;
  // the core Connection: every statement under the deadline, the socket closed after
  const conn = await Connection.open(connectFound(found), {
    clock: systemClock,
    queryTimeoutMs: timeoutMs,
    closeTimeoutMs: 1000,
    unref: false,
  });
  try {
    const rows = await conn.query<Row>(INSPECT, [key1, key2]).catch((err: unknown) => {
      throw new ConnectionError(
        `inspect got no answer from ${host} within ${timeoutMs} ms: ${describe(err)}`,
        {
          cause: err,
        },
      );
    });
    const held = rows.find((r) => r.granted);
    return {
      host,
      leader: held ? candidate(held, held.backend_start) : null,
      pending: held?.pending === true,
      waiters: rows.filter((r) => !r.granted).map((r) => candidate(r, r.waitstart ?? r.query_start)),
    };
  } finally {
    await conn.close();
  }
}
