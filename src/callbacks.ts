/**
 * User callbacks (spec §4.4). Callbacks run one at a time in the order of the transitions
 * that caused them, on a queue of their own: the lifecycle never waits for user code, so
 * a slow or hung callback cannot delay a health check or a release. Each callback has a
 * deadline (`callbackTimeoutMs`): one that has not settled by then is reported to `onError`
 * and the queue moves on without it. A callback that throws or rejects is logged and
 * passed to the `error` callbacks; an `error` callback that throws is only logged. With
 * no `error` callback nothing is thrown anywhere.
 *
 * Callbacks may call back into the lock (`onLost(() => lock.shutdown())`): `inCallback()`
 * tells the lock that a call comes from inside one of its running callbacks, so that it
 * does not wait for the queue that callback is part of.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Clock } from './clock.js';
import { CallbackError } from './errors.js';
import type { Logger } from './logger.js';
import type { SpecState } from './state.js';
import type { Term } from './term.js';

/** A callback for `released`, `lost`, `acquireFailed`, `stopped`. Sync or async. */
export type Callback = () => void | Promise<void>;
/** Called with the new leadership term when the lock is acquired. */
export type AcquiredCallback = (term: Term) => void | Promise<void>;
/**
 * Called on every change between the specification's six states with the state left and
 * the state entered (a takeover fence is not one: it is reported as ACQUIRING -> LEADER
 * when the term opens).
 */
export type StateChangeCallback = (from: SpecState, to: SpecState) => void | Promise<void>;
/** What `onTakeoverFence` receives: how long the term waits after the grant. */
export interface TakeoverFence {
  readonly delayMs: number;
}
/** Called when the lock is granted but its term waits for the takeover fence. */
export type TakeoverFenceCallback = (fence: TakeoverFence) => void | Promise<void>;
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
  takeoverFence: TakeoverFenceCallback;
  stateChange: StateChangeCallback;
  newLeader: NewLeaderCallback;
  error: ErrorCallback;
}

/** The events callbacks can be registered for. */
export type EventName = keyof CallbackMap;

/** Options of the `on*` registrations. */
export interface ListenerOptions {
  /** Aborting it unregisters the callback. */
  signal?: AbortSignal;
}

/**
 * The callbacks of one election: event name to callback type, with an `error` event that
 * failures of the others are reported to. `LeaderLock`'s is {@link CallbackMap};
 * `PartitionedLeadership`'s is `PartitionCallbackMap`.
 */
export type EventMap<M> = { [K in keyof M]: (...args: never[]) => unknown } & { error: ErrorCallback };

type Args<M, E extends keyof M> = M[E] extends (...args: infer A) => unknown ? A : never;

interface Invocation {
  readonly owner: object;
  running: boolean;
}

const scope = new AsyncLocalStorage<Invocation>();

export class Callbacks<M extends EventMap<M> = CallbackMap> {
  private readonly lists = new Map<keyof M, M[keyof M][]>();
  private tail: Promise<void> = Promise.resolve();
  /** Callbacks that have not settled yet, deadline passed or not, and when each started. */
  private readonly unsettled = new Map<object, { event: keyof M & string; since: number }>();

  constructor(
    private readonly logger: Logger,
    private readonly clock: Clock,
    private readonly timeoutMs: number,
  ) {}

  private list<E extends keyof M>(event: E): M[E][] {
    let list = this.lists.get(event);
    if (!list) {
      list = [];
      this.lists.set(event, list);
    }
    return list as M[E][];
  }

  add<E extends keyof M & string, F extends M[E]>(event: E, fn: F, options: ListenerOptions = {}): F {
    const name = `on${event[0]?.toUpperCase()}${event.slice(1)}`;
    if (typeof fn !== 'function') throw new TypeError(`${name} expects a function, received ${typeof fn}`);
    if (typeof options !== 'object' || options === null) {
      throw new TypeError(`${name} options must be an object, received ${String(options)}`);
    }
    const { signal } = options;
    if (signal !== undefined && !(signal instanceof AbortSignal)) {
      throw new TypeError(`${name} options.signal must be an AbortSignal, received ${String(signal)}`);
    }
    if (signal?.aborted) return fn;
    const list = this.list(event);
    list.push(fn);
    signal?.addEventListener(
      'abort',
      () => {
        const i = list.indexOf(fn);
        if (i >= 0) list.splice(i, 1);
      },
      { once: true },
    );
    return fn;
  }

  /** Queue the callbacks of `event`; they run after every earlier queued callback. */
  emit<E extends keyof M & string>(event: E, ...args: Args<M, E>): void {
    const fns = [...this.list(event)] as unknown as ((...a: Args<M, E>) => unknown)[];
    if (fns.length === 0) return;
    this.tail = this.tail.then(async () => {
      for (const fn of fns) await this.invoke(event, fn, args);
    });
  }

  /** Resolves when every callback queued so far has settled or passed its deadline. */
  drained(): Promise<void> {
    return this.tail;
  }

  /**
   * The callback unsettled the longest past its deadline (`callbackTimeoutMs`): which event,
   * and for how long it has run. Null if none (`lock.health()`).
   */
  hung(): { event: keyof M & string; ms: number } | null {
    let worst: { event: keyof M & string; ms: number } | null = null;
    for (const { event, since } of this.unsettled.values()) {
      const ms = this.clock.now() - since;
      if (ms > this.timeoutMs && (!worst || ms > worst.ms)) worst = { event, ms };
    }
    return worst;
  }

  /** True when called from inside one of this queue's callbacks while it runs. */
  inCallback(): boolean {
    const invocation = scope.getStore();
    return invocation?.owner === this && invocation.running;
  }

  private async invoke<E extends keyof M & string>(
    event: E,
    fn: (...a: Args<M, E>) => unknown,
    args: Args<M, E>,
  ): Promise<void> {
    const invocation: Invocation = { owner: this, running: true };
    let timer: unknown;
    const deadline = new Promise<'timeout'>((resolve) => {
      timer = this.clock.setTimeout(() => resolve('timeout'), this.timeoutMs);
    });
    try {
      const run = scope.run(invocation, async () => {
        await fn(...args);
      });
      const key = {};
      this.unsettled.set(key, { event, since: this.clock.now() });
      run.then(
        () => this.unsettled.delete(key),
        () => this.unsettled.delete(key),
      );
      const first = await Promise.race([run, deadline]);
      if (first === 'timeout') {
        run.catch(() => {}); // it may still reject later: nobody is listening any more
        await this.failed(event, new CallbackError(event as EventName, null, this.timeoutMs));
      }
    } catch (err) {
      await this.failed(event, new CallbackError(event as EventName, err));
    } finally {
      invocation.running = false;
      this.clock.clearTimeout(timer);
    }
  }

  private async failed(event: keyof M & string, error: CallbackError): Promise<void> {
    if (event === 'error') {
      this.logger.error({ event: 'error_callback_failed', error: error.message }, 'error_callback_failed');
      return;
    }
    this.logger.error({ event: 'callback_failed', callback: event, error: error.message }, 'callback_failed');
    const onErrors = [...this.list('error')] as unknown as ((e: Error) => unknown)[];
    for (const onError of onErrors) await this.invoke('error', onError as never, [error] as never);
  }
}
