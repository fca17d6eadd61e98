/**
 * The state of a `FakeLeaderLock` and its transitions, in the order the real lock carries
 * them out (src/leader/fsm.ts, fsm-actions.ts): the term's signal aborts before the state
 * change is reported, `onStateChange` before `onAcquired`/`onLost`/`onReleased`,
 * `onStopped` last. It owns every piece of the fake's state; the public class
 * (fake-leader-lock.ts) checks its arguments and calls in here.
 */
import type { Callbacks } from '../core/callbacks.js';
import { type Deferred, deferred, earlier } from '../core/clock.js';
import { ShutdownError } from '../core/errors.js';
import type { CallbackMap } from '../core/lock-callbacks.js';
import type { Runners } from '../core/runner.js';
import { LockState, type SpecState } from '../core/state.js';
import { type Term, TermEndedError } from '../core/term.js';
import { type LeadershipWaiters, within } from '../core/waiting.js';
import type { ResolvedFakeOptions } from './options.js';

/** `Term.host` of the fake's terms. */
export const FAKE_HOST = 'fake';

/** A voluntary release under way (`stepDown()`, `handoverTo()`, or `shutdown()` while leader). */
export interface FakeRelease {
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

export interface FakeLifecycleDeps {
  readonly o: ResolvedFakeOptions;
  readonly autoReacquire: boolean;
  readonly callbacks: Callbacks<CallbackMap>;
  readonly runners: Runners<Term>;
  readonly waiters: LeadershipWaiters;
}

export class FakeLifecycle {
  private st: SpecState = LockState.STOPPED;
  private active: { term: Term; controller: AbortController } | null = null;
  private nextTermId = 1;
  private current: Run | null = null;
  private releasing: FakeRelease | null = null;
  private lastLeaderSeen: string | null = null;
  private lastError: Error | null = null;
  /** The last run ended without shutdown() (a loss without autoReacquire, a step-down past its timeout). */
  private endedOnItsOwn: Error | null = null;

  constructor(private readonly d: FakeLifecycleDeps) {}

  get state(): SpecState {
    return this.st;
  }
  get isLeader(): boolean {
    return this.st === LockState.LEADER && this.active !== null;
  }
  get term(): Term | null {
    return this.active?.term ?? null;
  }
  /** The run in progress (started, not yet STOPPED), or null. */
  get run(): Readonly<Run> | null {
    return this.current;
  }
  /** The release under way, or null. */
  get release(): FakeRelease | null {
    return this.releasing;
  }
  /** Why the last run ended without shutdown(), while no run is in progress. */
  get stoppedOnItsOwn(): Error | null {
    return this.current ? null : this.endedOnItsOwn;
  }

  /** A new run: following, its first attempt waiting behind the holder. */
  launch(): void {
    this.current = { stopping: false, ended: deferred<void>() };
    this.endedOnItsOwn = null;
    this.lastLeaderSeen = null;
    this.move(LockState.FOLLOWER);
    this.move(LockState.ACQUIRING); // the first attempt is immediate; it waits behind the holder
  }

  /** Become leader: a term opens, its runs start, waiters and `onAcquired` are told. */
  open(): Term {
    const { o, runners, waiters, callbacks } = this.d;
    this.move(LockState.ACQUIRING);
    this.move(LockState.LEADER);
    this.lastLeaderSeen = o.id;
    const controller = new AbortController();
    const term: Term = {
      id: this.nextTermId++,
      acquiredAt: new Date(),
      signal: controller.signal,
      epoch: null,
      host: FAKE_HOST,
    };
    this.active = { term, controller };
    runners.start(term);
    waiters.tell(true);
    this.log('info', 'lock_acquired', { term: term.id });
    callbacks.emit('acquired', term);
    return term;
  }

  /** An involuntary loss: the term ends, `onLost`; then follow again or stop. */
  lose(error: Error | undefined): void {
    const { callbacks } = this.d;
    this.endTerm(error ? `leadership lost: ${error.message}` : 'leadership lost');
    this.log('warn', 'lock_lost', { err: error ?? undefined });
    if (this.d.autoReacquire) {
      this.move(LockState.FOLLOWER);
      callbacks.emit('lost');
      this.move(LockState.ACQUIRING); // a loss attempts again at once
    } else {
      this.move(LockState.STOPPED);
      callbacks.emit('lost');
      callbacks.emit('stopped');
      this.ended();
    }
  }

