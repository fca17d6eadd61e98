import { MAX_TIMER_MS } from './validate.js';

/**
 * Time as an injectable dependency, so tests are fast and deterministic.
 * `now()` is monotonic milliseconds (performance.now by default), never wall-clock time.
 */
export interface Clock {
  /** Monotonic milliseconds. */
  now(): number;
  /** Call `fn` once, `ms` from now; returns a handle for `clearTimeout`. */
  setTimeout(fn: () => void, ms: number): unknown;
  /** Cancel a timer that `setTimeout` returned (a fired or cleared one: nothing happens). */
  clearTimeout(handle: unknown): void;
}

/** The real clock: `performance.now()` and the global timers (unref'd: they never keep a process alive). */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => {
    // a deadline computed as `until - now()` can come out a hair below 0: Node warns on those
    const t = setTimeout(fn, Math.max(0, ms));
    t.unref?.();
    return t;
  },
  clearTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
};

/** Has the three methods of a {@link Clock}. */
export function isClock(value: unknown): value is Clock {
  if (typeof value !== 'object' || value === null) return false;
  const c = value as Record<string, unknown>;
  return ['now', 'setTimeout', 'clearTimeout'].every((m) => typeof c[m] === 'function');
}

/**
 * Sleep `ms` on `clock`. Resolves `true` when the time elapsed and `false` as soon as
 * `signal` aborts (never rejects). Leaves no timer or listener behind.
 */
export function sleep(clock: Clock, ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = (): void => {
      clock.clearTimeout(handle);
      resolve(false);
    };
    const handle = clock.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** A promise settled from outside. */
export interface Deferred<T> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(reason: unknown): void;
}

export function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (reason: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** `sleep` for any delay: a timer takes at most 2³¹−1 ms, so a longer delay is slept in steps. */
export async function sleepInSteps(clock: Clock, ms: number, signal: AbortSignal): Promise<boolean> {
  const until = clock.now() + ms;
  for (let left = ms; left > 0; left = until - clock.now()) {
    if (!(await sleep(clock, Math.min(left, MAX_TIMER_MS), signal))) return false;
  }
  return true;
}

/** A promise that resolves (to null) when `signal` aborts; `dispose` removes the listener. */
export function untilWoken(signal: AbortSignal): { promise: Promise<null>; dispose(): void } {
  let onAbort = (): void => {};
  const promise = new Promise<null>((resolve) => {
    onAbort = () => resolve(null);
    if (signal.aborted) resolve(null);
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  return { promise, dispose: () => signal.removeEventListener('abort', onAbort) };
}

/** The earlier of two deadlines (null: no limit). */
export function earlier(a: number | null, b: number | null): number | null {
  return a === null ? b : b === null ? a : Math.min(a, b);
}

/**
 * The keep-alive rule of every loop that runs until told to stop (`LeaderLock`,
 * `PartitionedLeadership`, `LeaderWatch`): a started one keeps the process alive until it stops, as a server socket
 * would, even while it waits with no timer of its own (a server-side wait, an idle socket).
 * One long interval, cleared by the function returned; `enabled` false (the `unref`
 * option): nothing.
 */
export function keepAlive(enabled: boolean): () => void {
  if (!enabled) return () => {};
  const timer = setInterval(() => {}, 1 << 30);
  return () => clearInterval(timer);
}

/**
 * The wake-up of every loop in the library that waits for news (LeaderLock's lifecycle, a
 * partitions worker's, LeaderWatch's): `arm()` gives a signal that the next `wake()`
 * aborts. A loop arms first, then checks what may have woken it (its mailbox, its
 * connection), then waits on the signal (`sleep`): news that comes between the check and
 * the wait is not lost. `onArm` is told of each arm (the loop's pulse, vitals.ts).
 */
export class Wake {
  private interrupt = new AbortController();

  constructor(private readonly onArm: () => void = () => {}) {}

  wake(): void {
    this.interrupt.abort();
  }

  arm(): AbortSignal {
    this.onArm();
    if (this.interrupt.signal.aborted) this.interrupt = new AbortController();
    return this.interrupt.signal;
  }
}
