/**
 * Structured logging (spec §7). Silent by default; pass a pino-compatible logger
 * (`{ debug, info, warn, error }`, each `(fields, message)`), or set
 * `NODE_DEBUG=pgleaderlock` for lines like
 * `PGLEADERLOCK 1234: state_change from=follower to=acquiring key1=1 key2=100`.
 * Connection strings and passwords are never logged.
 */
import { debuglog } from 'node:util';
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
    const text = typeof v === 'string' ? (/\s|"/.test(v) ? JSON.stringify(v) : v) : JSON.stringify(v);
    parts.push(`${k}=${text}`);
  }
  return parts.join(' ');
}

/** The default logger: silent unless `NODE_DEBUG` includes `pgleaderlock`. */
export function defaultLogger(): Logger {
  const debug = debuglog('pgleaderlock');
  if (!debug.enabled) {
    const noop: LogFn = () => {};
    return { debug: noop, info: noop, warn: noop, error: noop };
  }
  const emit =
    (level: string): LogFn =>
    (fields, message) =>
      debug('%s %s', level, format(fields, message));
  return { debug: emit('debug'), info: emit('info'), warn: emit('warn'), error: emit('error') };
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
