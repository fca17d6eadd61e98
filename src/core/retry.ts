/**
 * Retry strategies (spec §4.5): the delay before the next acquisition attempt, and before
 * the next connection attempt (spec §12.3: one strategy governs both). These are
 * pgleaderlock's own `RetryStrategy` objects (one `nextDelayMs(ctx)` method), not
 * cockatiel's backoffs of the same names: cockatiel's `ExponentialBackoff` is an `IBackoff`
 * and cannot be passed as `retryStrategy`. Every random choice comes from an injectable
 * `random` source (default `Math.random`), so a seeded source replays a run.
 */
import { connectTimeoutIn, isServerAway, LockError, toError } from './errors.js';
import { checkDuration, show } from './validate.js';

/** What a strategy knows when asked for the next delay. */
export interface RetryContext {
  /**
   * 1-based attempt number within the current cycle: since the lock was acquired or, after
   * a connection loss, since the first attempt that failed after the at-once one (a new
   * cycle then starts, so the first delay is the strategy's first again).
   */
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

/** A `random` option, checked: undefined, or a function (returning numbers in [0, 1)). */
function checkRandom(owner: string, value: unknown): () => number {
  if (value === undefined) return Math.random;
  if (typeof value !== 'function') {
    throw new TypeError(`${owner}.random must be a function, received ${typeof value}`);
  }
  return value as () => number;
}

/** `random()`, checked: a number in [0, 1) (a source that strays is clamped into it). */
function draw(random: () => number): number {
  const r = random();
  return typeof r === 'number' && r > 0 ? Math.min(r, 1 - Number.EPSILON) : 0;
}

/** A strategy's options: an object (`new FixedInterval(250)` is refused, not read as the default) with known keys only. */
function checkStrategyOptions(what: string, options: unknown, known: readonly string[]): void {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`${what} options must be an object, received ${show(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw new TypeError(`unknown ${what} option ${JSON.stringify(key)}`);
  }
}

/**
 * Exponential back-off with jitter (the default retry strategy): the delay
 * `d = min(baseMs * multiplier^(attempt-1), maxMs)`, less a random part of at most
 * `jitter × d`. While the server is away (refused, reset, restarting, a connect timeout),
 * `d` stops at `outageMaxMs` (kept within `baseMs`..`maxMs`). Defaults: 100 ms doubling to
 * 30 s, 1 s while away, `jitter` 0.5 (a delay in [d/2, d]: candidates that failed together
 * do not retry in lockstep). Not cockatiel's `ExponentialBackoff` (docs/safety.md).
 */
export class ExponentialBackoff implements RetryStrategy {
  /** The first delay (before jitter). */
  readonly baseMs: number;
  /** The longest delay. */
  readonly maxMs: number;
  /** The factor from one delay to the next. */
  readonly multiplier: number;
  /** The longest delay while the server is away (refused, restarting, unreachable). */
  readonly outageMaxMs: number;
  /** The largest fraction of a delay the jitter takes off, in [0, 1]. */
  readonly jitter: number;
  private readonly random: () => number;

  constructor(
    options: {
      baseMs?: number;
      maxMs?: number;
      multiplier?: number;
      /** The longest delay while the server is away; default 1000 (kept within baseMs..maxMs). */
      outageMaxMs?: number;
      /** In [0, 1]; default 0.5. 0: no jitter. */
      jitter?: number;
      /** Returns numbers in [0, 1); default `Math.random`. */
      random?: () => number;
    } = {},
  ) {
    checkStrategyOptions('ExponentialBackoff', options, [
      'baseMs',
      'maxMs',
      'multiplier',
      'outageMaxMs',
      'jitter',
      'random',
    ]);
    this.baseMs = checkDuration('ExponentialBackoff.baseMs', options.baseMs ?? 100);
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
    const outage = checkDuration('ExponentialBackoff.outageMaxMs', options.outageMaxMs ?? 1000);
    this.outageMaxMs = Math.min(this.maxMs, Math.max(this.baseMs, outage));
    this.jitter = options.jitter ?? 0.5;
    if (typeof this.jitter !== 'number' || !(this.jitter >= 0 && this.jitter <= 1)) {
      throw new RangeError(
        `ExponentialBackoff.jitter must be a number from 0 to 1, received ${String(options.jitter)}`,
      );
    }
    this.random = checkRandom('ExponentialBackoff', options.random);
  }

  /**
   * `min(baseMs * multiplier^(attempt-1), maxMs)` (`outageMaxMs` instead of `maxMs` while
   * the server is away), less up to `jitter` of it at random.
   */
  nextDelayMs(ctx: RetryContext): number {
    const cap = isServerAway(ctx.lastError) ? this.outageMaxMs : this.maxMs;
    const d = Math.min(this.baseMs * this.multiplier ** Math.max(0, ctx.attempt - 1), cap);
    return this.jitter === 0 ? d : d * (1 - this.jitter * draw(this.random));
  }
}

/** The same delay every time. Default 5 s. */
export class FixedInterval implements RetryStrategy {
  /** The delay. */
  readonly intervalMs: number;

  constructor(options: { intervalMs?: number } = {}) {
    checkStrategyOptions('FixedInterval', options, ['intervalMs']);
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
    checkStrategyOptions('DecorrelatedJitter', options, ['baseMs', 'maxMs', 'random']);
    this.baseMs = checkDuration('DecorrelatedJitter.baseMs', options.baseMs ?? 1000);
    this.maxMs = checkDuration('DecorrelatedJitter.maxMs', options.maxMs ?? 30_000);
    if (this.maxMs < this.baseMs) {
      throw new RangeError(
        `DecorrelatedJitter.maxMs (${this.maxMs}) must not be less than baseMs (${this.baseMs})`,
      );
    }
    this.random = checkRandom('DecorrelatedJitter', options.random);
  }

  /** `min(maxMs, random(baseMs, previousDelay * 3))`. */
  nextDelayMs(ctx: RetryContext): number {
    const prev = ctx.previousDelayMs ?? this.baseMs;
    const upper = Math.max(this.baseMs, prev * 3);
    return Math.min(this.maxMs, this.baseMs + this.random() * (upper - this.baseMs));
  }
}

/**
 * The reconnect policy's option, the same in every election (`LeaderLock`,
 * `PartitionedLeadership`, `LeaderWatch`): `retryStrategy`, checked, or the election's
 * default. Every election runs it through a {@link RetryCycle} that retries at once after
 * a loss and only then asks the strategy (issue 41: a server restart is followed at once).
 */
export function resolveRetryStrategy(value: unknown, fallback: () => RetryStrategy): RetryStrategy {
  if (value === undefined) return fallback();
  if (!isRetryStrategy(value)) {
    throw new TypeError(`retryStrategy must have a nextDelayMs(ctx) method, received ${show(value)}`);
  }
  return value;
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
 * How far a connect's deadline stretches after missed deadlines (`RetryCycle.connectTimeoutMs`),
 * as a multiple of `queryTimeoutMs`: up to 16 × (32 s at the defaults) once a server had
 * accepted the TCP connection (busy: the start-up or the first statement did not finish), 4 ×
 * (8 s) while nothing answered (a silent path; a `connect` hook whose connect itself missed). 4 × was not enough for a crowd: 500
 * candidates started at once on one key with `queryTimeoutMs` 1000 on the 2-core machine had
 * none connected after 90 s (docs/benchmarks.md, "A crowd of candidates"); on a silent path a
 * longer attempt only delays seeing it heal (within an attempt, only TCP's retransmitted SYN
 * reaches the server).
 */
export const MAX_CONNECT_STRETCH = { accepted: 16, silent: 4 } as const;

/**
 * One retry cycle's bookkeeping: attempts, elapsed time, last error and previous delay,
 * reset when the lock is acquired. `next()` asks the strategy and checks its answer.
 *
 * With `atOnceAfterLoss`, the first failure that follows a good outcome (a connection
 * that worked, a wait slice, a refused attempt) is retried at once, without asking the
 * strategy: a server restart or a dropped connection is usually over by the next attempt.
 * Only a failure after that one is paced by the strategy, from its first delay again (a
 * new cycle). An attempt that fails every time is therefore retried at once only once.
 */
export class RetryCycle {
  attempt = 0;
  lastError: Error | null = null;
  private cycleStart: number;
  private previousDelayMs: number | null = null;
  /** The attempts before the current cycle began (after an at-once retry). */
  private before = 0;
  /** The last outcome was not a failure: a failure now is retried at once. */
  private calm = true;
  /** Attempts in a row that ended on the connect deadline (`connectTimeoutMs`). */
  private connectTimeouts = 0;
  /** One of them had its TCP connection accepted (a busy server, not a silent path). */
  private connectAccepted = false;
  private readonly atOnceAfterLoss: boolean;

  constructor(
    private readonly strategy: RetryStrategy,
    private readonly now: () => number,
    options: { atOnceAfterLoss?: boolean } = {},
  ) {
    this.cycleStart = now();
    this.atOnceAfterLoss = options.atOnceAfterLoss ?? false;
  }

  /** The delay the last `next()` returned (null before any, and after a reset). */
  get lastDelayMs(): number | null {
    return this.previousDelayMs;
  }

  reset(): void {
    this.attempt = 0;
    this.before = 0;
    this.lastError = null;
    this.previousDelayMs = null;
    this.cycleStart = this.now();
    this.calm = true;
    this.connectTimeouts = 0;
    this.connectAccepted = false;
  }

  /**
   * The deadline of the next connect (with the survey on it, core/primary.ts), from the
   * session's `baseMs` (`queryTimeoutMs`): doubled after each attempt in a row that missed it,
   * up to {@link MAX_CONNECT_STRETCH} × `baseMs` (16 × once one of them was accepted, else
   * 4 ×). A connect that misses its deadline on a
   * server that is up but busy (many clients connecting at once after a restart: a fork, an
   * authentication and a backend's start each, on the same cores) is abandoned with that work
   * done, and its retry asks for all of it again: given the same deadline, a crowd can miss it
   * for ever. The server shares its cores among the connects in flight, so they all finish
   * late together: the deadline has to outgrow the whole crowd's work, not one connect's.
   */
  connectTimeoutMs(baseMs: number): number {
    const cap = this.connectAccepted ? MAX_CONNECT_STRETCH.accepted : MAX_CONNECT_STRETCH.silent;
    return baseMs * Math.min(2 ** this.connectTimeouts, cap);
  }

  /**
   * The next attempt goes at once anyway (a start, the first reconnect after a loss of
   * leadership): if it fails, the strategy paces the one after.
   */
  goingAtOnce(): void {
    this.calm = false;
  }

  /** The next delay, or why the cycle gives up (null from the strategy, a throw, a bad number). */
  next(): { delayMs: number } | { giveUp: LockError } {
    this.attempt += 1;
    const failed = this.lastError !== null;
    const timeout = connectTimeoutIn(this.lastError);
    this.connectTimeouts = timeout ? this.connectTimeouts + 1 : 0;
    // over the whole streak: one attempt read as silent (its client's event loop had not yet
    // seen the accept when the deadline fired) does not shrink a busy server's deadline
    this.connectAccepted = timeout !== null && (this.connectAccepted || timeout.accepted);
    if (this.atOnceAfterLoss && failed && this.calm) {
      // the first failure after a good outcome: again at once, then a fresh cycle
      this.calm = false;
      this.before = this.attempt;
      this.previousDelayMs = 0;
      this.cycleStart = this.now();
      return { delayMs: 0 };
    }
    this.calm = !failed;
    const ctx: RetryContext = {
      attempt: this.attempt - this.before,
      elapsedMs: this.now() - this.cycleStart,
      lastError: this.lastError,
      previousDelayMs: this.attempt - this.before === 1 ? null : this.previousDelayMs,
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
