/** The options of {@link LeaderWatch}, their defaults, and their validation (as LeaderLock's). */
import type pg from 'pg';
import type { Clock } from '../core/clock.js';
import { defaultId } from '../core/connect.js';
import type { Endpoint } from '../core/endpoints.js';
import { applicationName, checkId } from '../core/identity.js';
import { keysFromName } from '../core/keys.js';
import type { Logger } from '../core/logger.js';
import { ExponentialBackoff, type RetryStrategy, resolveRetryStrategy } from '../core/retry.js';
import { checkKnownKeys, resolveShared } from '../core/shared-options.js';
import { checkKey, checkPositiveDuration, MAX_TIMER_MS, show } from '../core/validate.js';

/** Options of {@link LeaderWatch}. Durations are milliseconds. Each means what it means for `LeaderLock`. */
export interface LeaderWatchOptions {
  /**
   * PostgreSQL connection string. Several hosts may be listed, as for `LeaderLock`: the
   * watch connects to the primary among them (the newest timeline first). Alternatives:
   * `connect`, or neither (the `PG*` environment variables). Never logged.
   */
  connectionString?: string;
  /** Extra `pg.Client` settings for the default connection (not with `connect`). */
  clientConfig?: Omit<pg.ClientConfig, 'application_name' | 'connectionString'>;
  /** Opens a connected `pg.Client`, which the watch then owns; called once per connection attempt. */
  connect?: (() => Promise<pg.Client>) | readonly (() => Promise<pg.Client>)[];
  /** First advisory lock key of the watched lock: a 32-bit signed integer. Give `key1` and `key2`, or `name`. */
  key1?: number;
  /** Second advisory lock key: a 32-bit signed integer. */
  key2?: number;
  /** The watched lock's name (`LeaderLock.keysFromName`), instead of `key1`/`key2`. */
  name?: string;
  /**
   * This watch's id, as for `LeaderLock` (1 to 128 characters of printable Unicode), shown in
   * `pg_stat_activity.application_name` as `pgleaderlock-watch:<id>` when that fits, else
   * hashed as a lock's id is. Default: host-pid-random.
   */
  id?: string;
  /**
   * How often the watch reads the lock's holder from `pg_locks` again (one statement,
   * which also proves its connection alive). A leader that dies without a successor sends
   * nothing: it is reported gone at the next read, so within this interval (plus the
   * statement's time). Default 5000.
   */
  healthIntervalMs?: number;
  /** Deadline for connecting and for each statement. Default 5000. */
  queryTimeoutMs?: number;
  /** How long a graceful close may take before the socket is destroyed. Default 1000. */
  closeTimeoutMs?: number;
  /** How long one `onChange`/`onError` callback may run before it is reported to `onError` as hung. Default 10000. */
  callbackTimeoutMs?: number;
  /**
   * Back-off between reconnection attempts after the watch's connection is lost (the first
   * attempt is immediate). `null` from the strategy stops the watch. Default
   * `new ExponentialBackoff()` (100 ms doubling to 30 s, at most 1 s while the server is away).
   */
  retryStrategy?: RetryStrategy;
  /**
   * A started watch keeps the Node process alive until `close()` (default `false`), as a
   * `LeaderLock` does. `true`: its timers and socket do not keep the process alive.
   */
  unref?: boolean;
  /** A pino-compatible logger; a method that throws is ignored. Default: silent unless `NODE_DEBUG=pgleaderlock`. */
  logger?: Logger;
  /** Time source (tests). Default: `performance.now()` and the global timers. */
  clock?: Clock;
  /** Aborting it closes the watch. */
  signal?: AbortSignal;
}

export interface ResolvedWatchOptions {
  key1: number;
  key2: number;
  id: string;
  applicationName: string;
  endpoints: readonly Endpoint[];
  healthIntervalMs: number;
  queryTimeoutMs: number;
  closeTimeoutMs: number;
  callbackTimeoutMs: number;
  retryStrategy: RetryStrategy;
  unref: boolean;
  logger: Logger;
  clock: Clock;
  signal: AbortSignal | undefined;
}

const HALF_MAX_MS = Math.floor(MAX_TIMER_MS / 2);

const KNOWN = new Set<string>([
  'connectionString',
  'clientConfig',
  'connect',
  'key1',
  'key2',
  'name',
  'id',
  'healthIntervalMs',
  'queryTimeoutMs',
  'closeTimeoutMs',
  'callbackTimeoutMs',
  'retryStrategy',
  'unref',
  'logger',
  'clock',
  'signal',
]);

/** `pgleaderlock-watch:<id>`, or its hashed form for an id that name cannot carry (core/identity.ts). */
export function watchApplicationName(id: string): string {
  return applicationName(id, 'pgleaderlock-watch:');
}

/** Validate eagerly; errors name the option and echo the value received. */
export function resolveWatchOptions(options: LeaderWatchOptions): ResolvedWatchOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`LeaderWatch options must be an object, received ${show(options)}`);
  }
  checkKnownKeys('LeaderWatch', options, KNOWN);
  let key1: number;
  let key2: number;
  if (options.name !== undefined) {
    if (options.key1 !== undefined || options.key2 !== undefined) {
      throw new TypeError('pass either name or key1 and key2, not both');
    }
    [key1, key2] = keysFromName(options.name);
  } else {
    key1 = checkKey('key1', options.key1);
    key2 = checkKey('key2', options.key2);
  }
  const id = checkId('id', options.id ?? defaultId());
  const retryStrategy = resolveRetryStrategy(options.retryStrategy, () => new ExponentialBackoff());
  const healthIntervalMs = checkPositiveDuration('healthIntervalMs', options.healthIntervalMs ?? 5000);
  const queryTimeoutMs = checkPositiveDuration('queryTimeoutMs', options.queryTimeoutMs ?? 5000);
  const applicationName = watchApplicationName(id);
  // the shared checks (connection, closing, callbacks, unref, logger, clock, signal); the
  // watch holds no lock, so no server release target: the longest one passes the check
  if (healthIntervalMs + queryTimeoutMs > HALF_MAX_MS) {
    throw new RangeError(
      `healthIntervalMs + queryTimeoutMs must be at most ${HALF_MAX_MS} ms, received ${healthIntervalMs} + ${queryTimeoutMs}`,
    );
  }
  const shared = resolveShared(
    { ...options, healthIntervalMs, queryTimeoutMs, serverReleaseMs: MAX_TIMER_MS },
    applicationName,
  );
  return {
    key1,
    key2,
    id,
    applicationName,
    endpoints: shared.endpoints,
    healthIntervalMs,
    queryTimeoutMs,
    closeTimeoutMs: shared.closeTimeoutMs,
    callbackTimeoutMs: shared.callbackTimeoutMs,
    retryStrategy,
    unref: shared.unref,
    logger: shared.logger,
    clock: shared.clock,
    signal: shared.signal,
  };
}
