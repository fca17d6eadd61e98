/** `pgleaderlock run`: join the election and log every transition until SIGINT/SIGTERM. */

import type { LeaderLockOptions } from '../core/lock-options.js';
import type { LogFn, Logger } from '../core/logger.js';
import { ExponentialBackoff } from '../core/retry.js';
import { LeaderLock } from '../leader/leader-lock.js';
import {
  type Dsn,
  type Keys,
  type OptionSpec,
  optionalDuration,
  redact,
  scrub,
  UsageError,
  type Values,
} from './args.js';
import { checkConnection, connectionOptions, EXIT, explain, humanMs, type Output } from './common.js';
import { type HealthServer, parseHttpAddress, serveHealth } from './http.js';

/** Options that tune the lock, shared by `run` and `acquire`. */
export const LOCK_OPTIONS: OptionSpec[] = [
  {
    name: 'id',
    type: 'string',
    value: 'ID',
    default: 'host-pid-random',
    help: 'candidate id (application_name)',
  },
  {
    name: 'health-interval',
    type: 'string',
    value: 'DURATION',
    default: '1.5s',
    help: 'ownership check interval while leader',
  },
  {
    name: 'takeover-delay',
    type: 'string',
    value: 'DURATION',
    default: '250ms',
    help: 'when the previous holder did not release cleanly, hold the lock this long before leading (0: off)',
  },
];

export const RUN_OPTIONS: OptionSpec[] = [
  ...LOCK_OPTIONS,
  {
    name: 'retry-base',
    type: 'string',
    value: 'DURATION',
    default: '100ms',
    help: 'first delay of the exponential back-off',
  },
  {
    name: 'retry-max',
    type: 'string',
    value: 'DURATION',
    default: '30s',
    help: 'longest delay of the exponential back-off',
  },
  {
    name: 'reconnect-grace',
    type: 'string',
    value: 'DURATION',
    default: 'off',
    help: 'after a failed health check, try to get the lock back for this long before reporting it lost',
  },
  { name: 'no-auto-reacquire', type: 'boolean', help: 'stop (exit 75) after losing leadership' },
  {
    name: 'http',
    type: 'string',
    value: 'HOST:PORT',
    help: 'serve /healthz, /readyz and /metrics (Prometheus) there, e.g. 127.0.0.1:9464 or :9464',
  },
  {
    name: 'priority',
    type: 'string',
    value: 'INT',
    default: '0',
    help: 'who should lead: the leader hands over to a waiting candidate with a higher priority',
  },
  {
    name: 'acquire-mode',
    type: 'string',
    value: 'wait|poll',
    default: 'wait',
    help: 'queue in PostgreSQL (fast failover) or poll with try-lock',
  },
];

/** --debug: the library's log on stderr, one line per record, passwords scrubbed. */
function stderrLogger(dsn: Dsn): Logger {
  const emit =
    (level: string): LogFn =>
    (fields, message) => {
      const text = JSON.stringify({ level, msg: message, ...fields }, (_k, v: unknown) =>
        typeof v === 'bigint' ? v.toString() : v instanceof Error ? explain(v) : v,
      );
      process.stderr.write(`${scrub(text, dsn.url)}\n`);
    };
  return { debug: emit('debug'), info: emit('info'), warn: emit('warn'), error: emit('error') };
}

/** LeaderLock options from the command line; durations validated here, the rest by LeaderLock. */
export function lockOptions(values: Values, dsn: Dsn, keys: Keys): LeaderLockOptions {
  const options: LeaderLockOptions = {
    ...connectionOptions(dsn), // without a URL, the PG* environment (PGHOST may list several hosts)
    key1: keys.key1,
    key2: keys.key2,
  };
  if (typeof values.id === 'string') options.id = values.id;
  if (values.debug === true) options.logger = stderrLogger(dsn);
  const health = optionalDuration(values, 'health-interval');
  if (health !== undefined) options.healthIntervalMs = health;
  const delay = optionalDuration(values, 'takeover-delay');
  if (delay !== undefined) options.takeoverDelayMs = delay;
  return options;
}

export function runOptions(values: Values, dsn: Dsn, keys: Keys): LeaderLockOptions {
  const options = lockOptions(values, dsn, keys);
  const baseMs = optionalDuration(values, 'retry-base');
  const maxMs = optionalDuration(values, 'retry-max');
  if (baseMs !== undefined || maxMs !== undefined) {
    const b = baseMs ?? 100;
    const m = maxMs ?? Math.max(30_000, b);
    if (m < b) throw new UsageError(`--retry-max (${m} ms) must not be less than --retry-base (${b} ms)`);
    options.retryStrategy = new ExponentialBackoff({ baseMs: b, maxMs: m });
  }
  const grace = optionalDuration(values, 'reconnect-grace');
  if (grace !== undefined && grace > 0) options.reconnectGraceMs = grace;
  if (values['no-auto-reacquire'] === true) options.autoReacquire = false;
  const priority = values.priority;
  if (typeof priority === 'string') {
    if (!/^-?\d+$/.test(priority.trim()) || !Number.isSafeInteger(Number(priority))) {
      throw new UsageError(`--priority must be an integer, received ${JSON.stringify(priority)}`);
    }
    options.priority = Number(priority);
  }
  const mode = values['acquire-mode'];
  if (mode !== undefined) {
    if (mode !== 'wait' && mode !== 'poll') {
      throw new UsageError(`--acquire-mode must be wait or poll, received ${JSON.stringify(mode)}`);
    }
    options.acquireMode = mode;
  }
  return options;
}

