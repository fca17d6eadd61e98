/**
 * User callbacks (spec §4.4), for both elections. Callbacks run one at a time in the order of the transitions
 * that caused them, on a queue of their own: the lifecycle never waits for user code, so
 * a slow or hung callback cannot delay a health check or a release. Each callback has a
 * deadline (`callbackTimeoutMs`): one that has not settled by then is reported to `onError`
 * and the queue moves on without it. A callback that throws or rejects is logged and
 * passed to the `error` callbacks; an `error` callback that throws is only logged. With
 * no `error` callback nothing is thrown anywhere.
 *
 * Errors are never silent: with no `error` callback and no `logger` option, each distinct
 * error (by `code`) is printed once, with its causes, through `process.emitWarning` (type
 * `PgLeaderLockWarning`). Registering an `error` callback or passing a logger silences it.
 *
 * Callbacks may call back into the lock (`onLost(() => lock.shutdown())`): `inCallback()`
 * tells the lock that a call comes from inside one of its running callbacks, so that it
 * does not wait for the queue that callback is part of.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Clock } from './clock.js';
import { CallbackError, describeChain } from './errors.js';
import { isDefaultLogger, type Logger } from './logger.js';

/** Called with every error (nothing is ever thrown at the caller). Sync or async. */
export type ErrorCallback = (error: Error) => void | Promise<void>;

/** Options of the `on*` registrations. */
export interface ListenerOptions {
  /** Aborting it unregisters the callback. */
  signal?: AbortSignal;
}

/**
 * The callbacks of one election: event name to callback type, with an `error` event that
 * failures of the others are reported to. `LeaderLock`'s is `CallbackMap`
 * (lock-callbacks.ts); `PartitionedLeadership`'s is `PartitionCallbackMap`.
 */
export type EventMap<M> = { [K in keyof M]: (...args: never[]) => unknown } & { error: ErrorCallback };

type Args<M, E extends keyof M> = M[E] extends (...args: infer A) => unknown ? A : never;

interface Invocation {
  readonly owner: object;
  running: boolean;
}

const scope = new AsyncLocalStorage<Invocation>();

export class Callbacks<M extends EventMap<M>> {
  private readonly lists = new Map<keyof M, M[keyof M][]>();
  private tail: Promise<void> = Promise.resolve();
  /** Callbacks that have not settled yet, deadline passed or not, and when each started. */
  private readonly unsettled = new Map<
    object,
    { event: keyof M & string; since: number; overdue: boolean }
  >();

  /** The codes already printed as a process warning. */
  private readonly warned = new Set<string>();

  constructor(
    private readonly logger: Logger,
    private readonly clock: Clock,
    private readonly timeoutMs: number,
    /** Who reports, in a warning: `lock "jobs"`, `partitioned "jobs"`, `watch 1,2`. */
    private readonly label = 'pgleaderlock',
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
    if (event === 'error') this.unheard(args[0] as unknown as Error);
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
    for (const { event, since, overdue } of this.unsettled.values()) {
      const ms = this.clock.now() - since;
      if ((overdue || ms > this.timeoutMs) && (!worst || ms > worst.ms)) worst = { event, ms };
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
    // one record for the deadline and for hung(): a callback reported past its deadline is
    // hung for health() from that moment (a timer may fire a millisecond early)
    const entry = { event, since: this.clock.now(), overdue: false };
    let timer: unknown;
    const deadline = new Promise<'timeout'>((resolve) => {
      timer = this.clock.setTimeout(() => {
        entry.overdue = true;
        resolve('timeout');
      }, this.timeoutMs);
    });
    try {
      const run = scope.run(invocation, async () => {
        await fn(...args);
      });
      const key = {};
      this.unsettled.set(key, entry);
      run.then(
        () => this.unsettled.delete(key),
        () => this.unsettled.delete(key),
      );
      const first = await Promise.race([run, deadline]);
      if (first === 'timeout') {
        run.catch(() => {}); // it may still reject later: nobody is listening any more
        await this.failed(event, new CallbackError(event, null, this.timeoutMs));
      }
    } catch (err) {
      await this.failed(event, new CallbackError(event, err));
    } finally {
      invocation.running = false;
      this.clock.clearTimeout(timer);
    }
  }

  private async failed(event: keyof M & string, error: CallbackError): Promise<void> {
    if (event === 'error') {
      this.logger.error({ event: 'error_callback_failed', err: error }, 'error_callback_failed');
      return;
    }
    this.logger.error({ event: 'callback_failed', callback: event, err: error }, 'callback_failed');
    this.unheard(error);
    const onErrors = [...this.list('error')] as unknown as ((e: Error) => unknown)[];
    for (const onError of onErrors) await this.invoke('error', onError as never, [error] as never);
  }

  /**
   * An error nobody hears (no `error` callback, no logger): printed once per code as a
   * process warning, with its causes and how to silence it.
   */
  private unheard(error: Error): void {
    if (this.list('error').length > 0 || !isDefaultLogger(this.logger)) return;
    const raw = (error as { code?: unknown }).code;
    const code = typeof raw === 'string' ? raw : error.name;
    if (this.warned.has(code)) return;
    this.warned.add(code);
    process.emitWarning(`${this.label}: ${describeChain(error)}`, {
      type: 'PgLeaderLockWarning',
      code,
      detail:
        'Printed once per error code while no onError callback and no logger option is set. Register onError(fn) or pass a logger option to handle errors yourself; this warning then stops.',
    });
  }
}
