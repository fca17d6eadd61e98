/** The public class: configuration, callbacks, and the lifecycle's start/stop orchestration. */

import type pg from 'pg';
import { Callbacks, type ListenerOptions } from '../core/callbacks.js';
import { publish } from '../core/channels.js';
import type { LeaderElection, TimeoutOptions, WaitOptions } from '../core/election.js';
import { FencedError, fencedWrite } from '../core/fencing.js';
import { handoverTimeoutOf } from '../core/handover.js';
import { keysFromName } from '../core/keys.js';
import type {
  AcquiredCallback,
  Callback,
  CallbackMap,
  ErrorCallback,
  LockCallbacks,
  NewLeaderCallback,
  StateChangeCallback,
  TakeoverFenceCallback,
} from '../core/lock-callbacks.js';
import type { LockHealth } from '../core/lock-health.js';
import { type LeaderLockOptions, type ResolvedOptions, resolveOptions } from '../core/lock-options.js';
import { type LeaderWorkHandle, Runners } from '../core/runner.js';
import type { Safety } from '../core/safety.js';
import { LockState, type SpecState } from '../core/state.js';
import type { Term } from '../core/term.js';
import { rejecting, show, timeoutOf, waitOptionsOf } from '../core/validate.js';
import { type LeaderWork, LeaderWorkError } from '../core/work.js';
import { Control } from './control.js';
import type { InputType } from './fsm.js';
import { type InspectOptions, inspect, type LockInspection } from './inspect.js';
import { TermIds } from './leadership.js';
import { Counters, type LockStats } from './stats.js';

