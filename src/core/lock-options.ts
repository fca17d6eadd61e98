/** The constructor's options, their defaults, and their validation. */
import type pg from 'pg';
import type { Clock } from './clock.js';
import { defaultId } from './connect.js';
import type { Endpoint } from './endpoints.js';
import { fencingTableOf } from './fencing.js';
import { applicationName, checkId } from './identity.js';
import { keysFromName } from './keys.js';
import type { Logger } from './logger.js';
import { ExponentialBackoff, type RetryStrategy, resolveRetryStrategy } from './retry.js';
import { checkKnownKeys, resolveShared } from './shared-options.js';
import { checkBoolean, checkFunction, checkKey, checkPositiveDuration, show } from './validate.js';

/** Options of {@link LeaderLock}. Durations are milliseconds. */
export interface LeaderLockOptions {
  /**
   * PostgreSQL connection string. Several hosts may be listed, as libpq takes them
   * (`postgres://u:p@h1:5432,h2:5433/db`, `host=h1,h2 port=5432,5433`): every connection
   * attempt asks all of them and connects only to a primary (the newest timeline first),
   * and a leader ends its term when another listed host is promoted (docs/safety.md,
   * "Primary failover"). `target_session_attrs` may only be `any`, `read-write` or
   * `primary`. Alternatives: `connect`, or neither (the `PG*` environment variables;
   * `PGHOST`/`PGPORT` may list several hosts). Never logged.
   */
  connectionString?: string;
  /**
   * Extra `pg.Client` settings for the default connection (host, ssl, password, …);
   * `host` and `port` may be comma-separated lists, as in a connection string.
   * `application_name` and keepalive are set by the lock.
   */
  clientConfig?: Omit<pg.ClientConfig, 'application_name' | 'connectionString'>;
  /**
   * Opens a connected `pg.Client` (spec's `connect_fn`). Called once per connection
   * attempt; the lock owns the client it returns and closes it. Overrides
   * `connectionString`. Attach your own `'error'` listener inside if the client may
   * fail before it is returned. A list is one hook per host, as several hosts in
   * `connectionString`: surveyed together, the lock only on a primary.
   */
  connect?: (() => Promise<pg.Client>) | readonly (() => Promise<pg.Client>)[];
  /** First advisory lock key: a 32-bit signed integer. Give `key1` and `key2`, or `name`. */
  key1?: number;
  /** Second advisory lock key: a 32-bit signed integer. */
  key2?: number;
  /** A name to derive the keys from (`LeaderLock.keysFromName`), instead of `key1`/`key2`. */
  name?: string;
  /**
   * This candidate's id: 1 to 128 characters of printable Unicode (no control characters).
   * Shown in `pg_stat_activity.application_name` as `pgleaderlock:<id>` when it is printable
   * ASCII and fits PostgreSQL's 63 bytes, else as `pgleaderlock:<its start>~<hash>`, with the
   * whole id in the tag of each statement (docs/choosing-the-leader.md, "Ids"). Default:
   * host-pid-random.
   */
  id?: string;
  /**
   * Who should lead (docs/choosing-the-leader.md): a leader hands over, cleanly and at once,
   * to a waiting candidate whose priority is strictly higher; equal or lower priorities
   * never take over from a leader. An integer. Default 0.
   */
  priority?: number;
  /** Back-off for acquisition retries and reconnection. Default `new ExponentialBackoff()`. */
  retryStrategy?: RetryStrategy;
  /** Time between health checks while leader. Default 1500 (docs/safety.md "Choosing the timings"). */
  healthIntervalMs?: number;
  /**
   * Flap damping: how long to try to reconnect and re-acquire after a failed health check
   * before `onLost`. `null` (default) disables it: a failed check is a loss at once.
   */
  reconnectGraceMs?: number | null;
  /** Return to FOLLOWER after a loss or `stepDown()` (true, default) or stop (false). */
  autoReacquire?: boolean;
  /** Aborting it shuts the lock down (spec's `shutdown_event`). */
  signal?: AbortSignal;
  /**
   * How a follower tries to acquire. `'wait'` (default): it queues server-side in
   * `pg_advisory_lock`, in slices of `waitSliceMs` (`lock_timeout`), and is granted the
   * lock milliseconds after the leader lets go, at no query cost while it waits.
   * `'poll'`: the specification's `pg_try_advisory_lock` every `retryStrategy` delay.
   * The retry strategy governs connection failures in both modes.
   */
  acquireMode?: 'wait' | 'poll';
  /**
   * Wait mode: the longest single server-side wait (`lock_timeout`). Each slice that ends
   * with the lock still held elsewhere fires `onAcquireFailed` and re-queues at once; it
   * also bounds how long a follower can sit on a connection that died silently. Each
   * waiting follower runs one statement per slice. Each session uses this ±10 % so that
   * followers started together do not re-queue in step. At least 100. Default 30000.
   */
  waitSliceMs?: number;
  /** Deadline for connecting and for every query. Default 2000. */
  queryTimeoutMs?: number;
  /**
   * Target for how long after its last check the server may keep a dead or frozen
   * leader's lock: sets `idle_session_timeout` (once leader), TCP keepalives and
   * `tcp_user_timeout` on the lock's session. The lease behind `isLeader` is derived from
   * what the server applied (docs/safety.md). Default `2 * (healthIntervalMs + queryTimeoutMs)`;
   * must leave a lease longer than `healthIntervalMs + queryTimeoutMs`.
   */
  serverReleaseMs?: number;
  /** How long a graceful close may take before the socket is destroyed. Default 1000. */
  closeTimeoutMs?: number;
  /**
   * Fencing tokens: on each acquisition increment a per-key epoch in a table the lock
   * creates if missing (default `pgleaderlock_epochs`); `term.epoch` carries it and
   * `lock.fenced(client, fn)` commits writes only while it is current. Default off.
   */
  fencing?:
    | boolean
    | {
        /** The epochs table (default `pgleaderlock_epochs`), optionally schema-qualified. */
        table?: string;
      };
  /**
   * The takeover delay: when this lock is granted but cannot prove that the previous holder
   * released cleanly (its leader work had stopped), it holds the lock this long, verifying
   * ownership, before its term opens (`state` reads `'pending'` meanwhile). Set it to how
   * long your leader work takes to stop after its term's signal aborts, plus the detection
   * of a dead session (milliseconds). A clean handover (`stepDown()`, `shutdown()`) skips
   * it. 0 turns the delay off. Default 250 (docs/safety.md, "Takeover delay").
   */
  takeoverDelayMs?: number;
  /**
   * How long one callback may run before it is reported to `onError` (a `CallbackError`
   * with code `ERR_PGLEADERLOCK_CALLBACK_TIMEOUT`) and the callbacks queued after it run
   * without waiting for it. Default 10000.
   */
  callbackTimeoutMs?: number;
  /**
   * A started lock keeps the Node process alive until `shutdown()` (default `false`), as a
   * server socket would, so a worker whose only job is leading does not exit during a
   * database outage. `true`: the lock's timers and sockets do not keep the process alive.
   */
  unref?: boolean;
  /** A pino-compatible logger; a method that throws is ignored. Default: silent unless `NODE_DEBUG=pgleaderlock`. */
  logger?: Logger;
  /** Time source (tests). Default: `performance.now()` and the global timers. */
  clock?: Clock;
  /**
   * Random source, returning [0, 1) (tests: a seeded one replays a run exactly). Used for
   * the session marker token and the wait slice's ±10 %. Default: `crypto.randomBytes` for
   * the token and `Math.random` for the slice.
   */
  random?: () => number;
}

