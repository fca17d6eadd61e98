/**
 * `FakePartitionedLeadership`: a `PartitionedElection` with no database, driven by the
 * test. The partitions' terms, their `runForEach` runs and the callback queue are the real
 * worker's (src/partitions/terms.ts, runs.ts, src/core/callbacks.ts), and so is
 * `waitForBalance()`'s waiting (balance.ts); the test says which partitions this worker
 * owns, with `assign()` and `revoke()`.
 */
import { Callbacks, type ListenerOptions } from '../core/callbacks.js';
import { sleep } from '../core/clock.js';
import type { LeaderWorkHandle } from '../core/runner.js';
import { checkDuration, rejecting, show, timeoutOf } from '../core/validate.js';
import { hungCallback } from '../core/vitals.js';
import { Balance } from '../partitions/balance.js';
import type { PartitionedElection } from '../partitions/election.js';
import { assessPartitionHealth, type PartitionHealth, stuckRun } from '../partitions/health.js';
import {
  MAX_PARTITIONS,
  type PartitionedLeadershipOptions,
  resolvePartitionOptions,
} from '../partitions/options.js';
import type { PartitionWork } from '../partitions/runs.js';
import { type PartitionCallbackMap, type RevokeReason, Terms } from '../partitions/terms.js';
import {
  checkAsReal,
  checkKeys,
  type FakeOptions,
  type ResolvedFakeOptions,
  resolveFake,
} from './options.js';

/**
 * Options of {@link FakePartitionedLeadership}: every option of `PartitionedLeadership`,
 * validated by its own rules, so that one options object serves both. The fake uses `id`,
 * `name`, `partitions`, `drainTimeoutMs`, `callbackTimeoutMs`, `clock` and `logger`; the
 * others (connection, timings, `watchSliceMs`, `fencing`, `random`, …) are checked and
 * ignored (docs/testing-your-code.md).
 */
export interface FakePartitionedLeadershipOptions
  extends FakeOptions,
    Partial<
      Omit<PartitionedLeadershipOptions, keyof FakeOptions | 'partitions' | 'name' | 'drainTimeoutMs'>
    > {
  /** How many partitions there are (`0 … partitions - 1`), as on `PartitionedLeadership`. */
  partitions: number;
  /** The name the workers share. Default `'fake'`. */
  name?: string;
  /**
   * As on `PartitionedLeadership`: how long a revocation waits for the partition's runs to
   * return. Default 10000.
   */
  drainTimeoutMs?: number;
}

const KNOWN = ['id', 'callbackTimeoutMs', 'clock', 'logger', 'partitions', 'name', 'drainTimeoutMs'] as const;
const REASONS: readonly RevokeReason[] = ['rebalance', 'lost', 'shutdown'];

type Phase = 'stopped' | 'running' | 'stopping';

/**
 * A stand-in for `PartitionedLeadership` in unit tests: the same methods and
 * callbacks (it implements `PartitionedElection`), no database. After `start()` it owns
 * nothing until the test assigns partitions:
 *
 * ```ts
 * const workers = new FakePartitionedLeadership({ partitions: 8 });
 * startReaders(workers);                  // your code, typed against PartitionedElection
 * await workers.start();
 * await workers.assign([0, 1, 2]);        // terms open, runForEach runs start, onAssigned fires
 * await workers.revoke([2], 'rebalance'); // its signal aborts, onRevoked(2, 'rebalance'), runs drained
 * ```
 *
 * `waitForBalance()` resolves `true` while started: the test decides what the share is.
 */
export class FakePartitionedLeadership implements PartitionedElection {
  private readonly o: ResolvedFakeOptions;
  private readonly count: number;
  private readonly workerName: string;
  private readonly callbacks: Callbacks<PartitionCallbackMap>;
  private readonly terms: Terms;
  private readonly balance: Balance;
  private phase: Phase = 'stopped';
  private started = false;
  /** The shutdown under way. */
  private stopping: Promise<void> | null = null;

  constructor(options: FakePartitionedLeadershipOptions) {
    this.o = resolveFake('FakePartitionedLeadership', options);
    if (Object.keys(options).every((k) => (KNOWN as readonly string[]).includes(k))) {
      checkKeys('FakePartitionedLeadership', options, KNOWN);
    } else {
      const fill = { name: options.name ?? 'fake' };
      checkAsReal(
        'FakePartitionedLeadership',
        'PartitionedLeadership',
        options,
        fill,
        resolvePartitionOptions,
      );
    }
    const { partitions } = options;
    if (typeof partitions !== 'number' || !Number.isInteger(partitions) || partitions < 1) {
      throw new TypeError(`partitions must be an integer >= 1, received ${show(partitions)}`);
    }
    if (partitions > MAX_PARTITIONS) {
      throw new RangeError(`partitions must be at most ${MAX_PARTITIONS}, received ${partitions}`);
    }
    this.count = partitions;
    const name = options.name ?? 'fake';
    if (typeof name !== 'string' || name === '') {
      throw new TypeError(`name must be a non-empty string, received ${show(name)}`);
    }
    this.workerName = name;
    const drainTimeoutMs = checkDuration('drainTimeoutMs', options.drainTimeoutMs ?? 10_000);
    this.callbacks = new Callbacks<PartitionCallbackMap>(
      this.o.logger,
      this.o.clock,
      this.o.callbackTimeoutMs,
    );
    this.balance = new Balance(
      this.o.clock,
      () => this.phase === 'running',
      () => this.callbacks.drained(),
      () => this.callbacks.inCallback(),
    );
    this.terms = new Terms(
      { name, id: this.o.id },
      drainTimeoutMs,
      this.o.logger,
      this.o.clock,
      this.callbacks,
      { valid: () => true }, // no lease to run out: the test revokes
      () => this.balance.check(),
    );
  }

