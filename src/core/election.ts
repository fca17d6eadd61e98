/**
 * `LeaderElection`: what code that leads needs of a `LeaderLock`, and no more. `LeaderLock`
 * implements it, and so does `FakeLeaderLock` (`pgleaderlock/testing`), so that code typed
 * against it runs in production on the real lock and in unit tests on the fake.
 */
import type { ListenerOptions } from './callbacks.js';
import type {
  AcquiredCallback,
  Callback,
  ErrorCallback,
  NewLeaderCallback,
  StateChangeCallback,
  TakeoverFenceCallback,
} from './lock-callbacks.js';
import type { LockHealth } from './lock-health.js';
import type { LeaderWorkHandle } from './runner.js';
import type { LockState } from './state.js';
import type { Term } from './term.js';
import type { LeaderWork } from './work.js';

/** Options of {@link LeaderElection.shutdown} and {@link LeaderElection.stepDown}. */
export interface TimeoutOptions {
  /**
   * How long to wait. When it elapses the lock's session is closed by force (the server
   * releases the lock when it sees the socket close). Default: no limit; every query is
   * still bounded by `queryTimeoutMs`.
   */
  timeoutMs?: number;
}

/** Options of {@link LeaderElection.waitForLeadership}. */
export interface WaitOptions {
  /** Resolve `false` after this long. Default: no limit. */
  timeoutMs?: number;
  /** Abort the wait: the promise rejects with the signal's reason. */
  signal?: AbortSignal;
}

/**
 * The public surface of a `LeaderLock` that needs no database of its own: lifecycle,
 * leadership, leader work, callbacks and probes. Type your code against it to accept a
 * `LeaderLock` or a `FakeLeaderLock` (`pgleaderlock/testing`):
 *
 * ```ts
 * export function startBilling(lock: LeaderElection): LeaderWorkHandle {
 *   return lock.runWhileLeader(async (term) => billUntil(term.signal));
 * }
 * ```
 *
 * Each member means what it means on `LeaderLock` (see its documentation there).
 */
export interface LeaderElection extends AsyncDisposable {
  /** This candidate's id. */
  readonly id: string;
  /** Current state (read-only). */
  readonly state: LockState;
  /** True while this process may act as leader. */
  readonly isLeader: boolean;
  /** The current leadership term, or null when not leader. */
  readonly term: Term | null;
  /** Start the lifecycle. Idempotent. */
  start(): Promise<void>;
  /** Release the lock if held, wait for leader work and callbacks, and stop. Idempotent. */
  shutdown(options?: TimeoutOptions): Promise<void>;
  /** Give up leadership voluntarily; does nothing unless leader. */
  stepDown(options?: TimeoutOptions): Promise<void>;
  /** Hand leadership to the waiting candidate `id`; resolves once it holds the lock. */
  handoverTo(id: string, options?: TimeoutOptions): Promise<void>;
  /** `true` once a term opens, `false` on timeout, when the lock stops, or at once if not started. */
  waitForLeadership(options?: WaitOptions): Promise<boolean>;
  /** Run `fn` in every leadership term; its `term.signal` aborts when the term ends. */
  runWhileLeader(fn: LeaderWork): LeaderWorkHandle;
  /** For liveness and readiness probes. */
  health(): LockHealth;
  /** Register a callback for when leadership is acquired; it receives the new term. Returns `fn`. */
  onAcquired<F extends AcquiredCallback>(fn: F, options?: ListenerOptions): F;
  /** Register a callback for a voluntary release. Returns `fn`. */
  onReleased<F extends Callback>(fn: F, options?: ListenerOptions): F;
  /** Register a callback for an involuntary loss. Returns `fn`. */
  onLost<F extends Callback>(fn: F, options?: ListenerOptions): F;
  /** Register a callback for each attempt that found the lock held by another session. Returns `fn`. */
  onAcquireFailed<F extends Callback>(fn: F, options?: ListenerOptions): F;
  /** Register a callback for entering STOPPED. Returns `fn`. */
  onStopped<F extends Callback>(fn: F, options?: ListenerOptions): F;
  /** Register a callback for a grant whose term waits for the takeover delay. Returns `fn`. */
  onTakeoverFence<F extends TakeoverFenceCallback>(fn: F, options?: ListenerOptions): F;
  /** Register a callback for another candidate becoming leader; it receives its id. Returns `fn`. */
  onNewLeader<F extends NewLeaderCallback>(fn: F, options?: ListenerOptions): F;
  /** Register a callback for every state change `(from, to)`. Returns `fn`. */
  onStateChange<F extends StateChangeCallback>(fn: F, options?: ListenerOptions): F;
  /** Register a callback for errors (nothing is ever thrown at the caller). Returns `fn`. */
  onError<F extends ErrorCallback>(fn: F, options?: ListenerOptions): F;
}
