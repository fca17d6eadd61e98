/** The public class: configuration, callbacks, and the lifecycle's start/stop orchestration. */

import type pg from 'pg';
import {
  type AcquiredCallback,
  type Callback,
  Callbacks,
  type ErrorCallback,
  type NewLeaderCallback,
  type StateChangeCallback,
} from './callbacks.js';
import { deferred } from './clock.js';
import { ShutdownError } from './errors.js';
import { FencedError, fencedWrite } from './fencing.js';
import type { Input } from './fsm.js';
import { type InspectOptions, inspect, type LockInspection } from './inspect.js';
import { keysFromName } from './keys.js';
import { Lifecycle } from './lifecycle.js';
import { Counters, type LockStats, publish, type StateMessage } from './observe.js';
import { type LeaderLockOptions, type ResolvedOptions, resolveOptions } from './options.js';
import { type LeaderWork, type LeaderWorkHandle, Runners } from './runner.js';
import type { Safety } from './safety.js';
import { LockState } from './state.js';
import { type Term, Terms } from './term.js';
import { checkDuration } from './validate.js';

/** Options of {@link LeaderLock.shutdown} and {@link LeaderLock.stepDown}. */
export interface TimeoutOptions {
  /**
   * How long to wait. When it elapses the lock's session is closed by force (the server
   * releases the lock when it sees the socket close). Default: no limit; every query is
   * still bounded by `queryTimeoutMs`.
   */
  timeoutMs?: number;
}

/** Options of {@link LeaderLock.waitForLeadership}. */
export interface WaitOptions {
  /** Resolve `false` after this long. Default: no limit. */
  timeoutMs?: number;
  /** Abort the wait: the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * Leader election on a PostgreSQL session advisory lock `(key1, key2)`.
 *
 * ```ts
 * await using lock = new LeaderLock({ connectionString, key1: 1, key2: 100 });
 * lock.onAcquired(() => startWork());
 * lock.onLost(() => stopWork());
 * await lock.start();
 * ```
 *
 * One lifecycle runs per `start()`; it owns a dedicated connection and moves through the
 * states of {@link LockState} following the spec's transition table (docs/state-machine.md).
 * Callbacks never throw into the lifecycle: errors reach `onError` callbacks.
 */
export class LeaderLock implements AsyncDisposable {
  private readonly o: ResolvedOptions;
  private readonly callbacks: Callbacks;
  private lifecycle: Lifecycle | null = null;
  private stopping: Promise<void> | null = null;
  private readonly stateWaiters = new Set<(to: LockState) => void>();
  private detachSignal: (() => void) | null = null;
  private lastSafety: Safety | null = null;
  private readonly terms = new Terms();
  private readonly counters = new Counters();
  private readonly runners: Runners;

  /**
   * Lock keys for a name: the first 8 bytes of SHA-256 of `"pgleaderlock:" + name` (UTF-8),
   * as two big-endian signed 32-bit integers. Stable across versions and platforms.
   */
  static keysFromName(name: string): [key1: number, key2: number] {
    return keysFromName(name);
  }

  /**
   * Who holds `(key1, key2)` (or `name`) and who waits for it, from `pg_locks` and
   * `pg_stat_activity`, on a connection of its own. Never takes the lock. Waiters appear in
   * wait mode; polling followers are between attempts and do not.
   */
  static inspect(options: InspectOptions): Promise<LockInspection> {
    return inspect(options);
  }

  constructor(options: LeaderLockOptions) {
    this.o = resolveOptions(options);
    this.callbacks = new Callbacks(this.o.logger);
    this.runners = new Runners(this.terms, this.callbacks);
  }

  /** The lock keys. */
  get key1(): number {
    return this.o.key1;
  }
  get key2(): number {
    return this.o.key2;
  }

  /** This candidate's id (also in `pg_stat_activity.application_name`). */
  get id(): string {
    return this.o.id;
  }

  /** Current state (read-only). */
  get state(): LockState {
    return this.lifecycle?.state ?? LockState.STOPPED;
  }

