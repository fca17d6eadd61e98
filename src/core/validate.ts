/** Option validation helpers: errors name the option and echo the value received. */

export const INT32_MIN = -2_147_483_648;
export const INT32_MAX = 2_147_483_647;

export function show(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'bigint') return `${value}n`;
  if (typeof value === 'function') return 'a function';
  if (value === null || typeof value !== 'object') return String(value);
  try {
    return JSON.stringify(value);
  } catch {
    return Object.prototype.toString.call(value);
  }
}

/**
 * The longest duration accepted: Node's timers fire after 1 ms for anything longer
 * (TimeoutOverflowWarning), and PostgreSQL's millisecond settings (idle_session_timeout,
 * tcp_user_timeout, lock_timeout) stop at the same 2^31 - 1.
 */
export const MAX_TIMER_MS = 2_147_483_647;

/** A finite number of milliseconds in [0, MAX_TIMER_MS]. */
export function checkDuration(name: string, value: unknown): number {
  if (typeof value !== 'number') {
    throw new TypeError(`${name} must be a number of milliseconds, received ${show(value)}`);
  }
  if (!Number.isFinite(value) || value < 0) {
    throw new RangeError(`${name} must be a finite number >= 0 (milliseconds), received ${show(value)}`);
  }
  if (value > MAX_TIMER_MS) {
    throw new RangeError(
      `${name} must be at most ${MAX_TIMER_MS} ms (about 24.8 days: the longest delay timers and PostgreSQL accept), received ${show(value)}`,
    );
  }
  return value;
}

/** A finite, strictly positive number of milliseconds. */
export function checkPositiveDuration(name: string, value: unknown): number {
  const ms = checkDuration(name, value);
  if (ms === 0) throw new RangeError(`${name} must be greater than 0 (milliseconds), received 0`);
  return ms;
}

/** A 32-bit signed integer lock key. */
export function checkKey(name: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new TypeError(`${name} must be an integer, received ${show(value)}`);
  }
  if (value < INT32_MIN || value > INT32_MAX) {
    throw new RangeError(
      `${name} must be a 32-bit signed integer in [${INT32_MIN}, ${INT32_MAX}], received ${value}`,
    );
  }
  return value;
}

export function checkBoolean(name: string, value: unknown): boolean {
  if (typeof value !== 'boolean') throw new TypeError(`${name} must be a boolean, received ${show(value)}`);
  return value;
}

export function checkFunction<T>(name: string, value: T): T {
  if (typeof value !== 'function') throw new TypeError(`${name} must be a function, received ${show(value)}`);
  return value;
}

/** Run `fn`; a synchronous throw (a bad argument) becomes a rejection. */
export function rejecting<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return fn();
  } catch (err) {
    return Promise.reject(err);
  }
}

/** `options.timeoutMs` of shutdown/stepDown/waitForLeadership/waitForBalance, checked. */
export function timeoutOf(method: string, options: unknown): number | undefined {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`${method} options must be an object, received ${show(options)}`);
  }
  const { timeoutMs } = options as { timeoutMs?: unknown };
  return timeoutMs === undefined ? undefined : checkDuration('timeoutMs', timeoutMs);
}

/** The options of `waitForLeadership`, checked: its `timeoutMs` and `signal`. */
export function waitOptionsOf(options: unknown): {
  timeoutMs: number | undefined;
  signal: AbortSignal | undefined;
} {
  const timeoutMs = timeoutOf('waitForLeadership', options);
  const { signal } = options as { signal?: unknown };
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new TypeError(`waitForLeadership signal must be an AbortSignal, received ${show(signal)}`);
  }
  return { timeoutMs, signal };
}
