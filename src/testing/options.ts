/** Options the fakes share: validated as the real classes validate theirs. */
import type { Clock } from '../core/clock.js';
import { systemClock } from '../core/clock.js';
import { defaultLogger, guardLogger, type Logger } from '../core/logger.js';
import { checkPositiveDuration, show } from '../core/validate.js';

/** Options of both fakes. */
export interface FakeOptions {
  /** This candidate's (worker's) id. Default: `fake-` and six random characters. */
  id?: string;
  /**
   * How long a callback may run before it is reported to `onError` and the queue moves on
   * (as on the real classes). Default 10000.
   */
  callbackTimeoutMs?: number;
  /**
   * Time for the callback deadlines, `waitForLeadership`'s timeout and `health()`:
   * `{ now, setTimeout, clearTimeout }`. Default: `performance.now()` and unref'd timers.
   */
  clock?: Clock;
  /** A pino-compatible logger. Default: silent (unless `NODE_DEBUG=pgleaderlock`). */
  logger?: Logger;
}

export interface ResolvedFakeOptions {
  id: string;
  callbackTimeoutMs: number;
  clock: Clock;
  logger: Logger;
}

/** Every key of `options` is in `known` (a misspelt option is an error, not a default). */
export function checkKeys(what: string, options: object, known: readonly string[]): void {
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw new TypeError(`unknown ${what} option ${JSON.stringify(key)}`);
  }
}

export function resolveFake(what: string, options: FakeOptions): ResolvedFakeOptions {
  if (typeof options !== 'object' || options === null) {
    throw new TypeError(`${what} options must be an object, received ${show(options)}`);
  }
  const id = options.id ?? `fake-${Math.random().toString(36).slice(2, 8)}`;
  if (typeof id !== 'string' || id === '')
    throw new TypeError(`id must be a non-empty string, received ${show(id)}`);
  const clock = options.clock ?? systemClock;
  if (
    !['now', 'setTimeout', 'clearTimeout'].every(
      (m) => typeof (clock as unknown as Record<string, unknown>)[m] === 'function',
    )
  ) {
    throw new TypeError(`clock must have now, setTimeout and clearTimeout, received ${show(clock)}`);
  }
  return {
    id,
    callbackTimeoutMs: checkPositiveDuration('callbackTimeoutMs', options.callbackTimeoutMs ?? 10_000),
    clock,
    logger: guardLogger(options.logger ?? defaultLogger()),
  };
}

/** Stands in for the connection a fake never opens, so the real rules can check the rest. */
const NO_CONNECTION = 'postgres://fake@127.0.0.1:1/fake';

/**
 * The options of the real class that a fake cannot use (connection, timings, retry, mode,
 * fencing, …): checked by the real class's own validation (`validate`, the real resolver,
 * which also refuses unknown options), then ignored. `fill` supplies what the real class
 * requires and a fake does not (a connection, keys). An unknown option is reported under
 * the fake's name.
 */
export function checkAsReal(
  what: string,
  real: string,
  options: object,
  fill: Record<string, unknown>,
  validate: (options: never) => unknown,
): void {
  const given = options as Record<string, unknown>;
  const connected = ['connect', 'connectionString', 'clientConfig'].some((k) => given[k] !== undefined);
  try {
    validate({ ...(connected ? {} : { connectionString: NO_CONNECTION }), ...fill, ...given } as never);
  } catch (err) {
    if (err instanceof TypeError && err.message.startsWith(`unknown ${real} option `)) {
      throw new TypeError(err.message.replace(`unknown ${real} option `, `unknown ${what} option `));
    }
    throw err;
  }
}
