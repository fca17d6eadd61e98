/**
 * `FakeLeaderLock`: a `LeaderElection` with no database, driven by the test. It runs on the
 * real lock's pieces that need no database (the callback queue, the runners of
 * `runWhileLeader`, terms ended with a `TermEndedError`, `health()`'s assessment), and
 * follows the real lock's transitions in the order the real lock carries them out
 * (src/leader/fsm.ts, fsm-actions.ts): the term's signal aborts before the state change is
 * reported, `onStateChange` before `onAcquired`/`onLost`/`onReleased`, `onStopped` last.
 * test/contract/election.test.ts runs the same behaviours against it and a real
 * `LeaderLock`.
 */
import { Callbacks, type ListenerOptions } from '../core/callbacks.js';
import { earlier } from '../core/clock.js';
import type { LeaderElection, TimeoutOptions, WaitOptions } from '../core/election.js';
import { LockError, ShutdownError } from '../core/errors.js';
import { handoverTimeoutOf } from '../core/handover.js';
import type {
  AcquiredCallback,
  Callback,
  CallbackMap,
  ErrorCallback,
  NewLeaderCallback,
  StateChangeCallback,
  TakeoverFenceCallback,
} from '../core/lock-callbacks.js';
import { assessHealth, type LockHealth } from '../core/lock-health.js';
import { type LeaderLockOptions, resolveOptions } from '../core/lock-options.js';
import { type LeaderWorkHandle, Runners } from '../core/runner.js';
import { LockState } from '../core/state.js';
import type { Term } from '../core/term.js';
import { rejecting, show, timeoutOf, waitOptionsOf } from '../core/validate.js';
import { LeadershipWaiters } from '../core/waiting.js';
import { type LeaderWork, LeaderWorkError } from '../core/work.js';
import { FakeLifecycle } from './fake-lifecycle.js';
import {
  checkAsReal,
  checkKeys,
  type FakeOptions,
  type ResolvedFakeOptions,
  resolveFake,
} from './options.js';

export { FAKE_HOST } from './fake-lifecycle.js';

/**
 * Options of {@link FakeLeaderLock}: every option of `LeaderLock`, validated by
 * `LeaderLock`'s own rules, so that one options object serves both. The fake uses `id`,
 * `name`, `callbackTimeoutMs`, `clock`, `logger` and `autoReacquire`; the others
 * (connection, keys, timings, `retryStrategy`, `acquireMode`, `fencing`, …) are checked and
 * ignored (docs/testing-your-code.md).
 */
export interface FakeLeaderLockOptions
  extends FakeOptions,
    Partial<Omit<LeaderLockOptions, keyof FakeOptions>> {
  /**
   * As on `LeaderLock`: after a loss (`lose()`) or a `stepDown()`, follow again (true) or
   * stop (false). Default true.
   */
  autoReacquire?: boolean;
}

const KNOWN = ['id', 'callbackTimeoutMs', 'clock', 'logger', 'autoReacquire'] as const;

/**
 * A stand-in for `LeaderLock` in unit tests: the same methods and callbacks (it
 * implements `LeaderElection`), no database. It starts as a follower waiting for the lock
 * (state `'acquiring'`, as a real lock queued behind another holder), and the test decides
 * what happens next:
 *
 * ```ts
 * const lock = new FakeLeaderLock();
 * startScheduler(lock);        // your code, typed against LeaderElection
 * await lock.start();
 * const term = await lock.elect();  // leader: the term opens, runWhileLeader runs, onAcquired fires
 * await lock.lose();           // an involuntary loss: term.signal aborts, then onLost
 * ```
 *
 * Each control resolves once the callbacks it caused have run (at once when called from
 * inside one of this lock's callbacks). `onAcquireFailed` and `onTakeoverFence` can be
 * registered but never fire: the fake makes no attempts and holds no takeover delay.
 */
