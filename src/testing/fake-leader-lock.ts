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
import { type Deferred, deferred } from '../core/clock.js';
import { LockError, ShutdownError } from '../core/errors.js';
import { type LeaderWorkHandle, Runners } from '../core/runner.js';
import { rejecting, show, timeoutOf } from '../core/validate.js';
import type { LeaderElection } from '../leader/election.js';
import { assessHealth, type LockHealth } from '../leader/health.js';
import type { TimeoutOptions, WaitOptions } from '../leader/leader-lock.js';
import type {
  AcquiredCallback,
  Callback,
  CallbackMap,
  ErrorCallback,
  NewLeaderCallback,
  StateChangeCallback,
  TakeoverFenceCallback,
} from '../leader/lock-callbacks.js';
import { earlier } from '../leader/release.js';
import { LockState, type SpecState } from '../leader/state.js';
import { type Term, TermEndedError } from '../leader/term.js';
import { type LeaderWork, LeaderWorkError } from '../leader/work.js';
import { checkKeys, type FakeOptions, type ResolvedFakeOptions, resolveFake } from './options.js';

/** Options of {@link FakeLeaderLock}. */
export interface FakeLeaderLockOptions extends FakeOptions {
  /**
   * As on `LeaderLock`: after a loss (`lose()`) or a `stepDown()`, follow again (true) or
   * stop (false). Default true.
   */
  autoReacquire?: boolean;
}

const KNOWN = ['id', 'callbackTimeoutMs', 'clock', 'logger', 'autoReacquire'] as const;

/** `Term.host` of the fake's terms. */
export const FAKE_HOST = 'fake';

/** A voluntary release under way (`stepDown()`, `handoverTo()`, or `shutdown()` while leader). */
interface Release {
  /** What follows: FOLLOWER (a step-down with autoReacquire) or STOPPED. */
  after: 'follow' | 'stop';
  /** `handoverTo(id)`: the successor, who leads once the release is over. */
  readonly to: string | null;
  /** The deadline passed before the runs returned: the release failed with this. */
  expired: ShutdownError | null;
  /** Resolves when the release is over, however it ended. */
  done: Promise<void>;
  /** Arm (or re-arm) the deadline past which the release fails with a ShutdownError. */
  bound(deadline: number | null): void;
  deadline: number | null;
}