export { DEFAULT_TAKEOVER_DELAY_MS } from './shared-options.js';

/** Options after validation, with defaults applied. */
export interface ResolvedOptions {
  key1: number;
  key2: number;
  id: string;
  applicationName: string;
  priority: number;
  /** The configured hosts (one for a `connect` hook), tried at every connection attempt. */
  endpoints: readonly Endpoint[];
  retryStrategy: RetryStrategy;
  healthIntervalMs: number;
  reconnectGraceMs: number | null;
  autoReacquire: boolean;
  signal: AbortSignal | undefined;
  queryTimeoutMs: number;
  acquireMode: 'wait' | 'poll';
  /** null in poll mode. */
  waitSliceMs: number | null;
  serverReleaseMs: number;
  closeTimeoutMs: number;
  callbackTimeoutMs: number;
  takeoverDelayMs: number;
  unref: boolean;
  /** Quoted table name when fencing is on, else null. */
  fencingTable: string | null;
  logger: Logger;
  clock: Clock;
  /** null: the defaults (crypto for the token, Math.random for the slice). */
  random: (() => number) | null;
}

const KNOWN = new Set<string>([
  'connectionString',
  'clientConfig',
  'connect',
  'key1',
  'key2',
  'name',
  'id',
  'priority',
  'retryStrategy',
  'healthIntervalMs',
  'reconnectGraceMs',
  'autoReacquire',
  'signal',
  'queryTimeoutMs',
  'acquireMode',
  'waitSliceMs',
  'serverReleaseMs',
  'closeTimeoutMs',
  'fencing',
  'callbackTimeoutMs',
  'takeoverDelayMs',
  'unref',
  'logger',
  'clock',
  'random',
]);

