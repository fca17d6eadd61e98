/**
 * Preparing a session, the same for every session either election opens: mark the backend
 * (sql.ts `PREPARE`), refuse a hot standby, refuse a pooler that shares backends
 * (pooler.ts), set the settings that bound how long the server keeps a dead client's
 * locks (safety.ts) and read back what the server applied.
 */
import { randomBytes } from 'node:crypto';
import type { Clock } from './clock.js';
import { parseSettingMs } from './connect.js';
import type { Connection } from './connection.js';
import type { EndpointConnect } from './endpoints.js';
import { ConnectionError, LockError } from './errors.js';
import { detectPgpool, type PgpoolFront } from './pgpool.js';
import { PoolerGuard } from './pooler.js';
import { type AppliedSettings, connectSettings, READ_BACK } from './safety.js';
import { PREPARE, READ_SETTINGS } from './statements.js';

export interface PrepareOptions {
  /** The session marker (sql.ts), checked by the pooler probe and by the session's statements. */
  token: string;
  applicationName: string;
  clock: Clock;
  queryTimeoutMs: number;
  /** The bound the settings aim at (safety.ts `connectSettings`). */
  serverReleaseMs: number;
  /**
   * The pooler probe: another connection through the same path, and the key it checks is
   * not held by the backend that serves it. Null: no probe (a second session of a worker
   * whose first session already passed it).
   */
  probe: { connect: EndpointConnect; key1: number; key2: number } | null;
  /** A shutdown: abandons the pooler probe under way (its connection is closed at once). */
  signal?: AbortSignal | undefined;
  /**
   * Told of a pgpool-II front when something stands in the path (the server's address,
   * port or backend pid is not the one this connection reached or was announced) and
   * `SHOW pool_version` answers (pgpool.ts).
   */
  onPgpool?: (front: PgpoolFront) => void;
  /**
   * How this session marks each of its statements (a candidate's lock session: its
   * priority, leader/sql.ts `tagged`), the pooler guard's checks on it included.
   */
  tag?: (sql: string) => string;
  /** Settings of this session's own, beside the common ones (lock_timeout, idle_session_timeout), by server version. */
  extra?: (serverVersion: number) => readonly [name: string, value: string][];
}

/** What preparing found. */
export interface Prepared {
  /** This session's backend pid. */
  readonly pid: number;
  readonly settings: AppliedSettings;
  /** Set when a pooler is in the path (it was probed and found not to share backends). */
  readonly pooler: PoolerGuard | null;
  /** The pgpool-II in the path, if one was recognised. */
  readonly pgpool: PgpoolFront | null;
}

/** The error of a refused session: `ERR_PGLEADERLOCK_UNSAFE`. */
/**
 * A session marker token (16 hex digits): from crypto, or drawn from `random` (a seeded
 * source replays a run exactly).
 */
export function markerToken(random: (() => number) | null | undefined): string {
  if (!random) return randomBytes(8).toString('hex');
  const byte = (): string => (Math.floor(random() * 256) + 256).toString(16).slice(1);
  return Array.from({ length: 8 }, byte).join('');
}

export function unsafe(message: string, cause?: unknown): LockError {
  return new LockError(message, { code: 'ERR_PGLEADERLOCK_UNSAFE', cause });
}

export async function prepareSession(conn: Connection, o: PrepareOptions): Promise<Prepared> {
  const [info] = await conn.query<{
    version: number;
    recovery: boolean;
    pid: number;
    server_addr: string | null;
    server_port: number | null;
  }>(PREPARE, [o.token, o.applicationName]);
  if (!info) throw new ConnectionError('the server returned nothing for its version');
  if (info.recovery) {
    throw unsafe(
      'the server is in recovery (a hot standby): an advisory lock there excludes nobody on the primary; connect to the primary',
    );
  }
  // something in the path? then ask whether it is pgpool-II (a direct connection is not
  // asked: PostgreSQL would log the refused SHOW as an error at each connect)
  const remote = conn.remote;
  const inPath =
    conn.announcedPid !== info.pid ||
    (remote !== null &&
      info.server_port !== null &&
      (remote.port !== info.server_port || remote.address !== info.server_addr));
  const pgpool = inPath ? await detectPgpool((sql) => conn.simple(sql)) : null;
  if (pgpool) o.onPgpool?.(pgpool);
  const pooler = o.probe
    ? await PoolerGuard.open(
        {
          key1: o.probe.key1,
          key2: o.probe.key2,
          token: o.token,
          connect: o.probe.connect,
          session: (text, values) => conn.query(o.tag ? o.tag(text) : text, values),
          clock: o.clock,
          timeoutMs: o.queryTimeoutMs,
        },
        info.pid,
        conn.announcedPid,
        o.signal,
      )
    : null;
  try {
    const wanted = [...connectSettings(o.serverReleaseMs, info.version), ...(o.extra?.(info.version) ?? [])];
    const calls = wanted.map((_, i) => `set_config($${2 * i + 1}, $${2 * i + 2}, false)`).join(', ');
    await conn.query(`/* pgleaderlock:configure */ SELECT ${calls}`, wanted.flat());
    const rows = await conn.query<{ name: string; setting: string }>(READ_SETTINGS, [[...READ_BACK]]);
    const read = (name: string): number | null => {
      const row = rows.find((r) => r.name === name);
      return row ? Number(row.setting) : null;
    };
    const idle = rows.find((r) => r.name === 'idle_session_timeout');
    const settings: AppliedSettings = {
      serverVersion: info.version,
      idleSessionTimeoutMs: idle ? parseSettingMs(`${idle.setting}ms`) : null,
      tcpKeepalivesIdleS: read('tcp_keepalives_idle') ?? 0,
      tcpKeepalivesIntervalS: read('tcp_keepalives_interval') ?? 0,
      tcpKeepalivesCount: read('tcp_keepalives_count') ?? 0,
      tcpUserTimeoutMs: read('tcp_user_timeout'),
      clientConnectionCheckIntervalMs: read('client_connection_check_interval'),
    };
    return { pid: info.pid, settings, pooler, pgpool };
  } catch (err) {
    pooler?.close();
    throw err;
  }
}
