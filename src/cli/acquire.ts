/**
 * `pgleaderlock acquire [--wait[=DURATION]] [-- command…]`: one attempt (or a wait) for the
 * lock; with a command, run it while leader and stop it the moment leadership ends.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { constants } from 'node:os';
import { FixedInterval } from '../core/retry.js';
import type { LeaderLock } from '../leader/leader-lock.js';
import {
  type Dsn,
  type Keys,
  type OptionSpec,
  optionalDuration,
  parseDuration,
  scrub,
  type Values,
} from './args.js';
import { checkConnection, EXIT, explain, humanMs, type Output } from './common.js';
import { createLock, LOCK_OPTIONS, lockOptions, onSignals } from './run.js';
import { holderText } from './status.js';

export const ACQUIRE_OPTIONS: OptionSpec[] = [
  ...LOCK_OPTIONS,
  {
    name: 'wait',
    type: 'string',
    value: '[DURATION]',
    default: 'one attempt',
    help: 'wait for the lock, up to DURATION if given (queued in PostgreSQL)',
  },
  {
    name: 'kill-grace',
    type: 'string',
    value: 'DURATION',
    default: '10s',
    help: 'after leadership is lost: time between SIGTERM and SIGKILL to the command',
  },
];

/**
 * What an attempt came to: leader; held by another (one attempt); stopped (an error, one
 * attempt); or, with --wait, the wait ended without leadership, with what the last
 * attempt met: the lock held by another, or an error (a database blip is retried until then).
 */
type Outcome =
  | { kind: 'leader' }
  | { kind: 'held' }
  | { kind: 'stopped' }
  | { kind: 'waited'; last: 'held' | Error | null };

/** Start `lock` and settle on the first outcome. */
function attempt(lock: LeaderLock, waitMs: number | undefined, signal: AbortSignal): Promise<Outcome> {
  let last: 'held' | Error | null = null;
  return new Promise<Outcome>((resolve, reject) => {
    lock.onAcquireFailed(() => {
      last = 'held';
      if (waitMs === undefined) resolve({ kind: 'held' });
    });
    lock.onError((err) => {
      last = err;
      if (waitMs === undefined) resolve({ kind: 'stopped' });
    });
    lock.start().catch(reject);
    lock
      .waitForLeadership({
        signal,
        ...(waitMs === undefined || waitMs === Infinity ? {} : { timeoutMs: waitMs }),
      })
      .then((ok) => {
        if (ok) resolve({ kind: 'leader' });
        else resolve(waitMs === undefined ? { kind: 'stopped' } : { kind: 'waited', last });
      }, reject);
  });
}

const signalNumber = (signal: NodeJS.Signals): number => constants.signals[signal] ?? 0;

/** `--kill-grace`, 10 s if not given. */
export const killGraceOf = (values: Values): number => optionalDuration(values, 'kill-grace') ?? 10_000;