  get id(): string {
    return this.o.id;
  }

  get name(): string {
    return this.workerName;
  }

  /** The partitions this worker owns now. */
  get owned(): ReadonlySet<number> {
    return this.terms.owned();
  }

  // ---- controls for tests ----

  /**
   * This worker now owns `partitions`: each one's term opens, `runForEach` runs start in it,
   * and `onAssigned(partition, term)` fires. Resolves once those callbacks have run. Rejects
   * unless started, or for a partition out of range or owned already.
   */
  assign(partitions: readonly number[]): Promise<void> {
    return rejecting(async () => {
      const list = this.check('assign', partitions);
      if (this.phase !== 'running')
        throw new Error(`assign(): the worker is not started (it is ${this.phase})`);
      const owned = this.terms.partitions();
      const taken = list.filter((p) => owned.includes(p));
      if (taken.length) throw new Error(`assign(): partitions ${taken.join(', ')} are owned already`);
      const inCallback = this.callbacks.inCallback();
      this.terms.open(list, 0, null);
      if (!inCallback) await this.callbacks.drained();
    });
  }

  /**
   * This worker loses `partitions` for `reason` (`'rebalance'`: handed to another worker;
   * `'lost'`: its session died; `'shutdown'`): each term's signal aborts, then
   * `onRevoked(partition, reason)` fires. Resolves once the partitions' runs have returned
   * (or `drainTimeoutMs` passed) and the callbacks have run. Rejects for a partition not
   * owned.
   */
  revoke(partitions: readonly number[], reason: RevokeReason): Promise<void> {
    return rejecting(async () => {
      const list = this.check('revoke', partitions);
      if (!REASONS.includes(reason)) {
        throw new TypeError(`revoke() reason must be one of ${REASONS.join(', ')}, received ${show(reason)}`);
      }
      const owned = this.terms.partitions();
      const missing = list.filter((p) => !owned.includes(p));
      if (missing.length) throw new Error(`revoke(): partitions ${missing.join(', ')} are not owned`);
      const inCallback = this.callbacks.inCallback();
      await this.terms.revoke(list, reason);
      if (!inCallback) await this.callbacks.drained();
    });
  }

  // ---- PartitionedElection ----

  start(): Promise<void> {
    if (this.stopping) return this.stopping.then(() => this.start());
    if (this.phase === 'running') return Promise.resolve();
    this.phase = 'running';
    this.started = true;
    this.balance.check();
    return Promise.resolve();
  }

  shutdown(options: { timeoutMs?: number } = {}): Promise<void> {
    return rejecting(() => {
      const timeoutMs = timeoutOf('shutdown', options) ?? 30_000;
      if (this.stopping) return this.stopping;
      if (this.phase === 'stopped') return Promise.resolve();
      const inCallback = this.callbacks.inCallback();
      this.phase = 'stopping';
      this.stopping = (async () => {
        const timer = new AbortController();
        await Promise.race([this.terms.revokeAll('shutdown'), sleep(this.o.clock, timeoutMs, timer.signal)]);
        timer.abort();
        this.phase = 'stopped';
        this.balance.stopped();
        if (!inCallback) await this.callbacks.drained();
      })().finally(() => {
        this.stopping = null;
      });
      return this.stopping;
    });
  }

  waitForBalance(options: { timeoutMs?: number } = {}): Promise<boolean> {
    return rejecting(() => this.balance.wait(timeoutOf('waitForBalance', options) ?? 30_000));
  }

  runForEach(fn: PartitionWork): LeaderWorkHandle {
    if (typeof fn !== 'function') throw new TypeError(`runForEach needs a function, received ${typeof fn}`);
    return this.terms.addWork(fn);
  }

  health(): PartitionHealth {
    const hung = this.callbacks.hung();
    const stuck = this.terms.stuckRun(this.o.callbackTimeoutMs);
    return assessPartitionHealth({
      started: this.started,
      phase: this.phase,
      lastError: null,
      hung: [
        ...(hung ? [hungCallback(hung, this.o.callbackTimeoutMs)] : []),
        ...(stuck ? [stuckRun(stuck)] : []),
      ],
      loopBlockedMs: null,
      quietMs: null, // no loop to wedge
      quietBoundMs: 0,
      owned: this.owned.size,
      members: this.phase === 'stopped' ? 0 : 1,
    });
  }

  onAssigned(
    fn: PartitionCallbackMap['assigned'],
    options?: ListenerOptions,
  ): PartitionCallbackMap['assigned'] {
    return this.callbacks.add('assigned', fn, options);
  }

  onRevoked(fn: PartitionCallbackMap['revoked'], options?: ListenerOptions): PartitionCallbackMap['revoked'] {
    return this.callbacks.add('revoked', fn, options);
  }

  onError(fn: PartitionCallbackMap['error'], options?: ListenerOptions): PartitionCallbackMap['error'] {
    return this.callbacks.add('error', fn, options);
  }

  /** `await using workers = new FakePartitionedLeadership(…)`: shuts down at scope exit. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  private check(method: string, partitions: readonly number[]): number[] {
    if (!Array.isArray(partitions)) {
      throw new TypeError(`${method}() expects an array of partitions, received ${show(partitions)}`);
    }
    for (const p of partitions) {
      if (typeof p !== 'number' || !Number.isInteger(p) || p < 0 || p >= this.count) {
        throw new RangeError(
          `${method}(): a partition must be an integer in [0, ${this.count - 1}], received ${show(p)}`,
        );
      }
    }
    if (new Set(partitions).size !== partitions.length) {
      throw new TypeError(`${method}(): partitions listed twice in ${show(partitions)}`);
    }
    return [...partitions];
  }
}