export class FakeLeaderLock implements LeaderElection {
  /** The `name` option, or null (as `LeaderLock.name`). */
  readonly name: string | null;
  private readonly o: ResolvedFakeOptions;
  private readonly autoReacquire: boolean;
  private readonly callbacks: Callbacks<CallbackMap>;
  private readonly runners: Runners<Term>;
  private readonly life: FakeLifecycle;
  private starting: Promise<void> | null = null;
  private readonly waiters: LeadershipWaiters;

  constructor(options: FakeLeaderLockOptions = {}) {
    this.o = resolveFake('FakeLeaderLock', options);
    const own = Object.keys(options).every((k) => (KNOWN as readonly string[]).includes(k));
    if (own) checkKeys('FakeLeaderLock', options, KNOWN);
    else {
      const keyed = options.name !== undefined || options.key1 !== undefined || options.key2 !== undefined;
      checkAsReal('FakeLeaderLock', 'LeaderLock', options, keyed ? {} : { key1: 0, key2: 0 }, resolveOptions);
    }
    this.name = options.name ?? null;
    const auto = options.autoReacquire ?? true;
    if (typeof auto !== 'boolean')
      throw new TypeError(`autoReacquire must be a boolean, received ${show(auto)}`);
    this.autoReacquire = auto;
    this.waiters = new LeadershipWaiters(this.o.clock);
    this.callbacks = new Callbacks<CallbackMap>(this.o.logger, this.o.clock, this.o.callbackTimeoutMs);
    this.runners = new Runners<Term>(
      (term, err) => this.life.error(new LeaderWorkError(term.id, err)),
      () => this.o.clock.now(),
    );
    this.life = new FakeLifecycle({
      o: this.o,
      autoReacquire: auto,
      callbacks: this.callbacks,
      runners: this.runners,
      waiters: this.waiters,
    });
  }

  /** This candidate's id. */
  get id(): string {
    return this.o.id;
  }

  /** Current state: `'stopped'`, `'acquiring'` (following), `'leader'`, `'releasing'`, or `'follower'` after a step-down. */
  get state(): LockState {
    return this.life.state;
  }

  /** True while LEADER with an open term; false from the moment `stepDown()`/`shutdown()` is called. */
  get isLeader(): boolean {
    return this.life.isLeader;
  }

  /** The current term, or null when not leader. */
  get term(): Term | null {
    return this.life.term;
  }

  // ---- controls for tests ----

  /**
   * Become leader: a term opens (its `runWhileLeader` runs start), `onStateChange(…,
   * 'leader')` then `onAcquired(term)` fire, and a pending `waitForLeadership()` resolves
   * `true`. Resolves with the term once those callbacks have run. Rejects unless the lock
   * is started and following (not leader, not releasing, not shutting down).
   */
  elect(): Promise<Term> {
    return rejecting(async () => {
      const { run } = this.life;
      if (!run || run.stopping) {
        throw new Error('elect(): the lock is not started (call start() first) or is shutting down');
      }
      const { state } = this.life;
      if (state !== LockState.FOLLOWER && state !== LockState.ACQUIRING) {
        throw new Error(`elect(): the lock must be following, but it is ${state}`);
      }
      const inCallback = this.callbacks.inCallback();
      const term = this.life.open();
      if (!inCallback) await this.callbacks.drained();
      return term;
    });
  }

  /**
   * An involuntary loss (the session died, the lock vanished): the term's signal aborts at
   * once, then `onStateChange('leader', …)` and `onLost` fire; with `autoReacquire` the lock
   * follows again (state `'acquiring'`), without it it stops (`onStopped`, and `health()`
   * reports that it stopped on its own). Runs of the lost term are not waited for: the lock
   * is already gone. A loss is not reported to `onError` (nor is it by `LeaderLock`).
   * `error`, the cause, is named in the term's abort reason and the log line. Resolves once
   * the callbacks have run; rejects unless leader.
   */
  lose(error?: Error): Promise<void> {
    return rejecting(async () => {
      if (error !== undefined && !(error instanceof Error)) {
        throw new TypeError(`lose(error) expects an Error, received ${show(error)}`);
      }
      if (!this.isLeader) throw new Error(`lose(): the lock is not leader (state ${this.life.state})`);
      const inCallback = this.callbacks.inCallback();
      this.life.lose(error);
      if (!inCallback) await this.callbacks.drained();
    });
  }

