/**
 * The options both elections take (`LeaderLock`, `PartitionedLeadership`): where to connect,
 * the timings, callbacks' deadline, closing, `unref`, logger, clock and signal. One set of
 * names, one meaning, one validation; each election adds its own on top.
 */
import type pg from 'pg';
import { type Clock, isClock, systemClock } from './clock.js';
import { type ConnectFn, unrefClient } from './connect.js';
import { isClient } from './connection.js';
import { type Endpoint, endpointsOf } from './endpoints.js';
import { checkLogger, defaultLogger, guardLogger, type Logger } from './logger.js';
import { resolveTimings } from './safety.js';
import { checkBoolean, checkDuration, checkFunction, checkPositiveDuration, show } from './validate.js';

/** Default `takeoverDelayMs` (docs/safety.md, "Takeover delay"). */
export const DEFAULT_TAKEOVER_DELAY_MS = 250;

/** Options shared by both elections. Durations are milliseconds. */
export interface SharedOptions {
  /**
   * PostgreSQL connection string. Several hosts may be listed, as libpq takes them
   * (`postgres://u:p@h1:5432,h2:5433/db`, `host=h1,h2 port=5432,5433`): every connection
   * attempt asks all of them and connects only to a primary. Alternatives: `connect`, or
   * neither (the `PG*` environment variables). Never logged.
   */
  connectionString?: string;
  /** Options for the default `pg.Client` (not with `connect`). */
  clientConfig?: Omit<pg.ClientConfig, 'connectionString'>;
  /**
   * Opens a connected `pg.Client`, which the library then owns; called for every connection.
   * A list is one hook per host, surveyed as the hosts of a connection string are.
   */
  connect?: ConnectFn | readonly ConnectFn[];
  /** How often ownership is checked and the lease renewed (default 1500). */
  healthIntervalMs?: number;
  /** Deadline of connecting and of each statement (default 2000). */
  queryTimeoutMs?: number;
  /** Bound on how long the server keeps a frozen process's locks (default 2 × (health + query)). */
  serverReleaseMs?: number;
  /** How long a graceful close may take before the socket is destroyed (default 1000). */
  closeTimeoutMs?: number;
  /** How long one callback may run before it is reported to `onError` as hung (default 10000). */
  callbackTimeoutMs?: number;
  /**
   * A term whose previous holder did not hand over cleanly (it died) opens this long after
   * the grant, so the previous holder's work has stopped (default 250).
   */
  takeoverDelayMs?: number;
  /** Let the library's sockets and timers not keep the process alive (default false). */
  unref?: boolean;
  /** A pino-compatible logger; a method that throws is ignored. Default: `NODE_DEBUG=pgleaderlock`. */
  logger?: Logger;
  /** Time source (default `performance.now()` and the global timers). */
  clock?: Clock;
  /** Aborting it shuts down. */
  signal?: AbortSignal;
}

export const SHARED_KEYS: readonly (keyof SharedOptions)[] = [
  'connectionString',
  'clientConfig',
  'connect',
  'healthIntervalMs',
  'queryTimeoutMs',
  'serverReleaseMs',
  'closeTimeoutMs',
  'callbackTimeoutMs',
  'takeoverDelayMs',
  'unref',
  'logger',
  'clock',
  'signal',
];

export interface ResolvedShared {
  /** The configured hosts (one for a `connect` hook), tried at every connection attempt. */
  endpoints: readonly Endpoint[];
  healthIntervalMs: number;
  queryTimeoutMs: number;
  serverReleaseMs: number;
  closeTimeoutMs: number;
  callbackTimeoutMs: number;
  takeoverDelayMs: number;
  unref: boolean;
  logger: Logger;
  clock: Clock;
  signal: AbortSignal | undefined;
}

/** An options object with no key outside `known`: a misspelt option is an error, not a default. */
export function checkKnownKeys(what: string, options: object, known: ReadonlySet<string>): void {
  for (const key of Object.keys(options)) {
    if (!known.has(key)) throw new TypeError(`unknown ${what} option ${JSON.stringify(key)}`);
  }
}

