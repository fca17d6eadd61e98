/**
 * Structured logging (spec §7). Silent by default; pass a pino-compatible logger
 * (`{ debug, info, warn, error }`, each `(fields, message)`), or set
 * `NODE_DEBUG=pgleaderlock` for lines like
 * `PGLEADERLOCK 1234: state_change from=follower to=acquiring key1=1 key2=100`.
 * Connection strings and passwords are never logged.
 */
import { debuglog } from 'node:util';
import { describeChain } from './errors.js';
import { show } from './validate.js';

/** A log record's structured fields (`event`, keys, state, error, …). */
export type LogFields = Record<string, unknown>;
/** One log method, pino's argument order: fields first, then the message. */
export type LogFn = (fields: LogFields, message: string) => void;

/** A pino-compatible logger. */
export interface Logger {
  /** Detail. */
  debug: LogFn;
  /** Events such as a state change. */
  info: LogFn;
  /** Trouble the library handles, such as a forced close. */
  warn: LogFn;
  /** Failures, such as a callback that threw. */
  error: LogFn;
}

function format(fields: LogFields, message: string): string {
  const parts = [message];
  for (const [k, v] of Object.entries(fields)) {
    if (v === undefined || (k === 'event' && v === message)) continue;
    const value = v instanceof Error ? describeChain(v) : v;
    const text =
      typeof value === 'string'
        ? /\s|"/.test(value)
          ? JSON.stringify(value)
          : value
        : JSON.stringify(value);
    parts.push(`${k}=${text}`);
  }
  return parts.join(' ');
}

const defaults = new WeakSet<Logger>();

/**
 * The default logger: silent unless `NODE_DEBUG` includes `pgleaderlock`. An election
 * whose logger is this one and that has no `error` callback prints each distinct error
 * once as a process warning (callbacks.ts), so that errors are never silent.
 */
export function defaultLogger(): Logger {
  const debug = debuglog('pgleaderlock');
  let logger: Logger;
  if (!debug.enabled) {
    const noop: LogFn = () => {};
    logger = { debug: noop, info: noop, warn: noop, error: noop };
  } else {
    const emit =
      (level: string): LogFn =>
      (fields, message) =>
        debug('%s %s', level, format(fields, message));
    logger = { debug: emit('debug'), info: emit('info'), warn: emit('warn'), error: emit('error') };
  }
  defaults.add(logger);
  return logger;
}

/** Whether `logger` is the default one (no `logger` option was given). */
export function isDefaultLogger(logger: Logger): boolean {
  return defaults.has(logger);
}

/**
 * The user's logger, guarded: a logging method that throws is ignored, so a broken logger
 * can neither stop the lock from leading nor crash the process.
 */
export function guardLogger(logger: Logger): Logger {
  const guard =
    (level: keyof Logger): LogFn =>
    (fields, message) => {
      try {
        logger[level](fields, message);
      } catch {
        // a logger must never change what the lock does
      }
    };
  return { debug: guard('debug'), info: guard('info'), warn: guard('warn'), error: guard('error') };
}

/** The `logger` option, checked: undefined, or an object with the four methods. */
export function checkLogger(value: unknown): void {
  if (value === undefined) return;
  const l = value as Record<string, unknown> | null;
  const ok =
    typeof l === 'object' &&
    l !== null &&
    ['debug', 'info', 'warn', 'error'].every((m) => typeof l[m] === 'function');
  if (!ok) {
    throw new TypeError(`logger must have debug, info, warn and error methods, received ${show(value)}`);
  }
}
