/**
 * Who holds a key and who waits for it, from pg_locks joined with pg_stat_activity, on a
 * short-lived connection of its own. Never takes the lock. Informational: by the time you
 * read it, it may have changed.
 */
import pg from 'pg';
import { ConnectionError, describe } from './errors.js';
import { keysFromName } from './keys.js';
import { KEY_LOCKS } from './sql.js';
import { checkKey } from './validate.js';

export interface InspectOptions {
  connectionString?: string;
  /** Opens a connected client; inspect closes it. */
  connect?: () => Promise<pg.Client>;
  key1?: number;
  key2?: number;
  /** Instead of key1/key2. */
  name?: string;
  /** Deadline for connecting and the query. Default 5000. */
  timeoutMs?: number;
}

export interface Candidate {
  /** The candidate's id (`pgleaderlock:<id>` application_name), or the raw application_name of another client. */
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
}

export interface LockInspection {
  leader: Candidate | null;
  /**
   * The holder holds the lock under a takeover fence: its term has not opened yet (read
   * from its last statement; right after a grant, for one round trip, not yet shown).
   */
  pending: boolean;
  /** In the order PostgreSQL queued them (oldest wait first). */
  waiters: Candidate[];
}

const INSPECT = `SELECT l.pid, l.granted, a.application_name, host(a.client_addr) AS client_addr,
    a.backend_start, (to_jsonb(l) ->> 'waitstart')::timestamptz AS waitstart, a.query_start,
    a.query LIKE '/* pgleaderlock:pending */%' AS pending
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
}

function candidate(r: Row, since: Date | null): Candidate {
  const app = r.application_name ?? '';
  return {
    id: app.startsWith('pgleaderlock:') ? app.slice('pgleaderlock:'.length) : app,
    pid: r.pid,
    clientAddr: r.client_addr,
    since,
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
  const timeoutMs = options.timeoutMs ?? 5000;
  let client: pg.Client;
  try {
    if (options.connect) {
      client = await options.connect();
    } else {
      client = new pg.Client({
        connectionString: options.connectionString,
        application_name: 'pgleaderlock-inspect',
        connectionTimeoutMillis: timeoutMs,
        query_timeout: timeoutMs,
      });
      client.on('error', () => {});
      await client.connect();
    }
  } catch (err) {
    throw new ConnectionError(`inspect could not connect: ${describe(err)}`, { cause: err });
  }
  client.on('error', () => {});
  try {
    const { rows } = await client.query<Row>(INSPECT, [key1, key2]);
    const held = rows.find((r) => r.granted);
    return {
      leader: held ? candidate(held, held.backend_start) : null,
      pending: held?.pending === true,
      waiters: rows.filter((r) => !r.granted).map((r) => candidate(r, r.waitstart ?? r.query_start)),
    };
  } finally {
    await client.end().catch(() => {});
  }
}
