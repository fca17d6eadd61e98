/**
 * `PartitionedLeadership`: one owner per partition among many workers, two connections per
 * worker whatever the partition count. Design and safety argument: docs/partitions.md.
 *
 * Each worker holds, on its member session (member-session.ts), a member lock and the locks of the
 * partitions it owns; membership is read from `pg_locks`. A reconcile (ownership.ts: on
 * start, on every membership notice, and every `healthIntervalMs`) reads the members and
 * this session's locks in one statement, renews the lease, computes the assignment
 * (assign.ts), hands back partitions no longer ours (their runs drained first), and takes
 * the free ones that are. Deaths are seen by the ring watch (watch.ts) within
 * milliseconds. This module is the public API and wires the pieces together; the run, its
 * sessions and reconnecting after a session ends are lifecycle.ts.
 */
import type pg from 'pg';
import { Callbacks, type ListenerOptions } from '../core/callbacks.js';
import { Lease } from '../core/lease.js';
import type { LeaderWorkHandle } from '../core/runner.js';
import { rejecting, timeoutOf } from '../core/validate.js';
import { hungCallback } from '../core/vitals.js';
import { Balance } from './balance.js';
import type { PartitionedElection } from './election.js';
import { fencedPartitionWrite } from './epochs.js';
import {
  assessPartitionHealth,
  type PartitionHealth,
  type PartitionStats,
  quietBoundMs,
  stuckRun,
} from './health.js';
import { inspectPartitions, type PartitionInspection, type PartitionInspectOptions } from './inspect.js';
import { WorkerLifecycle } from './lifecycle.js';
import {
  type PartitionedLeadershipOptions,
  type ResolvedPartitionOptions,
  resolvePartitionOptions,
} from './options.js';
import { Ownership } from './ownership.js';
import type { PartitionWork } from './runs.js';
import { keysOf } from './sql.js';
import { type PartitionCallbackMap, type PartitionTerm, Terms } from './terms.js';

export { PartitionMismatchError } from './errors.js';
export type { PartitionHealth, PartitionStats } from './health.js';
export type { PartitionInspection, PartitionInspectOptions } from './inspect.js';
export type { PartitionWork } from './runs.js';
export type { PartitionTerm, RevokeReason } from './terms.js';

export class PartitionedLeadership implements PartitionedElection {
  private readonly o: ResolvedPartitionOptions;
  private readonly keys: ReturnType<typeof keysOf>;
  private readonly terms: Terms;
  private readonly callbacks: Callbacks<PartitionCallbackMap>;
  private readonly lease: Lease;
  private readonly ownership: Ownership;
  private readonly balance: Balance;
  /** The run from start() to the end of its loop, its sessions and phase (lifecycle.ts). */
  private readonly life: WorkerLifecycle;

  constructor(options: PartitionedLeadershipOptions) {
    this.o = resolvePartitionOptions(options);
    this.keys = keysOf(this.o.name);
    this.callbacks = new Callbacks<PartitionCallbackMap>(
      this.o.logger,
      this.o.clock,
      this.o.callbackTimeoutMs,
      `partitioned ${JSON.stringify(this.o.name)}`,
    );
    this.lease = new Lease(this.o.clock, () => this.life.lapsed());
    this.terms = new Terms(
      { name: this.o.name, id: this.o.id },
      this.o.drainTimeoutMs,
      this.o.logger,
      this.o.clock,
      this.callbacks,
      this.lease,
      () => this.balance.check(),
    );
    this.ownership = new Ownership(
      this.o,
      this.keys,
      this.terms,
      this.lease,
      (err) => this.terms.error(err),
      () => this.life.splitDelayMs(),
    );
    this.balance = new Balance(
      this.o.clock,
      () => this.ownership.balanced(this.owned),
      () => this.callbacks.drained(),
      () => this.callbacks.inCallback(),
    );
    this.life = new WorkerLifecycle({
      o: this.o,
      keys: this.keys,
      terms: this.terms,
      ownership: this.ownership,
      lease: this.lease,
      balance: this.balance,
    });
    this.o.signal?.addEventListener('abort', () => void this.shutdown(), { once: true });
  }

  /** The members of `name` and the owner of each partition, without joining (informational). */
  static inspect(options: PartitionInspectOptions): Promise<PartitionInspection> {
    return inspectPartitions(options);
  }

  get id(): string {
    return this.o.id;
  }

  /** The name the workers share. */
  get name(): string {
    return this.o.name;
  }

  /** The partitions this worker owns now (terms open, lease current). */
  get owned(): ReadonlySet<number> {
    return this.terms.owned();
  }

  /**
   * When the lease behind `owned` ends (or ended), on the worker's clock; null before the
   * first ownership check. Each check (every `healthIntervalMs`) pushes it forward; past it
   * `owned` is empty and every term ends. Kept after a loss or a shutdown, as
   * `LeaderLock.leaseExpiresAt` is.
   */
  get leaseExpiresAt(): number | null {
    return this.lease.until ?? this.lease.last;
  }