  /**
   * Another candidate, `id`, leads: `onNewLeader(id)` fires (once per change of leader, as
   * on the real lock). If this lock leads, it loses first (as `lose()`). Resolves once the
   * callbacks have run; rejects unless started, or if `id` is this lock's own.
   */
  newLeader(id: string): Promise<void> {
    return rejecting(async () => {
      if (typeof id !== 'string' || id === '') {
        throw new TypeError(`newLeader(id) expects a non-empty string, received ${show(id)}`);
      }
      if (id === this.o.id) throw new Error(`newLeader(${JSON.stringify(id)}): that is this lock's own id`);
      const { run } = this.life;
      if (!run || run.stopping) {
        throw new Error('newLeader(): the lock is not started (call start() first) or is shutting down');
      }
      const inCallback = this.callbacks.inCallback();
      if (this.isLeader) await this.lose();
      this.life.seen(id);
      if (!inCallback) await this.callbacks.drained();
    });
  }

  // ---- LeaderElection ----

  start(): Promise<void> {
    if (this.starting) return this.starting;
    const { run } = this.life;
    if (run && !run.stopping) return Promise.resolve();
    this.starting = (async () => {
      // called during a shutdown: start again once that shutdown is over
      for (let r = this.life.run; r; r = this.life.run) await r.ended.promise;
      this.life.launch();
    })().finally(() => {
      this.starting = null;
    });
    return this.starting;
  }

  shutdown(options: TimeoutOptions = {}): Promise<void> {
    return rejecting(() => this.stop(timeoutOf('shutdown', options)));
  }

  stepDown(options: TimeoutOptions = {}): Promise<void> {
    return rejecting(async () => {
      const timeoutMs = timeoutOf('stepDown', options);
      const deadline = this.life.deadline(timeoutMs);
      const inCallback = this.callbacks.inCallback();
      const current = this.life.release;
      if (this.life.state === LockState.RELEASING && current) {
        current.bound(earlier(current.deadline, deadline));
        await current.done;
      } else if (this.life.state === LockState.LEADER) {
        await this.life.beginRelease('step-down', 'follow', deadline).done;
      } else {
        return;
      }
      if (!inCallback) await this.life.within(this.callbacks.drained(), deadline);
    });
  }

  /**
   * Hand leadership to the candidate `id`: the fake takes any `id` for a waiting candidate.
   * As on `LeaderLock`, the term ends once the candidate is confirmed (here, a microtask
   * after the call), the runs are waited for (within `callbackTimeoutMs`, past which the
   * lock stops with a `ShutdownError` and this rejects), then the release: `onReleased`,
   * then `onNewLeader(id)`; resolves once those callbacks have run. Rejects with a
   * `LockError` (`ERR_PGLEADERLOCK_HANDOVER`), changing nothing, unless leading with no
   * stepDown, handover or shutdown under way, or if `id` is this lock's own. `timeoutMs` is
   * checked and otherwise unused: the fake's successor always takes the lock.
   */
  handoverTo(id: string, options: TimeoutOptions = {}): Promise<void> {
    return rejecting(async () => {
      handoverTimeoutOf(id, options);
      const refuse = (why: string): LockError =>
        new LockError(`cannot hand over to "${id}": ${why}`, { code: 'ERR_PGLEADERLOCK_HANDOVER' });
      const busy = (): LockError | null => {
        if (this.life.run?.stopping) return refuse('the lock is shutting down');
        if (this.life.state === LockState.RELEASING) return refuse('a stepDown is under way');
        if (!this.isLeader) return refuse(`this lock is not the leader (state ${this.life.state})`);
        return null;
      };
      const early = busy() ?? (id === this.o.id ? refuse('that is this lock') : null);
      if (early) throw early;
      const inCallback = this.callbacks.inCallback();
      await null; // the real lock confirms that the candidate waits before the term ends
      const late = busy();
      if (late) throw late;
      const deadline = this.o.clock.now() + this.o.callbackTimeoutMs;
      const release = this.life.beginRelease(`handover to ${id}`, 'follow', deadline, id);
      await release.done;
      if (release.expired) {
        throw new LockError(`handover to "${id}" failed: ${release.expired.message}`, {
          code: 'ERR_PGLEADERLOCK_HANDOVER',
          cause: release.expired,
        });
      }
      if (!inCallback) await this.callbacks.drained();
    });
  }

