/** The callbacks of a `LeaderLock` (`onAcquired`, `onLost`, …): what each receives. */
import type { Callbacks, ErrorCallback } from './callbacks.js';
import type { SpecState } from './state.js';
import type { Term } from './term.js';

export type { ErrorCallback } from './callbacks.js';

/** A callback for `released`, `lost`, `acquireFailed`, `stopped`. Sync or async. */
export type Callback = () => void | Promise<void>;
/** Called with the new leadership term when the lock is acquired. */
export type AcquiredCallback = (term: Term) => void | Promise<void>;
/**
 * Called on every change between the specification's six states with the state left and
 * the state entered (a takeover delay is not one: it is reported as ACQUIRING -> LEADER
 * when the term opens).
 */
export type StateChangeCallback = (from: SpecState, to: SpecState) => void | Promise<void>;
/** What `onTakeoverFence` receives: how long the term waits after the grant. */
export interface TakeoverFence {
  /** How long the lock is held before the term opens, in milliseconds. */
  readonly delayMs: number;
  /**
   * When the delay began, just after the grant, on the lock's clock (`performance.now()`
   * unless the `clock` option gives another; the clock of `leaseExpiresAt`). The callback
   * itself runs after the callbacks queued before it, so it can be later.
   */
  readonly since: number;
}
/** Called when the lock is granted but its term waits for the takeover delay. */
export type TakeoverFenceCallback = (fence: TakeoverFence) => void | Promise<void>;
/** Called with the id of another candidate that became leader. */
export type NewLeaderCallback = (id: string) => void | Promise<void>;

export interface CallbackMap {
  acquired: AcquiredCallback;
  released: Callback;
  lost: Callback;
  acquireFailed: Callback;
  stopped: Callback;
  takeoverFence: TakeoverFenceCallback;
  stateChange: StateChangeCallback;
  newLeader: NewLeaderCallback;
  error: ErrorCallback;
}

/** The events callbacks can be registered for. */
export type EventName = keyof CallbackMap;

/** A lock's callback queue. */
export type LockCallbacks = Callbacks<CallbackMap>;
