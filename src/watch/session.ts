/**
 * The watch's one connection: opened on the primary (primary.ts, as a lock's session is),
 * named, LISTENing on the key's channel (handover.ts), and the one statement it runs at
 * rest: who holds the key now, from `pg_locks`. It takes no lock and queues for none.
 */
import pg from 'pg';
import { Connection } from '../core/connection.js';
import { ConnectionError } from '../core/errors.js';
import { type HandoverEvent, parseEvent } from '../core/handover.js';
import { idOfSession } from '../core/identity.js';
import { channelFor } from '../core/keys.js';
import { refuseSharedBackends } from '../core/pooler.js';
import { connectFound, type Found, findPrimaryOnly, settingUp } from '../core/primary.js';
import { inline, KEY_LOCKS } from '../core/statements.js';
import type { ResolvedWatchOptions } from './options.js';
import type { HolderRow } from './view.js';

/**
 * Whether the server is still a primary, and the key's holder if any: its application_name,
 * session start and last statement (which carries an id its name cannot). Always one row.
 */
const HOLDER = `/* pgleaderlock:leader-watch */ SELECT pg_is_in_recovery() AS recovery, h.held, h.application_name,
  h.backend_start, h.query
  FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT true AS held, a.application_name, a.backend_start, a.query
    FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid WHERE ${KEY_LOCKS} AND l.granted LIMIT 1) h ON true`;

interface Row {
  recovery: boolean;
  held: boolean | null;
  application_name: string | null;
  backend_start: Date | null;
  query: string | null;
}

export interface WatchSession {
  readonly conn: Connection;
  /** The server watched: `host:port` of the primary, or `connect()`. */
  readonly host: string;
}

/**
 * Connect to the primary, name the session, and LISTEN on the key's channel; `onEvent` is
 * called with each event sent there from then on (unknown kinds are dropped). `signal` (a
 * close) abandons a connection under way at once.
 */
export async function openWatchSession(
  o: ResolvedWatchOptions,
  onEvent: (event: HandoverEvent) => void,
  signal?: AbortSignal,
  /** The connect's deadline (core/retry.ts `RetryCycle.connectTimeoutMs`; default queryTimeoutMs). */
  connectTimeoutMs?: number,
): Promise<WatchSession> {
  const found = await findPrimaryOnly(o.endpoints, {
    clock: o.clock,
    queryTimeoutMs: o.queryTimeoutMs,
    connectTimeoutMs,
    signal,
  });
  return settingUp(found, signal, (f) => listenOn(f, o, onEvent, signal));
}

async function listenOn(
  found: Found,
  o: ResolvedWatchOptions,
  onEvent: (event: HandoverEvent) => void,
  /** A close: abandons the pooler probe's connection at once. */
  signal: AbortSignal | undefined,
): Promise<WatchSession> {
  const conn = await Connection.open(connectFound(found), o);
  const channel = channelFor(o.key1, o.key2);
  conn.onNotification(channel, (text) => {
    const event = parseEvent(text);
    if (event) onEvent(event);
  });
  try {
    // nothing of ours on a backend a pooler shares with other clients: refused before naming or LISTEN
    await refuseSharedBackends({
      query: (text, values) => conn.query(text, values),
      announcedPid: conn.announcedPid,
      connect: found.endpoint.connect,
      key1: o.key1,
      key2: o.key2,
      clock: o.clock,
      timeoutMs: o.queryTimeoutMs,
      ...(signal ? { signal } : {}),
    });
    // a `connect` hook's client may not be named; LISTEN commits before the first read
    await conn.simple(
      `/* pgleaderlock:leader-watch */ SELECT set_config('application_name', ${pg.escapeLiteral(o.applicationName)}, false); LISTEN ${channel}`,
    );
  } catch (err) {
    conn.destroy();
    throw err;
  }
  return { conn, host: found.endpoint.label };
}

/** Who holds the key now (null: nobody). Fails if the server is no longer a primary. */
export async function readHolder(s: WatchSession, o: ResolvedWatchOptions): Promise<HolderRow | null> {
  // simple protocol: one message, one round trip, nothing to parse and bind separately
  const [row] = await s.conn.simple<Row>(inline(HOLDER, [o.key1, o.key2]));
  if (!row) throw new ConnectionError('the holder read returned no row');
  if (row.recovery) {
    throw new ConnectionError(`the server (${s.host}) is in recovery now: it is no longer the primary`);
  }
  if (row.held !== true) return null;
  const app = row.application_name ?? '';
  // backend_start is hidden from a role without the right to see another role's sessions
  return { id: idOfSession(app, row.query) ?? app, name: app, since: row.backend_start ?? new Date() };
}
