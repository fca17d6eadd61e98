/**
 * The safety bound (docs/safety.md). The server frees a dead or frozen leader's lock only
 * once it notices the session is gone: D_srv after the last check was sent. The lock sets
 * session settings that bound D_srv, reads back what the server applied, and derives a
 * lease L < D_srv: `isLeader` is true only while `now < t0 + L`, t0 being when the last
 * successful check was sent. Liveness needs `healthIntervalMs + queryTimeoutMs < L`.
 */
import { LockError } from './errors.js';
import { checkPositiveDuration } from './validate.js';

/** What the server applied on the lock's session (pg_settings, base units). */
export interface AppliedSettings {
  /** server_version_num, e.g. 160004. */
  serverVersion: number;
  /** ms; 0 = disabled; null = not supported (< PG14) or not set yet (set once leader). */
  idleSessionTimeoutMs: number | null;
  /** s; 0 = not a TCP socket (Unix socket) or OS default unknown. */
  tcpKeepalivesIdleS: number;
  /** s between keepalive probes (`tcp_keepalives_interval`); 0 as above. */
  tcpKeepalivesIntervalS: number;
  /** Unanswered keepalive probes before the server drops the connection; 0 as above. */
  tcpKeepalivesCount: number;
  /** ms; 0 = off; null = not supported (< PG12). */
  tcpUserTimeoutMs: number | null;
  /** ms; 0 = off; null = not supported (< PG14). */
  clientConnectionCheckIntervalMs: number | null;
}

/** The figures behind `isLeader`, as applied on the current (or last) lock session. */
export interface Safety {
  /** `isLeader` lasts this long after each successful check was sent. */
  readonly leaseMs: number;
  /** Earliest time after the last check was sent at which the server could free the lock. */
  readonly serverReleaseMs: number;
  /** `serverReleaseMs - leaseMs`: slack for timers and clock granularity. */
  readonly marginMs: number;
  /** Worst case to notice a lock lost silently on a live session: healthIntervalMs + queryTimeoutMs. */
  readonly detectionMs: number;
  /** The server settings these figures come from. */
  readonly settings: AppliedSettings;
}

/** The margin kept between the lease and the server's release: 10 % of it, at most 1 s. */
export function marginFor(serverReleaseMs: number): number {
  return Math.min(1000, Math.ceil(serverReleaseMs / 10));
}

/**
 * Default `healthIntervalMs` and `queryTimeoutMs`, chosen by measurement (bench/defaults-grid.ts,
 * docs/safety.md "Choosing the timings"): no false loss of leadership under any load of the
 * grid, a frozen leader replaced within 10 s, and a query deadline twice the longest stall
 * that cost a term there.
 */
export const DEFAULT_HEALTH_INTERVAL_MS = 1500;
export const DEFAULT_QUERY_TIMEOUT_MS = 2000;

/** Default target for D_srv: twice a health period plus its deadline. */
export function defaultServerReleaseMs(healthIntervalMs: number, queryTimeoutMs: number): number {
  return 2 * (healthIntervalMs + queryTimeoutMs);
}

/**
 * `client_connection_check_interval` (PG14+): while a statement runs (a wait in the lock
 * queue above all, which reads nothing from its socket), the server looks this often whether
 * the client is still there. A waiter whose process died leaves the queue within it instead
 * of inheriting the lock, and so is never named by a handover made later than that
 * (succession.ts: a handover to a candidate killed 100 ms before is refused). The cost: one
 * poll() every 50 ms of a running statement, on the server; an idle session is never woken.
 */
export const DEAD_CLIENT_CHECK_MS = 50;

/** The session settings that make the server release a dead or frozen leader's lock within `targetMs`. */
export function connectSettings(targetMs: number, serverVersion: number): [name: string, value: string][] {
  const idleS = Math.max(1, Math.ceil(targetMs / 2000));
  const intervalS = Math.max(1, Math.ceil(targetMs / 6000));
  const settings: [string, string][] = [
    ['tcp_keepalives_idle', String(idleS)],
    ['tcp_keepalives_interval', String(intervalS)],
    ['tcp_keepalives_count', '3'],
  ];
  if (serverVersion >= 120000) settings.push(['tcp_user_timeout', String(Math.ceil(targetMs))]);
  if (serverVersion >= 140000)
    settings.push(['client_connection_check_interval', String(DEAD_CLIENT_CHECK_MS)]);
  return settings;
}

/** Names read back from pg_settings. */
export const READ_BACK = [
  'idle_session_timeout',
  'tcp_keepalives_idle',
  'tcp_keepalives_interval',
  'tcp_keepalives_count',
  'tcp_user_timeout',
  'client_connection_check_interval',
] as const;

