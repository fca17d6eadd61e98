/** What the `pgleaderlock` commands share: exit codes, common options, connecting, output. */
import type pg from 'pg';
import { systemClock } from '../core/clock.js';
import { destroyClient } from '../core/connect.js';
import { type Endpoint, endpointsOf } from '../core/endpoints.js';
import { ConnectionError, sqlStateOf } from '../core/errors.js';
import { type Found, findPrimary, NoPrimaryError } from '../core/primary.js';
import { type Dsn, type OptionSpec, redact, scrub, UsageError } from './args.js';

/** Exit codes. Documented in docs/cli.md; tests pin them. */
export const EXIT = {
  OK: 0,
  /** acquire: held by someone else (or still held when --wait ran out); break: refused. */
  NOT_ACQUIRED: 1,
  /** Bad input, unreachable database, wrong password, missing permission. */
  USAGE: 2,
  /** Leadership was lost: acquire's command was stopped, or run stopped with --no-auto-reacquire. */
  LOST: 75,
  /** acquire: the command could not be started. */
  CANNOT_RUN: 127,
} as const;

export const DSN_OPTION: OptionSpec = {
  name: 'dsn',
  type: 'string',
  value: 'URL',
  default: '$PG_DSN, then $DATABASE_URL',
  help: 'PostgreSQL connection string',
};
export const KEY_OPTIONS: OptionSpec[] = [
  { name: 'key1', type: 'string', value: 'INT', help: 'advisory lock key 1 (32-bit signed integer)' },
  { name: 'key2', type: 'string', value: 'INT', help: 'advisory lock key 2 (32-bit signed integer)' },
  {
    name: 'name',
    type: 'string',
    value: 'NAME',
    help: 'derive both keys from a name instead (LeaderLock.keysFromName)',
  },
];
export const JSON_OPTION: OptionSpec = { name: 'json', type: 'boolean', help: 'one JSON object per line' };
export const DEBUG_OPTION: OptionSpec = {
  name: 'debug',
  type: 'boolean',
  help: 'stack traces on errors; library debug log on stderr',
};
export const HELP_OPTION: OptionSpec = { name: 'help', short: 'h', type: 'boolean', help: 'show this help' };

/** The command was interrupted or failed in a way that has its own exit code and message. */
export class CliExit extends Error {
  constructor(
    readonly exitCode: number,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** One line for anything thrown by pg or node: the message, else the first inner error, else the code. */
export function explain(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) return explain(err.errors[0]);
  const e = err as { message?: unknown; code?: unknown } | null;
  const message = typeof e?.message === 'string' && e.message ? e.message : String(err);
  const state = sqlStateOf(err);
  return (state ? `${message} (SQLSTATE ${state})` : message).split('\n')[0] ?? message;
}

/** The lock's connection options for a DSN: the URL, or the PG* environment when there is none. */
export function connectionOptions(dsn: Dsn): { connectionString?: string } {
  return dsn.url === undefined ? {} : { connectionString: dsn.url };
}

/**
 * Survey the DSN's hosts (several, libpq-style, as the lock does) and connect to the
 * primary, or fail with exit code 2 and a one-line, password-free reason. Used before a
 * command starts work, so that an unreachable server or a wrong password is reported as
 * such instead of being retried forever. `standbyOk`: a host list with no primary but with
 * standbys answering (a failover in progress) is no error; then null is returned.
 */
export async function findPrimaryOrExit(
  dsn: Dsn,
  appName: string,
  { timeoutMs = 10_000, standbyOk = false } = {},
): Promise<Found | null> {
  let endpoints: Endpoint[] = [];
  try {
    endpoints = endpointsOf(connectionOptions(dsn), appName, timeoutMs);
    return await findPrimary(endpoints, { clock: systemClock, queryTimeoutMs: timeoutMs });
  } catch (err) {
    if (err instanceof NoPrimaryError) {
      err.standbys.close();
      if (standbyOk) return null;
    }
    // one host: the driver's own words (with the SQLSTATE); several: what each host said
    const why = endpoints.length === 1 && err instanceof ConnectionError && err.cause ? err.cause : err;
    throw new UsageError(`cannot connect to ${redact(dsn.url)}: ${scrub(explain(why), dsn.url)}`, {
      cause: err,
    });
  }
}

/** A client connected to the DSN's primary (see findPrimaryOrExit). */
export async function connectOrExit(dsn: Dsn, appName: string): Promise<pg.Client> {
  return ((await findPrimaryOrExit(dsn, appName)) as Found).client;
}

/** Check the database answers, a primary or (during a failover) only standbys; then close. */
export async function checkConnection(dsn: Dsn): Promise<void> {
  const found = await findPrimaryOrExit(dsn, 'pgleaderlock-cli', { standbyOk: true });
  if (found) destroyClient(found.client);
}

let outputClosed = false;

/**
 * When a reader of stdout or stderr goes away (`pgleaderlock run | head -1`, a demo killed
 * with SIGKILL), stop writing and shut down as on SIGTERM instead of crashing on EPIPE.
 */
export function handleClosedOutput(): void {
  const onError = (err: NodeJS.ErrnoException): void => {
    if (outputClosed) return;
    outputClosed = true;
    if (err.code === 'EPIPE' || err.code === 'ERR_STREAM_DESTROYED') process.kill(process.pid, 'SIGTERM');
  };
  process.stdout.on('error', onError);
  process.stderr.on('error', onError);
}

/** Event output: readable lines (`time  message  key=value …`) or one JSON object per line. */
export class Output {
  constructor(
    readonly json: boolean,
    private readonly stream: NodeJS.WritableStream = process.stdout,
  ) {}

  event(event: string, text: string, fields: Record<string, unknown> = {}): void {
    if (outputClosed) return;
    const now = Date.now();
    if (this.json) {
      this.stream.write(
        `${JSON.stringify({ time: new Date(now).toISOString(), event, message: text, ...fields })}\n`,
      );
      return;
    }
    const extra = Object.entries(fields)
      .filter(([, v]) => v !== undefined && v !== null)
      .map(([k, v]) => `${k}=${typeof v === 'string' && !/\s/.test(v) ? v : JSON.stringify(v)}`)
      .join(' ');
    this.stream.write(`${new Date(now).toISOString()}  ${text}${extra ? `  ${extra}` : ''}\n`);
  }
}

/** Ms as a short human figure: `850 ms`, `12.5 s`, `3 min`. */
export function humanMs(ms: number): string {
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 120_000) return `${(ms / 1000).toFixed(1)} s`;
  if (ms < 7_200_000) return `${Math.round(ms / 60_000)} min`;
  return `${(ms / 3_600_000).toFixed(1)} h`;
}