  /**
   * True while this process may act as leader: the state is LEADER **and** the lease is
   * current (`now < t0 + safety.leaseMs`, t0 being when the last successful check was
   * sent). A process whose event loop was blocked past the lease reads false the moment
   * it wakes, before any timer runs; the next check then re-verifies. False in RECONNECTING.
   */
  get isLeader(): boolean {
    return this.lifecycle?.isLeader ?? false;
  }

  /**
   * When the lease behind `isLeader` ends (or ended), on the lock's clock
   * (`performance.now()` unless a `clock` was given); null before the first acquisition.
   * Leader work that needs time can check `leaseExpiresAt - performance.now()`; each
   * successful health check pushes it forward.
   */
  get leaseExpiresAt(): number | null {
    return this.lifecycle?.leaseExpiresAt ?? null;
  }

  /**
   * The figures behind `isLeader`, from the server settings applied on the session that
   * last acquired the lock: `{ leaseMs, serverReleaseMs, marginMs, detectionMs, settings }`.
   * Null until the lock has been acquired once. See docs/safety.md.
   */
  get safety(): Safety | null {
    return this.lifecycle?.safety ?? this.lastSafety;
  }

  /** The current leadership term, or null when not leader. Its `signal` aborts when the term ends. */
  get term(): Term | null {
    return this.terms.current;
  }

  /** Counters and the current state and term (a snapshot). */
  stats(): LockStats {
    const c = this.counters;
    const since = c.leaderSince;
    return {
      state: this.state,
      term: this.terms.current,
      acquisitions: c.acquisitions,
      losses: c.losses,
      releases: c.releases,
      failedAttempts: c.failedAttempts,
      reconnects: c.reconnects,
      recoveries: c.recoveries,
      leaderMs: c.leaderMsClosed + (since === null ? 0 : this.o.clock.now() - since),
      lastError: c.lastError,
    };
  }

  /**
   * Run `fn` in every leadership term, starting now if already leader. `fn` gets the term;
   * its `signal` aborts the moment the term ends (loss, release, step-down, shutdown,
   * RECONNECTING), and `fn` should return promptly then. The next term's run starts only
   * after the previous run settled. Errors (other than the term's abort) go to `onError`.
   * `stepDown()` and `shutdown()` end the term and wait for the run to settle (within their
   * `timeoutMs`) before unlocking, so the work never outlives the lock voluntarily.
   */
  runWhileLeader(fn: LeaderWork): LeaderWorkHandle {
    if (typeof fn !== 'function')
      throw new TypeError(`runWhileLeader expects a function, received ${typeof fn}`);
    return this.runners.add(fn);
  }

  /**
   * Fencing (`fencing: true`): run `fn(client)` in a transaction on `client` (a connection
   * of yours to the same database, not inside a transaction already) that commits only if
   * this process's current term still holds the current epoch. The epoch row stays
   * share-locked until commit, so a newer leader's increment waits for the write; a write
   * from a superseded term is refused with a `FencedError`. See docs/safety.md.
   */
  fenced<T>(client: pg.ClientBase, fn: (client: pg.ClientBase) => Promise<T>): Promise<T> {
    const table = this.o.fencingTable;
    if (table === null) return Promise.reject(new FencedError('fencing is not enabled: pass fencing: true'));
    const term = this.terms.current;
    if (!term) return Promise.reject(new FencedError('fenced write refused: this process is not the leader'));
    return fencedWrite(client, table, { key1: this.o.key1, key2: this.o.key2 }, term, fn);
  }