/**
 * The earliest time after the last check was sent at which the server could drop the
 * session, from what it applied. Each mechanism counts from the session's last activity,
 * which is no earlier than that send. Infinity when none is active (the server then keeps
 * the lock until the socket closes: safe, but a frozen leader is never replaced).
 */
export function serverReleaseBound(s: AppliedSettings): number {
  const bounds: number[] = [];
  if (s.idleSessionTimeoutMs) bounds.push(s.idleSessionTimeoutMs);
  if (s.tcpKeepalivesIdleS > 0 && s.tcpKeepalivesIntervalS > 0 && s.tcpKeepalivesCount > 0) {
    bounds.push((s.tcpKeepalivesIdleS + s.tcpKeepalivesIntervalS * s.tcpKeepalivesCount) * 1000);
  }
  // unacknowledged data (e.g. the reply to the last check) is dropped after tcp_user_timeout
  if (s.tcpUserTimeoutMs) bounds.push(s.tcpUserTimeoutMs);
  return bounds.length ? Math.min(...bounds) : Number.POSITIVE_INFINITY;
}

/** Lease and figures for a session, or a LockError if liveness cannot hold under them. */
export function safetyFor(
  settings: AppliedSettings,
  healthIntervalMs: number,
  queryTimeoutMs: number,
): Safety {
  const serverReleaseMs = serverReleaseBound(settings);
  const marginMs = Number.isFinite(serverReleaseMs) ? marginFor(serverReleaseMs) : 0;
  const leaseMs = serverReleaseMs - marginMs;
  const detectionMs = healthIntervalMs + queryTimeoutMs;
  if (detectionMs >= leaseMs) {
    throw new LockError(
      `unsafe session: the server would release the lock ${serverReleaseMs} ms after the last check ` +
        `(${describeSettings(settings)}), leaving a lease of ${leaseMs} ms, but healthIntervalMs + queryTimeoutMs ` +
        `= ${healthIntervalMs} + ${queryTimeoutMs} = ${detectionMs} ms does not fit inside it`,
      { code: 'ERR_PGLEADERLOCK_UNSAFE' },
    );
  }
  return { leaseMs, serverReleaseMs, marginMs, detectionMs, settings };
}

function describeSettings(s: AppliedSettings): string {
  return [
    `idle_session_timeout=${s.idleSessionTimeoutMs ?? 'n/a'}ms`,
    `tcp_keepalives=${s.tcpKeepalivesIdleS}/${s.tcpKeepalivesIntervalS}/${s.tcpKeepalivesCount}s`,
    `tcp_user_timeout=${s.tcpUserTimeoutMs ?? 'n/a'}ms`,
  ].join(', ');
}

/**
 * The timing options every lock and worker takes, checked: `healthIntervalMs` and
 * `queryTimeoutMs` (`DEFAULT_HEALTH_INTERVAL_MS`, `DEFAULT_QUERY_TIMEOUT_MS`) and `serverReleaseMs` (default
 * `defaultServerReleaseMs`), which must leave room for a health period and its deadline.
 */
export function resolveTimings(options: {
  healthIntervalMs?: number | undefined;
  queryTimeoutMs?: number | undefined;
  serverReleaseMs?: number | undefined;
}): { healthIntervalMs: number; queryTimeoutMs: number; serverReleaseMs: number } {
  const healthIntervalMs = checkPositiveDuration(
    'healthIntervalMs',
    options.healthIntervalMs ?? DEFAULT_HEALTH_INTERVAL_MS,
  );
  const queryTimeoutMs = checkPositiveDuration(
    'queryTimeoutMs',
    options.queryTimeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS,
  );
  const serverReleaseMs = checkPositiveDuration(
    'serverReleaseMs',
    options.serverReleaseMs ?? defaultServerReleaseMs(healthIntervalMs, queryTimeoutMs),
  );
  checkTargets(serverReleaseMs, healthIntervalMs, queryTimeoutMs);
  return { healthIntervalMs, queryTimeoutMs, serverReleaseMs };
}

/** Constructor check: the configured target leaves room for a health period and its deadline. */
export function checkTargets(
  serverReleaseMs: number,
  healthIntervalMs: number,
  queryTimeoutMs: number,
): void {
  const leaseMs = serverReleaseMs - marginFor(serverReleaseMs);
  if (healthIntervalMs + queryTimeoutMs >= leaseMs) {
    throw new RangeError(
      `serverReleaseMs ${serverReleaseMs} leaves a lease of ${leaseMs} ms (after a ${marginFor(serverReleaseMs)} ms margin), ` +
        `which must exceed healthIntervalMs + queryTimeoutMs = ${healthIntervalMs} + ${queryTimeoutMs} = ` +
        `${healthIntervalMs + queryTimeoutMs} ms; raise serverReleaseMs or lower the other two`,
    );
  }
}