/** One run, from `start()` to STOPPED. */
interface Run {
  stopping: boolean;
  readonly ended: Deferred<void>;
}

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
  private readonly o: ResolvedFakeOptions;
  private readonly autoReacquire: boolean;
  private readonly callbacks: Callbacks<CallbackMap>;
  private readonly runners: Runners<Term>;
  private st: SpecState = LockState.STOPPED;
  private active: { term: Term; controller: AbortController } | null = null;
  private nextTermId = 1;
  private run: Run | null = null;
  private starting: Promise<void> | null = null;
  private release: Release | null = null;
  private lastLeaderSeen: string | null = null;
  private lastError: Error | null = null;
  /** The last run ended without shutdown() (a loss without autoReacquire, a step-down past its timeout). */
  private endedOnItsOwn: Error | null = null;
  private readonly waiters = new Set<(leading: boolean) => void>();

  constructor(options: FakeLeaderLockOptions = {}) {
    this.o = resolveFake('FakeLeaderLock', options);
    checkKeys('FakeLeaderLock', options, KNOWN);
    const auto = options.autoReacquire ?? true;
    if (typeof auto !== 'boolean')
      throw new TypeError(`autoReacquire must be a boolean, received ${show(auto)}`);
    this.autoReacquire = auto;
    this.callbacks = new Callbacks<CallbackMap>(this.o.logger, this.o.clock, this.o.callbackTimeoutMs);
    this.runners = new Runners<Term>(
      (term, err) => this.error(new LeaderWorkError(term.id, err)),
      () => this.o.clock.now(),
    );
  }

  /** This candidate's id. */
  get id(): string {
    return this.o.id;
  }

  /** Current state: `'stopped'`, `'acquiring'` (following), `'leader'`, `'releasing'`, or `'follower'` after a step-down. */
  get state(): LockState {
    return this.st;
  }

  /** True while LEADER with an open term; false from the moment `stepDown()`/`shutdown()` is called. */
  get isLeader(): boolean {
    return this.st === LockState.LEADER && this.active !== null;
  }

  /** The current term, or null when not leader. */
  get term(): Term | null {
    return this.active?.term ?? null;
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
      if (!this.run || this.run.stopping) {
        throw new Error('elect(): the lock is not started (call start() first) or is shutting down');
      }
      if (this.st !== LockState.FOLLOWER && this.st !== LockState.ACQUIRING) {
        throw new Error(`elect(): the lock must be following, but it is ${this.st}`);
      }
      const inCallback = this.callbacks.inCallback();
      this.move(LockState.ACQUIRING);
      this.move(LockState.LEADER);
      this.lastLeaderSeen = this.o.id;
      const controller = new AbortController();
      const term: Term = {
        id: this.nextTermId++,
        acquiredAt: new Date(),
        signal: controller.signal,
        epoch: null,
        host: FAKE_HOST,
      };
      this.active = { term, controller };
      this.runners.start(term);
      for (const w of [...this.waiters]) w(true);
      this.log('info', 'lock_acquired', { term: term.id });
      this.callbacks.emit('acquired', term);
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
      if (!this.isLeader) throw new Error(`lose(): the lock is not leader (state ${this.st})`);
      const inCallback = this.callbacks.inCallback();
      this.endTerm(error ? `leadership lost: ${error.message}` : 'leadership lost');
      this.log('warn', 'lock_lost', { error: error?.message });
      if (this.autoReacquire) {
        this.move(LockState.FOLLOWER);
        this.callbacks.emit('lost');
        this.move(LockState.ACQUIRING); // a loss attempts again at once
      } else {
        this.move(LockState.STOPPED);
        this.callbacks.emit('lost');
        this.callbacks.emit('stopped');
        this.ended();
      }
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
      if (!this.run || this.run.stopping) {
        throw new Error('newLeader(): the lock is not started (call start() first) or is shutting down');
      }
      const inCallback = this.callbacks.inCallback();
      if (this.isLeader) await this.lose();
      if (id !== this.lastLeaderSeen) {
        this.lastLeaderSeen = id;
        this.callbacks.emit('newLeader', id);
      }
      if (!inCallback) await this.callbacks.drained();
    });
  }

  // ---- LeaderElection ----

  start(): Promise<void> {
    if (this.starting) return this.starting;
    if (this.run && !this.run.stopping) return Promise.resolve();
    this.starting = (async () => {
      // called during a shutdown: start again once that shutdown is over
      while (this.run) await this.run.ended.promise;
      this.launch();
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
      const deadline = this.deadline(timeoutMs);
      const inCallback = this.callbacks.inCallback();
      const current = this.release;
      if (this.st === LockState.RELEASING && current) {
        current.bound(earlier(current.deadline, deadline));
        await current.done;
      } else if (this.st === LockState.LEADER) {
        await this.beginRelease('step-down', 'follow', deadline).done;
      } else {
        return;
      }
      if (!inCallback) await this.within(this.callbacks.drained(), deadline);
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
      if (typeof id !== 'string' || id.length === 0) {
        throw new TypeError(`handoverTo: id must be a non-empty string, received ${show(id)}`);
      }
      timeoutOf('handoverTo', options);
      const refuse = (why: string): LockError =>
        new LockError(`cannot hand over to "${id}": ${why}`, { code: 'ERR_PGLEADERLOCK_HANDOVER' });
      const busy = (): LockError | null => {
        if (this.run?.stopping) return refuse('the lock is shutting down');
        if (this.st === LockState.RELEASING) return refuse('a stepDown is under way');
        if (!this.isLeader) return refuse(`this lock is not the leader (state ${this.st})`);
        return null;
      };
      const early = busy() ?? (id === this.o.id ? refuse('that is this lock') : null);
      if (early) throw early;
      const inCallback = this.callbacks.inCallback();
      await null; // the real lock confirms that the candidate waits before the term ends
      const late = busy();
      if (late) throw late;
      const deadline = this.o.clock.now() + this.o.callbackTimeoutMs;
      const release = this.beginRelease(`handover to ${id}`, 'follow', deadline, id);
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
      const timeoutMs = timeoutOf('waitForLeadership', options);
      const { signal } = options;
      if (signal !== undefined && !(signal instanceof AbortSignal)) {
        throw new TypeError(`waitForLeadership signal must be an AbortSignal, received ${show(signal)}`);
      }
      if (signal?.aborted) return Promise.reject(signal.reason);
      if (this.isLeader) return Promise.resolve(true);
      if (this.run === null && this.starting === null) return Promise.resolve(false);
      const { clock } = this.o;
      return new Promise<boolean>((resolve, reject) => {
        let timer: unknown;
        const finish = (): void => {
          this.waiters.delete(onLeading);
          signal?.removeEventListener('abort', onAbort);
          if (timer !== undefined) clock.clearTimeout(timer);
        };
        const onLeading = (leading: boolean): void => {
          finish();
          resolve(leading);
        };
        const onAbort = (): void => {
          finish();
          reject(signal?.reason);
        };
        this.waiters.add(onLeading);
        signal?.addEventListener('abort', onAbort, { once: true });
        if (timeoutMs !== undefined) timer = clock.setTimeout(() => onLeading(false), timeoutMs);
      });
    });
  }

  runWhileLeader(fn: LeaderWork): LeaderWorkHandle {
    if (typeof fn !== 'function')
      throw new TypeError(`runWhileLeader expects a function, received ${show(fn)}`);
    return this.runners.add(fn, this.term);
  }

  health(): LockHealth {
    return assessHealth({
      state: this.st,
      isLeader: this.isLeader,
      running: this.run !== null,
      stopping: this.run?.stopping ?? false,
      stoppedOnItsOwn: this.run ? null : this.endedOnItsOwn,
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

  private launch(): void {
    this.run = { stopping: false, ended: deferred<void>() };
    this.endedOnItsOwn = null;
    this.lastLeaderSeen = null;
    this.move(LockState.FOLLOWER);
    this.move(LockState.ACQUIRING); // the first attempt is immediate; it waits behind the holder
  }

  private async stop(timeoutMs: number | undefined): Promise<void> {
    const deadline = this.deadline(timeoutMs);
    const inCallback = this.callbacks.inCallback();
    if (this.starting) await this.starting; // a start waiting for an earlier stop: let it launch, then stop it
    const run = this.run;
    if (run) {
      run.stopping = true;
      const current = this.release;
      if (this.st === LockState.LEADER) await this.beginRelease('shutdown', 'stop', deadline).done;
      else if (this.st === LockState.RELEASING && current) {
        current.after = 'stop';
        current.bound(earlier(current.deadline, deadline));
        await current.done;
      } else if (this.st !== LockState.STOPPED) {
        this.move(LockState.STOPPED);
        this.callbacks.emit('stopped');
        this.ended();
      }
    }
    if (!(await this.within(this.runners.idle(), deadline))) {
      this.error(
        new ShutdownError(
          `shutdown: leader work (runWhileLeader) was still running after ${timeoutMs} ms; its signal had aborted`,
        ),
      );
    }
    if (!inCallback) await this.within(this.callbacks.drained(), deadline);
  }

  /** End the term now (the signal aborts), enter RELEASING, and wait for the runs to return. */
  private beginRelease(
    why: string,
    after: 'follow' | 'stop',
    deadline: number | null,
    to: string | null = null,
  ): Release {
    this.endTerm(why);
    this.move(LockState.RELEASING);
    const { clock } = this.o;
    const expired = deferred<false>();
    let timer: unknown = null;
    const release: Release = {
      after,
      to,
      expired: null,
      deadline,
      bound: (d) => {
        release.deadline = d;
        if (timer !== null) clock.clearTimeout(timer);
        timer =
          d === null ? null : clock.setTimeout(() => expired.resolve(false), Math.max(0, d - clock.now()));
      },
      done: Promise.resolve(),
    };
    release.bound(deadline);
    const drained = Promise.race([this.runners.idle().then(() => true), expired.promise]);
    release.done = drained.then((inTime) => {
      if (timer !== null) clock.clearTimeout(timer);
      this.release = null;
      if (!inTime) {
        const what = release.after === 'follow' ? 'stepDown' : 'shutdown';
        release.expired = new ShutdownError(
          `${what} did not finish within its timeout; the lock's session was closed by force`,
        );
        this.move(LockState.STOPPED);
        this.error(release.expired);
        this.callbacks.emit('stopped');
        this.ended();
        return;
      }
      const follow = release.after === 'follow' && this.autoReacquire;
      this.move(follow ? LockState.FOLLOWER : LockState.STOPPED);
      this.log('info', 'lock_released');
      this.callbacks.emit('released');
      if (!follow) {
        this.callbacks.emit('stopped');
        this.ended();
      }
      if (release.to !== null && release.to !== this.lastLeaderSeen) {
        this.lastLeaderSeen = release.to; // the successor took the lock
        this.callbacks.emit('newLeader', release.to);
      }
    });
    this.release = release;
    return release;
  }

  private endTerm(why: string): void {
    const a = this.active;
    if (!a) return;
    this.active = null;
    a.controller.abort(new TermEndedError(a.term.id, why));
  }

  /** STOPPED entered: the run is over. */
  private ended(): void {
    const run = this.run;
    this.run = null;
    if (run && !run.stopping)
      this.endedOnItsOwn = this.lastError ?? new Error('the lock stopped without shutdown()');
    for (const w of [...this.waiters]) w(false);
    run?.ended.resolve();
  }

  private move(to: SpecState): void {
    const from = this.st;
    if (from === to) return;
    this.st = to;
    this.log('info', 'state_change', { from, to });
    this.callbacks.emit('stateChange', from, to);
  }

  private error(error: Error): void {
    this.lastError = error;
    this.log('error', 'error', { code: (error as { code?: unknown }).code, error: error.message });
    this.callbacks.emit('error', error);
  }

  private log(level: 'info' | 'warn' | 'error', event: string, fields: Record<string, unknown> = {}): void {
    this.o.logger[level]({ event, id: this.o.id, ...fields }, event);
  }

  private deadline(timeoutMs: number | undefined): number | null {
    return timeoutMs === undefined ? null : this.o.clock.now() + timeoutMs;
  }

  /** Await `work` until `deadline` (clock time; null: no limit). True if it settled in time. */
  private async within(work: Promise<void>, deadline: number | null): Promise<boolean> {
    if (deadline === null) {
      await work;
      return true;
    }
    const { clock } = this.o;
    let timer: unknown;
    const timeout = new Promise<false>((resolve) => {
      timer = clock.setTimeout(() => resolve(false), Math.max(0, deadline - clock.now()));
    });
    try {
      return await Promise.race([work.then(() => true as const), timeout]);
    } finally {
      clock.clearTimeout(timer);
    }
  }
}