const FLAG_OF: [string, string][] = [
  ['healthIntervalMs', '--health-interval'],
  ['reconnectGraceMs', '--reconnect-grace'],
  ['takeoverDelayMs', '--takeover-delay'],
  ['id', '--id'],
  ['priority', '--priority'],
];

/** Build a LeaderLock, turning the library's option errors into one-line usage errors. */
export function createLock(options: LeaderLockOptions): LeaderLock {
  try {
    return new LeaderLock(options);
  } catch (err) {
    if (err instanceof TypeError || err instanceof RangeError) {
      // name the flag the user typed, not the library option behind it
      let message = err.message;
      for (const [option, flag] of FLAG_OF)
        message = message.replace(new RegExp(`\\b${option}\\b`, 'g'), flag);
      throw new UsageError(message);
    }
    throw err;
  }
}

/** Print every transition and callback of `lock` on `out`. */
export function logTransitions(lock: LeaderLock, out: Output, dsn: Dsn): void {
  const keys = { key1: lock.key1, key2: lock.key2, id: lock.id };
  lock.onStateChange((from, to) => out.event('state', `${from} -> ${to}`, { from, to, ...keys }));
  lock.onAcquired((term) =>
    out.event('acquired', `acquired leadership (term ${term.id})`, { term: term.id }),
  );
  lock.onTakeoverFence(({ delayMs }) =>
    out.event(
      'takeover_delay',
      `holding the lock; leading in ${humanMs(delayMs)}: the previous holder did not release cleanly (takeover delay)`,
      { delayMs },
    ),
  );
  lock.onReleased(() => out.event('released', 'released leadership'));
  lock.onLost(() => out.event('lost', 'lost leadership'));
  lock.onAcquireFailed(() => out.event('acquire_failed', 'lock held by another candidate'));
  lock.onNewLeader((id) => out.event('new_leader', `new leader: ${id}`, { leader: id }));
  lock.onError((err) => {
    const code = (err as { code?: unknown }).code;
    out.event('error', `error: ${scrub(explain(err), dsn.url)}`, {
      code: typeof code === 'string' ? code : undefined,
    });
  });
}

/**
 * On the first SIGINT/SIGTERM call `onSignal`; on a second one exit at once (128 + signal).
 * Returns a function that removes the handlers.
 */
export function onSignals(onSignal: (signal: NodeJS.Signals) => void): () => void {
  let seen = false;
  const handler = (signal: NodeJS.Signals): void => {
    if (seen) process.exit(signal === 'SIGINT' ? 130 : 143);
    seen = true;
    onSignal(signal);
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  return () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
}

export async function run(values: Values, dsn: Dsn, keys: Keys, out: Output): Promise<number> {
  const lock = createLock(runOptions(values, dsn, keys));
  const httpAddress = typeof values.http === 'string' ? parseHttpAddress(values.http) : null;
  await checkConnection(dsn); // a wrong DSN is bad input, not something to retry forever
  // listening before joining: a port in use is bad input too
  const probes: HealthServer | null = httpAddress ? await serveHealth(lock, httpAddress) : null;
  if (probes) {
    const { host, port } = probes.address;
    out.event(
      'http',
      `serving /healthz, /readyz and /metrics on http://${host.includes(':') ? `[${host}]` : host}:${port}`,
      {
        host,
        port,
      },
    );
  }
  logTransitions(lock, out, dsn);
  let signalled: NodeJS.Signals | null = null;
  const stopped = new Promise<void>((resolve) => lock.onStopped(() => resolve()));
  const removeSignals = onSignals((signal) => {
    signalled = signal;
    out.event('signal', `${signal}: shutting down`, { signal });
    void lock.shutdown();
  });
  // started by a parent with an IPC channel (the demo): leave when the parent goes away
  const onDisconnect = (): void => {
    signalled ??= 'SIGTERM';
    void lock.shutdown();
  };
  if (process.channel) {
    process.channel.unref();
    process.once('disconnect', onDisconnect);
  }
  out.event('start', `joining the election for key (${keys.key1}, ${keys.key2}) as ${lock.id}`, {
    key1: keys.key1,
    key2: keys.key2,
    ...(keys.name === undefined ? {} : { name: keys.name }),
    id: lock.id,
    priority: lock.priority,
    dsn: redact(dsn.url),
  });
  try {
    await lock.start();
    if (signalled) void lock.shutdown(); // a signal that came before start() took effect
    await stopped;
    await lock.shutdown(); // drains callbacks and closes everything
  } finally {
    removeSignals();
    process.off('disconnect', onDisconnect);
    await probes?.close();
  }
  // stopped by a signal: clean exit; stopped by itself: leadership lost without auto-reacquire
  const code = signalled ? EXIT.OK : EXIT.LOST;
  out.event('exit', signalled ? 'stopped' : 'stopped by itself (leadership lost, no auto-reacquire)', {
    code,
  });
  return code;
}
