/**
 * User callbacks (spec §4.4). Callbacks run one at a time in the order of the transitions
 * that caused them, on a queue of their own: the lifecycle never waits for user code, so
 * a slow or hung callback cannot delay a health check or a release. A callback that
 * throws or rejects is logged and passed to the `error` callbacks; an `error` callback
 * that throws is only logged. With no `error` callback nothing is thrown anywhere.
 */
import { CallbackError } from './errors.js';
import type { Logger } from './logger.js';
import type { LockState } from './state.js';
import type { Term } from './term.js';

/** A callback for `released`, `lost`, `acquireFailed`, `stopped`. Sync or async. */
export type Callback = () => void | Promise<void>;
/** Called with the new leadership term when the lock is acquired. */
export type AcquiredCallback = (term: Term) => void | Promise<void>;
/** Called on every state change with the state left and the state entered. */
export type StateChangeCallback = (from: LockState, to: LockState) => void | Promise<void>;
/** Called with the id of another candidate that became leader. */
export type NewLeaderCallback = (id: string) => void | Promise<void>;
/** Called with every error the lifecycle meets (it never throws them at you). */
export type ErrorCallback = (error: Error) => void | Promise<void>;

export interface CallbackMap {
  acquired: AcquiredCallback;
  released: Callback;
  lost: Callback;
  acquireFailed: Callback;
  stopped: Callback;
  stateChange: StateChangeCallback;
  newLeader: NewLeaderCallback;
  error: ErrorCallback;
}

export type EventName = keyof CallbackMap;

type Args<E extends EventName> = Parameters<CallbackMap[E]>;

export class Callbacks {
  private readonly lists: { [E in EventName]: CallbackMap[E][] } = {
    acquired: [],
    released: [],
    lost: [],
    acquireFailed: [],
    stopped: [],
    stateChange: [],
    newLeader: [],
    error: [],
  };
  private tail: Promise<void> = Promise.resolve();

  constructor(private readonly logger: Logger) {}

  add<E extends EventName, F extends CallbackMap[E]>(event: E, fn: F): F {
    if (typeof fn !== 'function') {
      throw new TypeError(
        `on${event[0]?.toUpperCase()}${event.slice(1)} expects a function, received ${typeof fn}`,
      );
    }
    this.lists[event].push(fn);
    return fn;
  }

  /** Queue the callbacks of `event`; they run after every earlier queued callback. */
  emit<E extends EventName>(event: E, ...args: Args<E>): void {
    const fns = [...this.lists[event]] as ((...a: Args<E>) => unknown)[];
    if (fns.length === 0) return;
    this.tail = this.tail.then(async () => {
      for (const fn of fns) await this.invoke(event, fn, args);
    });
  }

  /** Resolves when every callback queued so far has settled. */
  drained(): Promise<void> {
    return this.tail;
  }

  private async invoke<E extends EventName>(
    event: E,
    fn: (...a: Args<E>) => unknown,
    args: Args<E>,
  ): Promise<void> {
    try {
      await fn(...args);
    } catch (err) {
      if (event === 'error') {
        this.logger.error({ event: 'error_callback_failed', error: String(err) }, 'error_callback_failed');
        return;
      }
      const wrapped = new CallbackError(event, err);
      this.logger.error(
        { event: 'callback_failed', callback: event, error: wrapped.message },
        'callback_failed',
      );
      for (const onError of [...this.lists.error]) {
        await this.invoke('error', onError, [wrapped]);
      }
    }
  }
}