export type { TimeoutOptions, WaitOptions };

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
export class LeaderLock implements LeaderElection {
  /** The `name` option the keys were derived from, or null if the lock was given `key1`/`key2`. */
  readonly name: string | null;
  private readonly o: ResolvedOptions;
  private readonly callbacks: LockCallbacks;
  private readonly counters = new Counters();
  private readonly runners: Runners<Term>;
  private readonly control: Control;

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
    this.name = options.name ?? null;
    this.callbacks = new Callbacks<CallbackMap>(
      this.o.logger,
      this.o.clock,
      this.o.callbackTimeoutMs,
      this.name === null ? `lock ${this.o.key1},${this.o.key2}` : `lock ${JSON.stringify(this.name)}`,
    );
    this.runners = new Runners<Term>(
      (term, err) => this.callbacks.emit('error', new LeaderWorkError(term.id, err)),
      () => this.o.clock.now(),
    );
    this.control = new Control({
      o: this.o,
      callbacks: this.callbacks,
      runners: this.runners,
      termIds: new TermIds(),
      counters: this.counters,
      changed: (from, to, input) => this.changed(from, to, input),
    });
  }

  /** The first lock key. */
  get key1(): number {
    return this.o.key1;
  }
  /** The second lock key. */
  get key2(): number {
    return this.o.key2;
  }

  /** How followers wait for the lock (the `acquireMode` option, resolved). */
  get acquireMode(): 'wait' | 'poll' {
    return this.o.acquireMode;
  }

  /** This candidate's id (also in `pg_stat_activity.application_name`). */
  get id(): string {
    return this.o.id;
  }

  /** Current state (read-only). */
  get state(): LockState {
    return this.control.lifecycle?.state ?? LockState.STOPPED;
  }

  /**
   * True while this process may act as leader: the state is LEADER **and** the lease is
   * current (`now < t0 + safety.leaseMs`, t0 being when the last successful check was
   * sent), and its connection has not failed. A process whose event loop was blocked past
   * the lease reads false the moment it wakes, before any timer runs; the next check then
   * re-verifies. False in every other state, RECONNECTING and RELEASING included.
   */
  get isLeader(): boolean {
    return this.control.lifecycle?.isLeader ?? false;
  }

  /**
   * When the lease behind `isLeader` ends (or ended), on the lock's clock
   * (`performance.now()` unless a `clock` was given); null before the first acquisition.
   * Leader work that needs time can check `leaseExpiresAt - performance.now()`; each
   * successful health check pushes it forward.
   */
  get leaseExpiresAt(): number | null {
    return this.control.leaseExpiresAt;
  }

  /**
   * The figures behind `isLeader`, from the server settings applied on the session that
   * last acquired the lock: `{ leaseMs, serverReleaseMs, marginMs, detectionMs, settings }`.
   * Null until the lock has been acquired once. See docs/safety.md.
   */
  get safety(): Safety | null {
    return this.control.safety;
  }

  /**
   * The fencing epoch table (the `fencing` option) as a quoted SQL name, e.g.
   * `"pgleaderlock_epochs"`; null when fencing is off. For statements of your own that
   * check `term.epoch` against it (`pgleaderlock/node-cron` does).
   */
  get fencingTable(): string | null {
    return this.o.fencingTable;
  }

  /** The current leadership term, or null when not leader. Its `signal` aborts when the term ends. */
  get term(): Term | null {
    return this.control.lifecycle?.term ?? null;
  }

  /** Counters and the current state and term (a snapshot). */
  stats(): LockStats {
    return this.counters.snapshot(this.state, this.term, this.o.clock.now());
  }

  /**
   * For liveness and readiness probes (docs/observability.md, "Probes"). `live` is false
   * when the lock is wedged and restarting the process would help: its loop stopped making
   * progress, a callback or leader work ignores its deadline, the event loop was blocked
   * for 2 s or more, or the lock stopped on its own. `ready` is true for a live lock that
   * leads or follows normally, followers included. `reasons` says why either is false.
   */
  health(): LockHealth {
    return this.control.health();
  }

  /**
   * Run `fn` in every leadership term, starting now if already leader. `fn` gets the term;
   * its `signal` aborts the moment the term ends (loss, release, step-down, shutdown,
   * RECONNECTING), and `fn` should return promptly then. The next term's run starts only
   * after the previous run settled. Errors (other than the term's abort) go to `onError`.
   * `stepDown()` and `shutdown()` end the term and wait for every run to settle (within
   * their `timeoutMs`) before unlocking, so the work never outlives the lock voluntarily;
   * `shutdown()` also waits for runs of earlier terms that are still winding down.
   */
  runWhileLeader(fn: LeaderWork): LeaderWorkHandle {
    if (typeof fn !== 'function')
      throw new TypeError(`runWhileLeader expects a function, received ${show(fn)}`);
    return this.runners.add(fn, this.term);
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
    const term = this.term;
    if (!term || !this.isLeader) {
      return Promise.reject(new FencedError('fenced write refused: this process is not the leader'));
    }
    return fencedWrite(client, table, { key1: this.o.key1, key2: this.o.key2 }, term, fn);
  }

  /** Register a callback for when leadership is acquired; it receives the new term. Returns `fn`. */
  onAcquired<F extends AcquiredCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('acquired', fn, options);
  }
  /** Register a callback for a voluntary release (`stepDown()` or `shutdown()` while leader). Returns `fn`. */
  onReleased<F extends Callback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('released', fn, options);
  }
  /** Register a callback for an involuntary loss: stop leader-only work at once. Returns `fn`. */
  onLost<F extends Callback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('lost', fn, options);
  }
  /** Register a callback for each attempt that found the lock held by another session. Returns `fn`. */
  onAcquireFailed<F extends Callback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('acquireFailed', fn, options);
  }
  /** Register a callback for entering STOPPED. Returns `fn`. */
  onStopped<F extends Callback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('stopped', fn, options);
  }
  /**
   * Register a callback for a grant that could not be proven clean: the lock is held, and
   * the term opens only after `takeoverDelayMs` (`state` reads `'pending'` meanwhile). It
   * receives `{ delayMs }`. Returns `fn`.
   */
  onTakeoverFence<F extends TakeoverFenceCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('takeoverFence', fn, options);
  }
  /**
   * Register a callback for another candidate becoming leader; it receives that candidate's
   * id. Learned from the holder at connect and from the new leader's NOTIFY on the key's
   * channel: promptly while this lock's session is idle (poll mode, LEADER), at the end of
   * the current wait slice in wait mode (a session waiting in pg_advisory_lock receives
   * notifications only between statements). Returns `fn`.
   */
  onNewLeader<F extends NewLeaderCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('newLeader', fn, options);
  }
  /** Register a callback for every state change `(from, to)`. Returns `fn`. */
  onStateChange<F extends StateChangeCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('stateChange', fn, options);
  }
  /** Register a callback for errors: database errors, failed releases, callbacks that threw. Returns `fn`. */
  onError<F extends ErrorCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('error', fn, options);
  }

  /**
   * Start the lifecycle: STOPPED -> FOLLOWER, then acquisition attempts. Resolves once
   * started (it does not wait for leadership: see {@link waitForLeadership}). Idempotent;
   * called during a shutdown it starts again after that shutdown. Does nothing if the
   * `signal` option is already aborted. A started lock keeps the process alive until it
   * stops (see the `unref` option).
   */
  start(): Promise<void> {
    return this.control.start();
  }

  /**
   * Release the lock if held and stop (StopRequested). Resolves when the lifecycle has
   * ended and the connection is closed, no `runWhileLeader` run of any term is still
   * running, and every callback queued so far has run (not waited for when called from
   * inside one of this lock's callbacks). Concurrent calls share the stop.
   *
   * With `timeoutMs`, it resolves within that time: a release still going on is cut by
   * closing the session by force (the server frees the lock when the socket closes), and
   * a {@link ShutdownError} goes to `onError` for that, or for leader work still running.
   */
  shutdown(options: TimeoutOptions = {}): Promise<void> {
    return rejecting(() => this.control.shutdown(timeoutOf('shutdown', options)));
  }

  /**
   * Give up leadership voluntarily (ReleaseRequested): the term ends, `runWhileLeader` runs
   * are waited for, then `pg_advisory_unlock`; then FOLLOWER with `autoReacquire` (after
   * one back-off delay, so other candidates can take over), or STOPPED without. Does
   * nothing unless leader. With `timeoutMs`: if the release is not over by then, its
   * session is closed by force (the server frees the lock), a {@link ShutdownError} goes
   * to `onError`, and per the transition table the lock goes to STOPPED. The timeout acts
   * on this release only: once it is over, nothing is closed.
   */
  stepDown(options: TimeoutOptions = {}): Promise<void> {
    return rejecting(() => this.control.stepDown(timeoutOf('stepDown', options)));
  }

  /**
   * Hand leadership to the candidate `id`, which must be waiting for this lock
   * (docs/choosing-the-leader.md). The term ends and its `runWhileLeader` runs are waited
   * for (within `callbackTimeoutMs`: past it the session is closed by force and the
   * handover fails), then the release names `id`: any other waiter granted the lock gives
   * it back before its term opens, and `id` takes it with no takeover delay. Resolves once
   * `id` holds the lock. Rejects with a {@link LockError} (`ERR_PGLEADERLOCK_HANDOVER`),
   * leaving leadership as it is, if this lock is not leading, if a stepDown, shutdown or
   * another handover is under way, or if no candidate `id` waits; rejects too if `id` does
   * not take the lock within `timeoutMs` (default 5000, at most 60000) of the release: this lock (with
   * `autoReacquire`) has queued again and takes leadership back.
   */
  handoverTo(id: string, options: TimeoutOptions = {}): Promise<void> {
    return rejecting(() => this.control.handoverTo(id, handoverTimeoutOf(id, options)));
  }

  /** This candidate's priority (`priority` option): a leader hands over to a waiting candidate with a higher one. */
  get priority(): number {
    return this.o.priority;
  }

  /**
   * Wait until this lock leads. Resolves `true` when a term opens (at once if already
   * leader), `false` after `timeoutMs`, when the lock stops, or at once if it is not
   * started (call `start()` first; a `start()` still waiting for an earlier shutdown
   * counts as started); rejects with the signal's reason if `signal` aborts.
   */
  waitForLeadership(options: WaitOptions = {}): Promise<boolean> {
    return rejecting(() => {
      const { timeoutMs, signal } = waitOptionsOf(options);
      return this.control.waitForLeadership(timeoutMs, signal);
    });
  }

  /** `await using lock = new LeaderLock(…)`: shuts down at scope exit. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  private changed(from: SpecState, to: SpecState, input: InputType): void {
    const { key1, key2, id } = this.o;
    this.o.logger.info({ event: 'state_change', from, to, input, key1, key2 }, 'state_change');
    this.callbacks.emit('stateChange', from, to);
    publish('state', { id, key1, key2, from, to, input });
  }
}

/** `fn()`, a synchronous throw (a bad argument) turned into a rejection: the methods above never throw. */