  waitForLeadership(options: WaitOptions = {}): Promise<boolean> {
    return rejecting(() => {
      const { timeoutMs, signal } = waitOptionsOf(options);
      if (signal?.aborted) return Promise.reject(signal.reason);
      if (this.isLeader) return Promise.resolve(true);
      if (this.life.run === null && this.starting === null) return Promise.resolve(false);
      return this.waiters.wait(timeoutMs, signal);
    });
  }

  runWhileLeader(fn: LeaderWork): LeaderWorkHandle {
    if (typeof fn !== 'function')
      throw new TypeError(`runWhileLeader expects a function, received ${show(fn)}`);
    return this.runners.add(fn, this.term);
  }

  health(): LockHealth {
    return assessHealth({
      state: this.life.state,
      isLeader: this.isLeader,
      running: this.life.run !== null,
      stopping: this.life.run?.stopping ?? false,
      stoppedOnItsOwn: this.life.stoppedOnItsOwn,
      quietMs: null, // no loop to wedge
      quietBoundMs: 0,
      blockedMs: null,
      hungCallback: this.callbacks.hung(),
      overdueRun: this.runners.overdue(),
      callbackTimeoutMs: this.o.callbackTimeoutMs,
      failing: null,
    });
  }

  onAcquired<F extends AcquiredCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('acquired', fn, options);
  }
  onReleased<F extends Callback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('released', fn, options);
  }
  onLost<F extends Callback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('lost', fn, options);
  }
  /** Accepted; never fires (the fake makes no acquisition attempts). */
  onAcquireFailed<F extends Callback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('acquireFailed', fn, options);
  }
  onStopped<F extends Callback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('stopped', fn, options);
  }
  /** Accepted; never fires (the fake holds no takeover delay). */
  onTakeoverFence<F extends TakeoverFenceCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('takeoverFence', fn, options);
  }
  onNewLeader<F extends NewLeaderCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('newLeader', fn, options);
  }
  onStateChange<F extends StateChangeCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('stateChange', fn, options);
  }
  onError<F extends ErrorCallback>(fn: F, options?: ListenerOptions): F {
    return this.callbacks.add('error', fn, options);
  }

  /** `await using lock = new FakeLeaderLock()`: shuts down at scope exit. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.shutdown();
  }

  // ---- the lifecycle ----

  private async stop(timeoutMs: number | undefined): Promise<void> {
    const deadline = this.life.deadline(timeoutMs);
    const inCallback = this.callbacks.inCallback();
    if (this.starting) await this.starting; // a start waiting for an earlier stop: let it launch, then stop it
    await this.life.stop(deadline);
    if (!(await this.life.within(this.runners.idle(), deadline))) {
      this.life.error(
        new ShutdownError(
          `shutdown: leader work (runWhileLeader) was still running after ${timeoutMs} ms; its signal had aborted`,
        ),
      );
    }
    if (!inCallback) await this.life.within(this.callbacks.drained(), deadline);
  }
}