/**
 * The shortest wait slice. A slice that ends re-queues the follower at the back of the
 * queue (the order handovers and priorities read) and costs a statement; one shorter than a
 * round trip on a loaded server would end before the server has queued it at all.
 */
export const MIN_WAIT_SLICE_MS = 100;

/** Validate eagerly; errors name the option and echo the value received. */
export function resolveOptions(options: LeaderLockOptions): ResolvedOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`LeaderLock options must be an object, received ${show(options)}`);
  }
  checkKnownKeys('LeaderLock', options, KNOWN);
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

  const priority = options.priority ?? 0;
  if (!Number.isSafeInteger(priority)) {
    throw new RangeError(`priority must be an integer, received ${show(options.priority)}`);
  }

  const retryStrategy = resolveRetryStrategy(options.retryStrategy, () => new ExponentialBackoff());

  const appName = applicationName(id);
  const shared = resolveShared(options, appName);
  const reconnectGraceMs =
    options.reconnectGraceMs === undefined || options.reconnectGraceMs === null
      ? null
      : checkPositiveDuration('reconnectGraceMs', options.reconnectGraceMs);
  const autoReacquire = checkBoolean('autoReacquire', options.autoReacquire ?? true);
  const acquireMode = options.acquireMode ?? 'wait';
  if (acquireMode !== 'wait' && acquireMode !== 'poll') {
    throw new TypeError(`acquireMode must be 'wait' or 'poll', received ${show(options.acquireMode)}`);
  }
  const slice = checkPositiveDuration('waitSliceMs', options.waitSliceMs ?? 30_000);
  if (slice < MIN_WAIT_SLICE_MS) {
    throw new RangeError(
      `waitSliceMs must be at least ${MIN_WAIT_SLICE_MS}, received ${show(options.waitSliceMs)}`,
    );
  }
  const waitSliceMs = acquireMode === 'wait' ? slice : null;

  const fencingTable = fencingTableOf(options.fencing);

  return {
    ...shared,
    key1,
    key2,
    id,
    applicationName: appName,
    priority,
    retryStrategy,
    reconnectGraceMs,
    autoReacquire,
    acquireMode,
    waitSliceMs,
    fencingTable,
    random: options.random === undefined ? null : checkFunction('random', options.random),
  };
}