  /** Another candidate leads: `onNewLeader(id)`, once per change of leader. */
  seen(id: string): void {
    if (id === this.lastLeaderSeen) return;
    this.lastLeaderSeen = id;
    this.d.callbacks.emit('newLeader', id);
  }

  /** Stop the run: release if leader (or take over the release under way), else STOPPED at once. */
  async stop(deadline: number | null): Promise<void> {
    const run = this.current;
    if (!run) return;
    run.stopping = true;
    const current = this.releasing;
    if (this.st === LockState.LEADER) await this.beginRelease('shutdown', 'stop', deadline).done;
    else if (this.st === LockState.RELEASING && current) {
      current.after = 'stop';
      current.bound(earlier(current.deadline, deadline));
      await current.done;
    } else if (this.st !== LockState.STOPPED) {
      this.move(LockState.STOPPED);
      this.d.callbacks.emit('stopped');
      this.ended();
    }
  }

  /** End the term now (the signal aborts), enter RELEASING, and wait for the runs to return. */
  beginRelease(
    why: string,
    after: 'follow' | 'stop',
    deadline: number | null,
    to: string | null = null,
  ): FakeRelease {
    this.endTerm(why);
    this.move(LockState.RELEASING);
    const { clock } = this.d.o;
    const expired = deferred<false>();
    let timer: unknown = null;
    const release: FakeRelease = {
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
    const drained = Promise.race([this.d.runners.idle().then(() => true), expired.promise]);
    release.done = drained.then((inTime) => {
      if (timer !== null) clock.clearTimeout(timer);
      this.releasing = null;
      this.released(release, inTime);
    });
    this.releasing = release;
    return release;
  }

  /** Report an error: `onError`, the log, and `health()`'s cause of a stop. */
  error(error: Error): void {
    this.lastError = error;
    this.log('error', 'error', { code: (error as { code?: unknown }).code, err: error });
    this.d.callbacks.emit('error', error);
  }

  /** Clock time `timeoutMs` from now, or null for no limit. */
  deadline(timeoutMs: number | undefined): number | null {
    return timeoutMs === undefined ? null : this.d.o.clock.now() + timeoutMs;
  }

  /** Await `work` until `deadline` (clock time; null: no limit). True if it settled in time. */
  within(work: Promise<void>, deadline: number | null): Promise<boolean> {
    return within(this.d.o.clock, work, deadline);
  }

  /** The release is over: its runs returned in time (FOLLOWER or STOPPED), or not (STOPPED, with an error). */
  private released(release: FakeRelease, inTime: boolean): void {
    const { callbacks } = this.d;
    if (!inTime) {
      const what = release.after === 'follow' ? 'stepDown' : 'shutdown';
      release.expired = new ShutdownError(
        `${what} did not finish within its timeout; the lock's session was closed by force`,
      );
      this.move(LockState.STOPPED);
      this.error(release.expired);
      callbacks.emit('stopped');
      this.ended();
      return;
    }
    const follow = release.after === 'follow' && this.d.autoReacquire;
    this.move(follow ? LockState.FOLLOWER : LockState.STOPPED);
    this.log('info', 'lock_released');
    callbacks.emit('released');
    if (!follow) {
      callbacks.emit('stopped');
      this.ended();
    }
    if (release.to !== null) this.seen(release.to); // the successor took the lock
  }

  private endTerm(why: string): void {
    const a = this.active;
    if (!a) return;
    this.active = null;
    a.controller.abort(new TermEndedError(a.term.id, why));
  }

  /** STOPPED entered: the run is over. */
  private ended(): void {
    const run = this.current;
    this.current = null;
    if (run && !run.stopping)
      this.endedOnItsOwn = this.lastError ?? new Error('the lock stopped without shutdown()');
    this.d.waiters.tell(false);
    run?.ended.resolve();
  }

  private move(to: SpecState): void {
    const from = this.st;
    if (from === to) return;
    this.st = to;
    this.log('info', 'state_change', { from, to });
    this.d.callbacks.emit('stateChange', from, to);
  }

  private log(level: 'info' | 'warn' | 'error', event: string, fields: Record<string, unknown> = {}): void {
    this.d.o.logger[level]({ event, id: this.d.o.id, ...fields }, event);
  }
}