  /** Register a callback for when leadership is acquired; it receives the new term. Returns `fn`. */
  onAcquired<F extends AcquiredCallback>(fn: F): F {
    return this.callbacks.add('acquired', fn);
  }
  /** Register a callback for a voluntary release (`stepDown()` or `shutdown()` while leader). Returns `fn`. */
  onReleased<F extends Callback>(fn: F): F {
    return this.callbacks.add('released', fn);
  }
  /** Register a callback for an involuntary loss: stop leader-only work at once. Returns `fn`. */
  onLost<F extends Callback>(fn: F): F {
    return this.callbacks.add('lost', fn);
  }
  /** Register a callback for each attempt that found the lock held by another session. Returns `fn`. */
  onAcquireFailed<F extends Callback>(fn: F): F {
    return this.callbacks.add('acquireFailed', fn);
  }
  /** Register a callback for entering STOPPED. Returns `fn`. */
  onStopped<F extends Callback>(fn: F): F {
    return this.callbacks.add('stopped', fn);
  }
  /**
   * Register a callback for another candidate becoming leader; it receives that candidate's
   * id. Learned from the holder at connect and from the new leader's NOTIFY on the key's
   * channel: promptly while this lock's session is idle (poll mode, LEADER), at the end of
   * the current wait slice in wait mode (a session waiting in pg_advisory_lock receives
   * notifications only between statements). Returns `fn`.
   */
  onNewLeader<F extends NewLeaderCallback>(fn: F): F {
    return this.callbacks.add('newLeader', fn);
  }
  /** Register a callback for every state change `(from, to)`. Returns `fn`. */
  onStateChange<F extends StateChangeCallback>(fn: F): F {
    return this.callbacks.add('stateChange', fn);
  }
  /** Register a callback for errors: database errors, failed releases, callbacks that threw. Returns `fn`. */
  onError<F extends ErrorCallback>(fn: F): F {
    return this.callbacks.add('error', fn);
  }

  /**
   * Start the lifecycle: STOPPED -> FOLLOWER, then acquisition attempts. Resolves once
   * started (it does not wait for leadership: see {@link waitForLeadership}). Idempotent;
   * called during a shutdown it starts again after that shutdown. Does nothing if the
   * `signal` option is already aborted.
   */
  async start(): Promise<void> {
    if (this.stopping) await this.stopping.catch(() => {});
    if (this.lifecycle || this.o.signal?.aborted) return;
    const lifecycle = new Lifecycle(
      this.o,
      this.callbacks,
      (from, to, input) => this.changed(from, to, input),
      this.terms,
      this.counters,
    );
    this.lifecycle = lifecycle;
    const signal = this.o.signal;
    if (signal) {
      const onAbort = (): void => {
        this.shutdown().catch(() => {});
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.detachSignal = () => signal.removeEventListener('abort', onAbort);
    }
    void lifecycle.run().then(() => {
      this.lastSafety = lifecycle.safety ?? this.lastSafety;
      if (this.lifecycle === lifecycle) this.lifecycle = null;
      this.detachSignal?.();
      this.detachSignal = null;
    });
  }

  /**
   * Release the lock if held and stop (StopRequested). Resolves when the lifecycle has
   * ended, the connection is closed and every callback queued so far has run. Idempotent:
   * concurrent calls share one promise. With `timeoutMs`, when it elapses the session is
   * closed by force (the server frees the lock when the socket closes), a
   * {@link ShutdownError} goes to `onError`, and the promise resolves once the lifecycle
   * has ended (callbacks still queued are not waited for).
   */
  shutdown(options: TimeoutOptions = {}): Promise<void> {
    const timeoutMs =
      options.timeoutMs === undefined ? undefined : checkDuration('timeoutMs', options.timeoutMs);
    const lifecycle = this.lifecycle;
    if (!lifecycle) return this.stopping ?? this.callbacks.drained();
    if (this.stopping) return this.stopping;
    this.stopping = (async () => {
      const left = await this.endWork('shutdown', timeoutMs);
      lifecycle.requestStop();
      const ended = lifecycle.run();
      const done = ended.then(() => this.callbacks.drained());
      await this.bounded(done, ended, left, lifecycle, 'shutdown');
    })().finally(() => {
      this.stopping = null;
    });
    return this.stopping;
  }

  /**
   * Give up leadership voluntarily (ReleaseRequested): `pg_advisory_unlock`, then FOLLOWER
   * with `autoReacquire` (after one back-off delay, so other candidates can take over), or
   * STOPPED without. Does nothing unless leader. With `timeoutMs`, when it elapses the
   * session is closed by force (the server frees the lock when the socket closes), a
   * {@link ShutdownError} goes to `onError`, and per the transition table the lock goes
   * to STOPPED (a failed release).
   */
  async stepDown(options: TimeoutOptions = {}): Promise<void> {
    const timeoutMs =
      options.timeoutMs === undefined ? undefined : checkDuration('timeoutMs', options.timeoutMs);
    const lifecycle = this.lifecycle;
    if (!lifecycle || lifecycle.state !== LockState.LEADER) return;
    const left = await this.endWork('step-down', timeoutMs);
    const released = lifecycle.requestStepDown();
    await this.bounded(
      released.then(() => this.callbacks.drained()),
      released,
      left,
      lifecycle,
      'stepDown',
    );
  }

  /**
   * Before a voluntary release: end the current term (its signal aborts) and wait for the
   * runWhileLeader functions to settle, within `timeoutMs`. Returns the time left.
   */
  private async endWork(
    why: 'shutdown' | 'step-down',
    timeoutMs: number | undefined,
  ): Promise<number | undefined> {
    const { clock } = this.o;
    const t0 = clock.now();
    if (this.lifecycle?.state === LockState.LEADER) this.terms.end(why);
    const settled = this.runners.settled();
    if (timeoutMs === undefined) {
      await settled;
      return undefined;
    }
    let timer: unknown;
    await Promise.race([settled, new Promise<void>((r) => (timer = clock.setTimeout(r, timeoutMs)))]);
    clock.clearTimeout(timer);
    return Math.max(0, timeoutMs - (clock.now() - t0));
  }

  /**
   * Wait until this lock is leader. Resolves `true` when it is (at once if it already
   * is), `false` after `timeoutMs` or if the lock stops first; rejects with the signal's
   * reason if `signal` aborts.
   */
  waitForLeadership(options: WaitOptions = {}): Promise<boolean> {
    const timeoutMs =
      options.timeoutMs === undefined ? undefined : checkDuration('timeoutMs', options.timeoutMs);
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.isLeader) return Promise.resolve(true);
    const { clock } = this.o;
    return new Promise<boolean>((resolve, reject) => {
      let timer: unknown;
      const finish = (): void => {
        this.stateWaiters.delete(onState);
        signal?.removeEventListener('abort', onAbort);
        if (timer !== undefined) clock.clearTimeout(timer);
      };
      const onState = (to: LockState): void => {
        if (to === LockState.LEADER || to === LockState.STOPPED) {
          finish();
          resolve(to === LockState.LEADER);
        }
      };
      const onAbort = (): void => {
        finish();
        reject(signal?.reason);
      };
      this.stateWaiters.add(onState);
      signal?.addEventListener('abort', onAbort, { once: true });
      if (timeoutMs !== undefined) {
        timer = clock.setTimeout(() => {
          finish();
          resolve(false);
        }, timeoutMs);
      }
    });
  }