  /** The member ids seen at the last reconcile, sorted. */
  get memberIds(): readonly string[] {
    return this.ownership.members.map((m) => m.id);
  }

  /** Counters and sizes of this worker (`LockMetrics` reads them). */
  stats(): PartitionStats {
    return {
      owned: this.owned.size,
      members: this.ownership.members.length,
      ...this.terms.counts(),
      reconciles: this.ownership.reconciles,
      statements: this.life.statements,
    };
  }

  /**
   * For liveness and readiness probes (docs/observability.md, "Probes"). `live` is false
   * when the worker is wedged (its loop stopped making progress, a callback has not
   * returned past `callbackTimeoutMs`, the event loop was blocked for 2 s or more); `ready`
   * is true for a live worker that is a member on an open member session, whether it
   * owns partitions or not. `reasons` says why either is false.
   */
  health(): PartitionHealth {
    const { life } = this;
    const hung = this.callbacks.hung();
    const stuck = this.terms.stuckRun(this.o.callbackTimeoutMs);
    return assessPartitionHealth({
      started: life.started,
      phase: life.workerPhase,
      lastError: life.lastFailure,
      hung: [
        ...(hung ? [hungCallback(hung, this.o.callbackTimeoutMs)] : []),
        ...(stuck ? [stuckRun(stuck)] : []),
      ],
      loopBlockedMs: life.vitals?.blockedMs ?? null,
      quietMs: life.running ? (life.vitals?.quietMs ?? null) : null,
      quietBoundMs: quietBoundMs(this.o),
      owned: this.owned.size,
      members: this.ownership.members.length,
      watchDown: life.watchDown,
    });
  }

  /**
   * Run `fn` for each partition while owned; its term's signal aborts when the partition is
   * revoked or lost, or the handle is stopped. One run at a time per partition and
   * registration: a partition's next run starts only after the previous one has settled.
   * The handle is `runWhileLeader`'s: `stop()` aborts the current runs and resolves when
   * they have settled.
   */
  runForEach(fn: PartitionWork): LeaderWorkHandle {
    if (typeof fn !== 'function') throw new TypeError(`runForEach needs a function, received ${typeof fn}`);
    return this.terms.addWork(fn);
  }

  /**
   * Fencing (`fencing: true`): run `fn(client)` in a transaction on `client` (a connection
   * of yours to the same database, not the worker's, not inside a transaction already) that
   * commits only if `term` is still this partition's current epoch. The epoch row stays
   * share-locked until commit, so the next owner's bump waits for the write; a write from a
   * superseded term is refused with a `FencedError` (docs/partitions.md, "Fencing").
   */
  fenced<T>(
    client: pg.ClientBase,
    term: PartitionTerm,
    fn: (client: pg.ClientBase) => Promise<T>,
  ): Promise<T> {
    return fencedPartitionWrite(
      { table: this.o.fencingTable, key: this.keys.partitions, terms: this.terms, owned: this.owned },
      client,
      term,
      fn,
    );
  }

  /**
   * Called when a partition's term opens. Callbacks run one at a time, in order, each under
   * `callbackTimeoutMs`: one that has not settled by then is reported to `onError` (and
   * makes `health()` not live while it hangs); the worker never waits for them.
   */
  onAssigned(
    fn: PartitionCallbackMap['assigned'],
    options?: ListenerOptions,
  ): PartitionCallbackMap['assigned'] {
    return this.callbacks.add('assigned', fn, options);
  }

  /** Called when a partition's term ends (its signal has aborted), with the reason. */
  onRevoked(fn: PartitionCallbackMap['revoked'], options?: ListenerOptions): PartitionCallbackMap['revoked'] {
    return this.callbacks.add('revoked', fn, options);
  }

  /** Called with every error the worker meets (it never throws them at you). */
  onError(fn: PartitionCallbackMap['error'], options?: ListenerOptions): PartitionCallbackMap['error'] {
    return this.callbacks.add('error', fn, options);
  }

  /**
   * Join. Resolves once this worker is a member (its first reconcile done); rejects if the
   * workers already running this name have another partition count, or with
   * `ERR_PGLEADERLOCK_UNSAFE` behind a pooler that shares backends. Connection failures (and
   * a pooler check that could not be completed) are reported to onError and retried.
   */
  start(): Promise<void> {
    return this.life.start();
  }

  /**
   * Resolves true once this worker owns exactly its share for the current membership, and
   * the callbacks of the terms it opened have run (or passed `callbackTimeoutMs`); false
   * after `timeoutMs`, or when the worker stops.
   */
  waitForBalance(options: { timeoutMs?: number } = {}): Promise<boolean> {
    return rejecting(() => this.balance.wait(timeoutOf('waitForBalance', options) ?? 30_000));
  }

  /** Hand every partition back (runs drained), leave, close both sessions. Idempotent. */
  shutdown(options: { timeoutMs?: number } = {}): Promise<void> {
    return rejecting(() => this.life.stop(timeoutOf('shutdown', options) ?? 30_000));
  }

  /** `shutdown()`, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }
}
