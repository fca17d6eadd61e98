/**
 * Retry strategies (spec §4.5): the delay before the next acquisition attempt, and before
 * the next connection attempt (spec §12.3: one strategy governs both).
 */
import { LockError, toError } from '../core/errors.js';
import { checkDuration } from '../core/validate.js';

/** What a strategy knows when asked for the next delay. */
export interface RetryContext {
  /** 1-based attempt number within the current cycle (reset when the lock is acquired). */
  readonly attempt: number;
  /** Milliseconds since the first attempt of this cycle. */
  readonly elapsedMs: number;
  /** The error of the last attempt, or null if it simply found the lock held. */
  readonly lastError: Error | null;
  /** The delay this strategy returned last time in this cycle (null on the first call). */
  readonly previousDelayMs: number | null;
}

/** Decides how long to wait before the next attempt; `null` gives up (the lock stops). */
export interface RetryStrategy {
  /** Milliseconds to wait before the next attempt, or `null` to give up. */
  nextDelayMs(ctx: RetryContext): number | null;
}

/** `min(baseMs * multiplier^(attempt-1), maxMs)`. Defaults: 1 s, 30 s, ×2. */
export class ExponentialBackoff implements RetryStrategy {
  /** The first delay. */
  readonly baseMs: number;
  /** The longest delay. */
  readonly maxMs: number;
  /** The factor from one delay to the next. */
  readonly multiplier: number;

  constructor(options: { baseMs?: number; maxMs?: number; multiplier?: number } = {}) {
    this.baseMs = checkDuration('ExponentialBackoff.baseMs', options.baseMs ?? 1000);
    this.maxMs = checkDuration('ExponentialBackoff.maxMs', options.maxMs ?? 30_000);
    this.multiplier = options.multiplier ?? 2;
    if (!Number.isFinite(this.multiplier) || this.multiplier < 1) {
      throw new RangeError(
        `ExponentialBackoff.multiplier must be a finite number >= 1, received ${String(options.multiplier)}`,
      );
    }
    if (this.maxMs < this.baseMs) {
      throw new RangeError(
        `ExponentialBackoff.maxMs (${this.maxMs}) must not be less than baseMs (${this.baseMs})`,
      );
    }
  }

  /** `min(baseMs * multiplier^(attempt-1), maxMs)`. */
  nextDelayMs(ctx: RetryContext): number {
    return Math.min(this.baseMs * this.multiplier ** Math.max(0, ctx.attempt - 1), this.maxMs);
  }
}

/** The same delay every time. Default 5 s. */
export class FixedInterval implements RetryStrategy {
  /** The delay. */
  readonly intervalMs: number;

  constructor(options: { intervalMs?: number } = {}) {
    this.intervalMs = checkDuration('FixedInterval.intervalMs', options.intervalMs ?? 5000);
  }

  /** Always `intervalMs`. */
  nextDelayMs(): number {
    return this.intervalMs;
  }
}

/**
 * AWS-style decorrelated jitter: `min(maxMs, random(baseMs, previousDelay * 3))`, the
 * first delay being `random(baseMs, baseMs * 3)`. `random` returns [0, 1) (default Math.random).
 */
export class DecorrelatedJitter implements RetryStrategy {
  /** The shortest delay, and the first one's lower bound. */
  readonly baseMs: number;
  /** The longest delay. */
  readonly maxMs: number;
  private readonly random: () => number;

  constructor(options: { baseMs?: number; maxMs?: number; random?: () => number } = {}) {
    this.baseMs = checkDuration('DecorrelatedJitter.baseMs', options.baseMs ?? 1000);
    this.maxMs = checkDuration('DecorrelatedJitter.maxMs', options.maxMs ?? 30_000);
    if (this.maxMs < this.baseMs) {
      throw new RangeError(
        `DecorrelatedJitter.maxMs (${this.maxMs}) must not be less than baseMs (${this.baseMs})`,
      );
    }
    if (options.random !== undefined && typeof options.random !== 'function') {
      throw new TypeError(`DecorrelatedJitter.random must be a function, received ${typeof options.random}`);
    }
    this.random = options.random ?? Math.random;
  }

  /** `min(maxMs, random(baseMs, previousDelay * 3))`. */
  nextDelayMs(ctx: RetryContext): number {
    const prev = ctx.previousDelayMs ?? this.baseMs;
    const upper = Math.max(this.baseMs, prev * 3);
    return Math.min(this.maxMs, this.baseMs + this.random() * (upper - this.baseMs));
  }
}

/** True if `value` has the shape of a {@link RetryStrategy}. */
export function isRetryStrategy(value: unknown): value is RetryStrategy {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { nextDelayMs?: unknown }).nextDelayMs === 'function'
  );
}

/**
 * One retry cycle's bookkeeping: attempts, elapsed time, last error and previous delay,
 * reset when the lock is acquired. `next()` asks the strategy and checks its answer.
 */
export class RetryCycle {
  attempt = 0;
  lastError: Error | null = null;
  private cycleStart: number;
  private previousDelayMs: number | null = null;

  constructor(
    private readonly strategy: RetryStrategy,
    private readonly now: () => number,
  ) {
    this.cycleStart = now();
  }

  /** The delay the last `next()` returned (null before any, and after a reset). */
  get lastDelayMs(): number | null {
    return this.previousDelayMs;
  }

  reset(): void {
    this.attempt = 0;
    this.lastError = null;
    this.previousDelayMs = null;
    this.cycleStart = this.now();
  }

  /** The next delay, or why the cycle gives up (null from the strategy, a throw, a bad number). */
  next(): { delayMs: number } | { giveUp: LockError } {
    this.attempt += 1;
    const ctx: RetryContext = {
      attempt: this.attempt,
      elapsedMs: this.now() - this.cycleStart,
      lastError: this.lastError,
      previousDelayMs: this.previousDelayMs,
    };
    const code = 'ERR_PGLEADERLOCK_RETRY_EXHAUSTED';
    let delay: number | null;
    try {
      delay = this.strategy.nextDelayMs(ctx);
    } catch (err) {
      return {
        giveUp: new LockError(`retryStrategy.nextDelayMs threw: ${toError(err).message}`, {
          cause: err,
          code,
        }),
      };
    }
    if (delay === null) {
      const message = `retry strategy gave up after ${this.attempt - 1} failed attempts`;
      return { giveUp: new LockError(message, { cause: this.lastError ?? undefined, code }) };
    }
    if (typeof delay !== 'number' || !Number.isFinite(delay) || delay < 0) {
      const message = `retryStrategy.nextDelayMs must return a finite number >= 0 or null, returned ${String(delay)}`;
      return { giveUp: new LockError(message, { code }) };
    }
    this.previousDelayMs = delay;
    return { delayMs: delay };
  }
}
