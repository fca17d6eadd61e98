/** Options of `PartitionedLeadership`, validated up front (the same rules as LeaderLock's). */

import os from 'node:os';
import { fencingTableOf } from '../core/fencing.js';
import { applicationName } from '../core/identity.js';
import { ExponentialBackoff, type RetryStrategy, resolveRetryStrategy } from '../core/retry.js';
import {
  checkKnownKeys,
  type ResolvedShared,
  resolveShared,
  SHARED_KEYS,
  type SharedOptions,
} from '../core/shared-options.js';
import { checkDuration, checkPositiveDuration, show } from '../core/validate.js';

/** The most partitions one name may have (the assignment is computed on every change). */
export const MAX_PARTITIONS = 4096;

/** Options of `new PartitionedLeadership(options)`. */
export interface PartitionedLeadershipOptions extends SharedOptions {
  /** The name the workers share; each partition's lock is derived from it. */
  name: string;
  /** How many partitions (1 to 4096). Every worker of a name must give the same number. */
  partitions: number;
  /** This worker's id (default host-pid-random); at most 40 characters. */
  id?: string;
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
  fencing?:
    | boolean
    | {
        /** The epochs table (default `pgleaderlock_epochs`), optionally schema-qualified. */
        table?: string;
      };
  /**
   * Paces reconnects after the first (as `LeaderLock`'s `retryStrategy`: the same option,
   * checked the same way). After a lost session the worker reconnects at once; if that
   * fails, each next attempt waits the strategy's delay. Default:
   * an `ExponentialBackoff` from 100 ms doubling to 5 s, each delay drawn from [d/2, d]
   * with `random`. A strategy that returns `null` gives up: the worker stops, and reports
   * `ERR_PGLEADERLOCK_RETRY_EXHAUSTED` to `onError` (or rejects `start()`).
   */
  retryStrategy?: RetryStrategy;
  /**
   * The source of the default reconnect back-off's jitter and of the session marker
   * tokens: numbers in [0, 1) (default `Math.random` for the jitter, `crypto.randomBytes`
   * for the tokens); a seeded source replays a run.
   */
  random?: () => number;
}

/**
 * The default reconnect back-off of a partition worker: 100 ms doubling to 5 s (at most 1 s
 * while the server is away, as every election's default), jittered.
 * Capped lower than `LeaderLock`'s default (100 ms to 30 s), kept from before the two elections
 * shared one option: a worker that is away holds none of its partitions, and its peers
 * move them only after their lease-bound wait, so it returns quickly; the jitter keeps many
 * workers that lost the server together from returning in lockstep.
 */
export function defaultPartitionRetry(random?: () => number): ExponentialBackoff {
  return new ExponentialBackoff({ baseMs: 100, maxMs: 5000, random });
}

const KNOWN = new Set<string>([
  ...SHARED_KEYS,
  'name',
  'partitions',
  'id',
  'drainTimeoutMs',
  'watchSliceMs',
  'fencing',
  'retryStrategy',
  'random',
]);

export interface ResolvedPartitionOptions extends ResolvedShared {
  name: string;
  partitions: number;
  id: string;
  drainTimeoutMs: number;
  watchSliceMs: number;
  /** Quoted table name when fencing is on, else null. */
  fencingTable: string | null;
  /** Paces reconnects after the first (by default 100 ms doubling to 5 s, jittered). */
  retryStrategy: RetryStrategy;
  /** The `random` option (null: the defaults). */
  random: (() => number) | null;
}

function checkRandom(value: unknown): (() => number) | undefined {
  if (value !== undefined && typeof value !== 'function') {
    throw new TypeError(`random must be a function, received ${show(value)}`);
  }
  return value as (() => number) | undefined;
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
  checkKnownKeys('PartitionedLeadership', options, KNOWN);
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
  const shared = resolveShared(options, applicationName(`${id}#p${partitions}`));
  const random = checkRandom(options.random);
  const drainTimeoutMs = checkDuration('drainTimeoutMs', options.drainTimeoutMs ?? 10_000);
  const watchSliceMs = checkPositiveDuration('watchSliceMs', options.watchSliceMs ?? 10_000);
  return {
    ...shared,
    name,
    partitions,
    id,
    drainTimeoutMs,
    watchSliceMs,
    fencingTable: fencingTableOf(options.fencing),
    retryStrategy: resolveRetryStrategy(options.retryStrategy, () => defaultPartitionRetry(random)),
    random: random ?? null,
  };
}
