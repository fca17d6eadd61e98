/** Options of `PartitionedLeadership`, validated up front (the same rules as LeaderLock's). */

import os from 'node:os';
import type pg from 'pg';
import { applicationName, type ConnectFn } from '../connect.js';
import { fencingTableOf } from '../fencing.js';
import { checkLogger, defaultLogger, guardLogger, type Logger } from '../logger.js';
import { type Endpoint, endpointsOf } from '../primary.js';
import { resolveTimings } from '../safety.js';
import { checkDuration, checkPositiveDuration, show } from '../validate.js';

/** The most partitions one name may have (the assignment is computed on every change). */
export const MAX_PARTITIONS = 4096;

export interface PartitionedLeadershipOptions {
  /** The name the workers share; each partition's lock is derived from it. */
  name: string;
  /** How many partitions (1 to 4096). Every worker of a name must give the same number. */
  partitions: number;
  /** libpq-style connection string; several hosts allowed (the primary is used). */
  connectionString?: string;
  /** pg client options (not with `connect`). */
  clientConfig?: Omit<pg.ClientConfig, 'connectionString'>;
  /** Opens a connected client; called for each of the worker's two sessions. */
  connect?: ConnectFn;
  /** This worker's id (default host-pid-random); at most 40 characters. */
  id?: string;
  /** How often ownership is checked and the lease renewed (default 5000). */
  healthIntervalMs?: number;
  /** Deadline of each statement (default 5000). */
  queryTimeoutMs?: number;
  /** Bound on how long the server keeps a frozen worker's partitions (default 2 × (health + query)). */
  serverReleaseMs?: number;
  /**
   * A partition whose previous owner did not hand it over cleanly (it died) is held this
   * long before its term opens, so the previous owner's work has stopped (default 250).
   */
  takeoverDelayMs?: number;
  /** How long a revoked partition's `runForEach` run may take to return before its lock is released anyway (default 10000). */
  drainTimeoutMs?: number;
  /** The ring watch's wait slice (`lock_timeout`, default 10000): about one statement per slice. */
  watchSliceMs?: number;
  /**
   * Fencing epochs per partition: each take of a partition increments its epoch in a table
   * created if missing (default `pgleaderlock_epochs`, shared with LeaderLock's fencing);
   * `term.epoch` carries it and `fenced(client, term, fn)` commits writes only while it is
   * current. Default off.
   */
  fencing?: boolean | { table?: string };
  logger?: Logger;
  /** Aborting it shuts the worker down. */
  signal?: AbortSignal;
}

export interface ResolvedPartitionOptions {
  name: string;
  partitions: number;
  id: string;
  endpoints: readonly Endpoint[];
  healthIntervalMs: number;
  queryTimeoutMs: number;
  serverReleaseMs: number;
  takeoverDelayMs: number;
  drainTimeoutMs: number;
  watchSliceMs: number;
  /** Quoted table name when fencing is on, else null. */
  fencingTable: string | null;
  logger: Logger;
  signal: AbortSignal | null;
}

/** The default id: host (ASCII, at most 20 characters), pid and a random suffix. */
function shortId(): string {
  const host =
    os
      .hostname()
      .replace(/[^A-Za-z0-9.-]/g, '')
      .slice(0, 20) || 'host';
  return `${host}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

export function resolvePartitionOptions(options: PartitionedLeadershipOptions): ResolvedPartitionOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`PartitionedLeadership options must be an object, received ${show(options)}`);
  }
  const { name, partitions } = options;
  if (typeof name !== 'string' || name.length === 0) {
    throw new TypeError(`name must be a non-empty string, received ${show(name)}`);
  }
  if (
    typeof partitions !== 'number' ||
    !Number.isInteger(partitions) ||
    partitions < 1 ||
    partitions > MAX_PARTITIONS
  ) {
    throw new RangeError(
      `partitions must be an integer from 1 to ${MAX_PARTITIONS}, received ${show(partitions)}`,
    );
  }
  const id = options.id ?? shortId();
  // printable ASCII: PostgreSQL may rewrite other bytes of application_name, where the other
  // workers read the id back; '#' and ':' delimit it there and in notices
  if (typeof id !== 'string' || !/^[\x20-\x7e]{1,40}$/.test(id) || /[#:]/.test(id)) {
    throw new TypeError(
      `id must be 1 to 40 printable ASCII characters without '#' or ':', received ${show(id)}`,
    );
  }
  const { healthIntervalMs, queryTimeoutMs, serverReleaseMs } = resolveTimings(options);
  checkLogger(options.logger);
  const takeoverDelayMs = checkDuration('takeoverDelayMs', options.takeoverDelayMs ?? 250);
  const drainTimeoutMs = checkDuration('drainTimeoutMs', options.drainTimeoutMs ?? 10_000);
  const watchSliceMs = checkPositiveDuration('watchSliceMs', options.watchSliceMs ?? 10_000);
  if (options.connect !== undefined && options.clientConfig !== undefined) {
    throw new TypeError('give connect or clientConfig, not both');
  }
  if (options.connect !== undefined && typeof options.connect !== 'function') {
    throw new TypeError(`connect must be a function, received ${show(options.connect)}`);
  }
  if (options.signal !== undefined && !(options.signal instanceof AbortSignal)) {
    throw new TypeError(`signal must be an AbortSignal, received ${show(options.signal)}`);
  }
  const endpointsFor = (appName: string): Endpoint[] =>
    options.connect
      ? [{ label: 'connect()', connect: options.connect }]
      : endpointsOf(options, appName, queryTimeoutMs);
  return {
    name,
    partitions,
    id,
    endpoints: endpointsFor(applicationName(`${id}#p${partitions}`)),
    healthIntervalMs,
    queryTimeoutMs,
    serverReleaseMs,
    takeoverDelayMs,
    drainTimeoutMs,
    watchSliceMs,
    fencingTable: fencingTableOf(options.fencing),
    logger: guardLogger(options.logger ?? defaultLogger()),
    signal: options.signal ?? null,
  };
}