export async function acquire(
  values: Values,
  dsn: Dsn,
  keys: Keys,
  command: string[],
  out: Output,
): Promise<number> {
  const waitText = values.wait;
  const waitMs =
    typeof waitText !== 'string' ? undefined : waitText === '' ? Infinity : parseDuration('wait', waitText);
  const killGraceMs = killGraceOf(values);
  const lock = createLock({
    ...lockOptions(values, dsn, keys),
    // while waiting, a database blip is retried (every second) until the wait is over
    autoReacquire: waitMs !== undefined,
    acquireMode: waitMs === undefined ? 'poll' : 'wait',
    retryStrategy: new FixedInterval({ intervalMs: 1000 }),
  });
  await checkConnection(dsn);

  let lastError: Error | null = null;
  lock.onError((err) => {
    lastError = err;
    if (waitMs !== undefined) out.event('error', `error (retrying): ${scrub(explain(err), dsn.url)}`);
  });
  const interrupt = new AbortController();
  let child: ChildProcess | null = null;
  let interrupted: NodeJS.Signals | null = null;
  const removeSignals = onSignals((signal) => {
    interrupted = signal;
    if (child)
      child.kill(signal); // the command decides; we exit with its status
    else interrupt.abort();
  });
  try {
    const outcome = await attempt(lock, waitMs, interrupt.signal).catch((err: unknown) => {
      if (interrupt.signal.aborted) return { kind: 'stopped' } as const;
      throw err;
    });
    if (outcome.kind !== 'leader') {
      await lock.shutdown();
      if (interrupted) return signalNumber(interrupted) + 128;
      if (outcome.kind === 'stopped') {
        out.event('error', `could not attempt the lock: ${scrub(explain(lastError), dsn.url)}`);
        return EXIT.USAGE;
      }
      const when = waitMs === undefined || waitMs === Infinity ? '' : ` after waiting ${humanMs(waitMs)}`;
      if (outcome.kind === 'waited' && outcome.last !== 'held') {
        const why = outcome.last
          ? `the last attempt failed: ${scrub(explain(outcome.last), dsn.url)}`
          : 'no attempt finished';
        out.event('not-acquired', `not acquired${when}: ${why}`, { key1: keys.key1, key2: keys.key2 });
        return EXIT.NOT_ACQUIRED;
      }
      const who = await holderText(dsn, keys);
      out.event('held', `not acquired: key (${keys.key1}, ${keys.key2}) is held${when}${who}`, {
        key1: keys.key1,
        key2: keys.key2,
      });
      return EXIT.NOT_ACQUIRED;
    }
    const term = lock.term;
    out.event('acquired', `acquired key (${keys.key1}, ${keys.key2}) as ${lock.id}`, {
      key1: keys.key1,
      key2: keys.key2,
      id: lock.id,
      term: term?.id,
    });
    if (command.length === 0) {
      await lock.shutdown();
      out.event('released', 'released');
      return EXIT.OK;
    }
    return await runCommand(lock, command, killGraceMs, out, (c) => {
      child = c;
    });
  } finally {
    removeSignals();
    await lock.shutdown();
  }
}

/** Run `command` while leader; SIGTERM (then SIGKILL) it when the term ends. */
async function runCommand(
  lock: LeaderLock,
  command: string[],
  killGraceMs: number,
  out: Output,
  started: (child: ChildProcess) => void,
): Promise<number> {
  const [file, ...args] = command as [string, ...string[]];
  const term = lock.term;
  const child = spawn(file, args, {
    stdio: 'inherit',
    env: {
      ...process.env,
      PGLEADERLOCK_ID: lock.id,
      PGLEADERLOCK_KEY1: String(lock.key1),
      PGLEADERLOCK_KEY2: String(lock.key2),
    },
  });
  started(child);
  let lost = false;
  let finishing = false;
  let killTimer: NodeJS.Timeout | undefined;
  const onTermEnd = (): void => {
    if (finishing) return;
    lost = true;
    out.event('lost', `leadership lost: sending SIGTERM to ${file} (pid ${child.pid ?? '?'})`, {
      pid: child.pid,
    });
    child.kill('SIGTERM');
    killTimer = setTimeout(() => {
      out.event('kill', `${file} still running after ${humanMs(killGraceMs)}: SIGKILL`, { pid: child.pid });
      child.kill('SIGKILL');
    }, killGraceMs);
  };
  if (!term || term.signal.aborted) onTermEnd();
  else term.signal.addEventListener('abort', onTermEnd, { once: true });

  const status = await new Promise<number>((resolve) => {
    child.once('error', (err) => {
      out.event('error', `cannot run ${JSON.stringify(file)}: ${explain(err)}`);
      resolve(EXIT.CANNOT_RUN);
    });
    child.once('exit', (code, signal) => {
      resolve(code ?? (signal ? signalNumber(signal) + 128 : 1));
    });
  });
  finishing = true;
  clearTimeout(killTimer);
  term?.signal.removeEventListener('abort', onTermEnd);
  if (lost) {
    out.event('exit', `exit ${EXIT.LOST}: leadership was lost while ${file} ran`, {
      code: EXIT.LOST,
      status,
    });
    return EXIT.LOST;
  }
  await lock.shutdown();
  out.event('released', `released; ${file} exited with ${status}`, { status });
  return status;
}