/** Validate the shared options; `appName` is the default client's application_name. */
export function resolveShared(options: SharedOptions, appName: string): ResolvedShared {
  const { healthIntervalMs, queryTimeoutMs, serverReleaseMs } = resolveTimings(options);
  checkLogger(options.logger);
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw new TypeError(`signal must be an AbortSignal, received ${show(options.signal)}`);
  }
  if (options.clock !== undefined && !isClock(options.clock)) {
    throw new TypeError(
      `clock must have now, setTimeout and clearTimeout methods, received ${show(options.clock)}`,
    );
  }
  if (options.connectionString !== undefined && typeof options.connectionString !== 'string') {
    throw new TypeError(`connectionString must be a string, received ${typeof options.connectionString}`);
  }
  if (options.connect !== undefined && options.connectionString !== undefined) {
    throw new TypeError('pass either connect or connectionString, not both');
  }
  if (options.connect !== undefined && options.clientConfig !== undefined) {
    throw new TypeError(
      'pass either connect or clientConfig, not both: clientConfig configures the default connection',
    );
  }
  if (
    options.clientConfig !== undefined &&
    (typeof options.clientConfig !== 'object' || options.clientConfig === null)
  ) {
    throw new TypeError(`clientConfig must be an object, received ${show(options.clientConfig)}`);
  }
  const closeTimeoutMs = checkDuration('closeTimeoutMs', options.closeTimeoutMs ?? 1000);
  const callbackTimeoutMs = checkPositiveDuration('callbackTimeoutMs', options.callbackTimeoutMs ?? 10_000);
  const takeoverDelayMs = checkDuration(
    'takeoverDelayMs',
    options.takeoverDelayMs ?? DEFAULT_TAKEOVER_DELAY_MS,
  );
  const unref = checkBoolean('unref', options.unref ?? false);
  const configured: Endpoint[] =
    options.connect !== undefined
      ? hookEndpoints(options.connect)
      : endpointsOf(options, appName, queryTimeoutMs);
  // every connection opened (sessions, survey, probes, standby and peer watches) obeys `unref`
  const endpoints = unref ? configured.map((e) => ({ ...e, connect: unrefConnect(e.connect) })) : configured;
  return {
    endpoints,
    healthIntervalMs,
    queryTimeoutMs,
    serverReleaseMs,
    closeTimeoutMs,
    callbackTimeoutMs,
    takeoverDelayMs,
    unref,
    logger: options.logger ? guardLogger(options.logger) : defaultLogger(),
    clock: options.clock ?? systemClock,
    signal: options.signal,
  };
}

/**
 * The endpoints of a `connect` option: one hook, or a list of hooks, one per host (as the
 * hosts of a connection string: surveyed together, the lock only on a primary, the others
 * watched for a promotion).
 */
export function hookEndpoints(connect: ConnectFn | readonly ConnectFn[]): Endpoint[] {
  if (typeof connect === 'function') return [{ label: 'connect()', connect: hookConnect(connect) }];
  if (!Array.isArray(connect) || connect.length === 0) {
    throw new TypeError(
      `connect must be a function or a non-empty array of functions, received ${show(connect)}`,
    );
  }
  return connect.map((fn: unknown, i) => ({
    label: `connect[${i}]`,
    connect: hookConnect(checkFunction(`connect[${i}]`, fn as ConnectFn)),
  }));
}

/**
 * The `connect` hook, called as the user wrote it: with no argument. The client it returns
 * gets a placeholder 'error' listener, as the default connection's does, until a session
 * attaches its own: a survey's client waits for the other hosts' answers (up to
 * SURVEY_GRACE_MS) with none, and a FATAL then (a shutdown) would crash the process.
 */
export function hookConnect(hook: ConnectFn): Endpoint['connect'] {
  return async () => {
    const client: unknown = await hook();
    if (isClient(client) && typeof client.listenerCount === 'function' && client.listenerCount('error') === 0)
      client.on('error', () => {});
    return client as pg.Client;
  };
}

function unrefConnect(connect: Endpoint['connect']): Endpoint['connect'] {
  return async (applicationName, signal) => {
    const client = await connect(applicationName, signal);
    if (isClient(client)) unrefClient(client);
    return client;
  };
}