  /** `await using lock = new LeaderLock(…)`: shuts down at scope exit. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  private changed(from: LockState, to: LockState, input: Input): void {
    this.o.logger.info(
      { event: 'state_change', from, to, input, key1: this.o.key1, key2: this.o.key2 },
      'state_change',
    );
    this.callbacks.emit('stateChange', from, to);
    publish('state', {
      id: this.o.id,
      key1: this.o.key1,
      key2: this.o.key2,
      from,
      to,
      input,
    } as StateMessage);
    for (const w of [...this.stateWaiters]) w(to);
  }

  /**
   * Await `work`; if `timeoutMs` elapses first, close the session by force (which frees
   * the lock server-side), report a ShutdownError to `onError`, and wait for `settled`
   * (prompt: with the socket destroyed every pending query fails at once).
   */
  private async bounded(
    work: Promise<void>,
    settled: Promise<void>,
    timeoutMs: number | undefined,
    lifecycle: Lifecycle,
    what: 'shutdown' | 'stepDown',
  ): Promise<void> {
    if (timeoutMs === undefined) return work;
    const { clock } = this.o;
    const expired = deferred<'timeout'>();
    const timer = clock.setTimeout(() => expired.resolve('timeout'), timeoutMs);
    try {
      const first = await Promise.race([work.then(() => 'done' as const), expired.promise]);
      if (first === 'done') return;
    } finally {
      clock.clearTimeout(timer);
    }
    const err = new ShutdownError(
      `${what} did not finish within ${timeoutMs} ms; the lock's session was closed by force`,
    );
    this.o.logger.warn({ event: 'forced_close', what, timeoutMs }, 'forced_close');
    this.callbacks.emit('error', err);
    lifecycle.forceClose(err.message);
    await settled;
  }
}
