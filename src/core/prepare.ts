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
import { ConnectionError, LockError, pathRefusal } from './errors.js';
import { detectPgpool, type PgpoolFront } from './pgpool.js';
import { PoolerGuard } from './pooler.js';
import { type AppliedSettings, connectSettings, READ_BACK } from './safety.js';
import { inline, PREPARE, READ_SETTINGS } from './statements.js';

const CONFIGURE_TAG = '/* pgleaderlock:configure */';
const SETTINGS_TAG = '/* pgleaderlock:settings */';

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

/**
 * A session marker token (16 hex digits): from crypto, or drawn from `random` (a seeded
 * source replays a run exactly).
 */
export function markerToken(random: (() => number) | null | undefined): string {
  if (!random) return randomBytes(8).toString('hex');
  const byte = (): string => (Math.floor(random() * 256) + 256).toString(16).slice(1);
  return Array.from({ length: 8 }, byte).join('');
}

/** The error of a session the path refuses (a shared backend, a hot standby): `ERR_PGLEADERLOCK_UNSAFE`. */
export function unsafe(message: string, cause?: unknown): LockError {
  return pathRefusal(new LockError(message, { code: 'ERR_PGLEADERLOCK_UNSAFE', cause }));
}

/**
 * Server versions at which the settings a session wants are compared: a setting that one of
 * them starts to want is sent with that version as its condition (`sinceVersions`).
 */
const SAMPLED_VERSIONS = [0, 90600, ...Array.from({ length: 21 }, (_, i) => 100000 + i * 10000)];

/** A setting sent once the server's version is at least `since`. */
interface Since {
  readonly name: string;
  readonly value: string;
  readonly since: number;
}

/**
 * The settings `wanted` asks for, each with the first sampled version that wants it; null
 * when these conditions do not give exactly the settings of `wanted(v)` at every sampled
 * version, or `wanted(v)` names a setting twice (then its order would matter, and the
 * settings wait for the version, as before).
 */
export function sinceVersions(
  wanted: (version: number) => readonly (readonly [string, string])[],
): Since[] | null {
  const out: Since[] = [];
  for (const v of SAMPLED_VERSIONS) {
    for (const [name, value] of wanted(v)) {
      if (!out.some((x) => x.name === name && x.value === value)) out.push({ name, value, since: v });
    }
  }
  const key = (pairs: readonly (readonly [string, string])[]): string =>
    JSON.stringify(pairs.map(([n, v]) => `${n}=${v}`).sort());
  const exact = SAMPLED_VERSIONS.every((v) => {
    const w = wanted(v);
    const sent = out.filter((x) => x.since <= v).map((x) => [x.name, x.value] as const);
    return new Set(w.map(([n]) => n)).size === w.length && key(sent) === key(w);
  });
  return exact ? out : null;
}

/**
 * The set-up in one round trip (a simple query of three statements): PREPARE, then the
 * settings applied only where nothing stands in the path (the conditions `prepareSession`
 * checks after PREPARE: the backend's pid is the one announced, the server's address and
 * port the ones this socket reached, not a hot standby), then the read-back. Anywhere else
 * `applied` is false and nothing is set: the settings come after the pgpool check and the
 * pooler probe, as before. Null when the settings cannot be written before the version is
 * known (`sinceVersions`) or the announced pid is unknown.
 */
export function setupBatch(
  o: Pick<PrepareOptions, 'token' | 'applicationName' | 'serverReleaseMs' | 'extra'>,
  announcedPid: number | null,
  remote: { address: string; port: number } | null,
): string | null {
  if (announcedPid === null) return null;
  const wanted = (v: number): [string, string][] => [
    ...connectSettings(o.serverReleaseMs, v),
    ...(o.extra?.(v) ?? []),
  ];
  const settings = sinceVersions(wanted);
  if (settings === null) return null;
  const direct = [
    `pg_backend_pid() = ${inline('$1', [announcedPid])}`,
    'NOT pg_is_in_recovery()',
    ...(remote
      ? [
          inline('coalesce(inet_server_port() = $1 AND host(inet_server_addr()) = $2, true)', [
            remote.port,
            remote.address,
          ]),
        ]
      : []),
  ].join(' AND ');
  const calls = settings.map(
    (x, i) =>
      `CASE WHEN c.direct${x.since > 0 ? ` AND c.v >= ${x.since}` : ''} THEN ${inline('set_config($1, $2, false)', [x.name, x.value])} END AS s${i}`,
  );
  const names = READ_BACK.map((n) => inline('$1', [n])).join(', ');
  return [
    inline(PREPARE, [o.token, o.applicationName]),
    `${CONFIGURE_TAG} SELECT ${['c.direct AS applied', ...calls].join(', ')}
  FROM (SELECT ${direct} AS direct, current_setting('server_version_num')::int AS v) c`,
    `${SETTINGS_TAG} SELECT name, setting FROM pg_settings WHERE name IN (${names})`,
  ].join(';\n');
}

type Info = {
  version: number;
  recovery: boolean;
  pid: number;
  server_addr: string | null;
  server_port: number | null;
};
type SettingRow = { name: string; setting: string };

/** PREPARE, with the settings and their read-back in the same round trip where that is possible (`setupBatch`). */
async function firstRoundTrip(
  conn: Connection,
  o: PrepareOptions,
): Promise<[Info | undefined, SettingRow[] | null]> {
  const batch = setupBatch(o, conn.announcedPid, conn.remote);
  if (batch === null) {
    const [info] = await conn.query<Info>(PREPARE, [o.token, o.applicationName]);
    return [info, null];
  }
  const [prepared, configured, read] = await conn.batch(batch);
  const applied = configured?.[0]?.applied === true;
  return [prepared?.[0] as Info | undefined, applied ? ((read ?? []) as SettingRow[]) : null];
}

export async function prepareSession(conn: Connection, o: PrepareOptions): Promise<Prepared> {
  const [info, early] = await firstRoundTrip(conn, o);
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
    const rows = early ?? (await configure(conn, o, info.version));
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

/** The settings applied and read back once the version is known (two round trips: a path with something in it). */
async function configure(conn: Connection, o: PrepareOptions, version: number): Promise<SettingRow[]> {
  const wanted = [...connectSettings(o.serverReleaseMs, version), ...(o.extra?.(version) ?? [])];
  const calls = wanted.map((_, i) => `set_config($${2 * i + 1}, $${2 * i + 2}, false)`).join(', ');
  await conn.query(`${CONFIGURE_TAG} SELECT ${calls}`, wanted.flat());
  return conn.query<SettingRow>(READ_SETTINGS, [[...READ_BACK]]);
}
