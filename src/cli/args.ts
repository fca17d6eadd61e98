/**
 * Command-line parsing for `pgleaderlock`: one declarative option table per command (the
 * same table prints `--help`), durations with units, lock keys, and the connection string.
 * Every bad input becomes a {@link UsageError}: one line naming the option and the value.
 */

import { parseArgs } from 'node:util';
import { passwordsIn, redactConnectionString } from '../core/hosts.js';
import { keysFromName } from '../core/keys.js';
import { checkKey } from '../core/validate.js';
import { MAX_PARTITIONS } from '../partitions/options.js';

/** Bad input on the command line or in the environment: exit code 2, one line, no stack. */
export class UsageError extends Error {
  override name = 'UsageError';
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
  }
}

export interface OptionSpec {
  /** Long name without the dashes. */
  name: string;
  type: 'string' | 'boolean';
  short?: string;
  /** Placeholder shown in help, e.g. `DURATION`. */
  value?: string;
  /** Shown in help after the description. */
  default?: string;
  help: string;
}

export type Values = Record<string, string | boolean | undefined>;

export interface Parsed {
  values: Values;
  /** Arguments after `--`, untouched. */
  rest: string[];
}

/**
 * Parse `argv` against `options`. Accepts `--opt value`, `--opt=value`, negative numbers as
 * values (`--key1 -5`), and everything after `--` verbatim in `rest`. `optionalValue` names
 * string options that may also appear bare (`--wait` alone gives `''`).
 */
export function parse(argv: string[], options: OptionSpec[], optionalValue: string[] = []): Parsed {
  const split = argv.indexOf('--');
  const head = split === -1 ? argv : argv.slice(0, split);
  const rest = split === -1 ? [] : argv.slice(split + 1);
  const byName = new Map(options.map((o) => [o.name, o]));
  const args: string[] = [];
  for (let i = 0; i < head.length; i++) {
    const token = head[i] ?? '';
    const name = token.startsWith('--') && !token.includes('=') ? token.slice(2) : undefined;
    const spec = name === undefined ? undefined : byName.get(name);
    const next = head[i + 1];
    if (spec?.type === 'string' && optionalValue.includes(spec.name)) {
      // bare `--wait`, or `--wait 30s`
      const takesNext = next !== undefined && !next.startsWith('-');
      args.push(`${token}=${takesNext ? next : ''}`);
      if (takesNext) i++;
    } else if (spec?.type === 'string' && next !== undefined && /^-\d/.test(next)) {
      args.push(`${token}=${next}`);
      i++;
    } else {
      args.push(token);
    }
  }
  try {
    const { values, positionals } = parseArgs({
      args,
      options: Object.fromEntries(
        options.map((o) => [o.name, o.short ? { type: o.type, short: o.short } : { type: o.type }]),
      ),
      strict: true,
      allowPositionals: true,
    });
    if (positionals.length > 0) {
      throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`);
    }
    return { values: values as Values, rest };
  } catch (err) {
    if (err instanceof UsageError) throw err;
    // node's messages can span lines; the first line names the option
    const first = ((err as Error).message ?? String(err)).split('\n')[0] ?? '';
    throw new UsageError(first.replace(/\. To specify.*$/, ''));
  }
}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, min: 60_000, h: 3_600_000 };

/** `250`, `250ms`, `5s`, `1.5s`, `2m`, `1h` → milliseconds. A bare number is milliseconds. */
export function parseDuration(flag: string, text: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?$/.exec(text.trim());
  if (!m) {
    throw new UsageError(
      `--${flag}: bad duration ${JSON.stringify(text)} (milliseconds, or a number with ms, s, m or h: 250ms, 5s)`,
    );
  }
  return Number(m[1]) * (UNITS[m[2] ?? 'ms'] ?? 1);
}

export function optionalDuration(values: Values, flag: string): number | undefined {
  const v = values[flag];
  return typeof v === 'string' ? parseDuration(flag, v) : undefined;
}

export function positiveInt(values: Values, flag: string, fallback: number): number {
  const v = values[flag];
  if (typeof v !== 'string') return fallback;
  if (!/^\d+$/.test(v) || Number(v) < 1) {
    throw new UsageError(`--${flag} must be a whole number >= 1, received ${JSON.stringify(v)}`);
  }
  return Number(v);
}

/** `--partitions`: an integer from 1 to 4096, as `PartitionedLeadership` takes. */
export function partitionCount(values: Values): number {
  const v = values.partitions;
  if (typeof v !== 'string' || !/^\d+$/.test(v) || Number(v) < 1 || Number(v) > MAX_PARTITIONS) {
    throw new UsageError(
      `--partitions must be an integer from 1 to ${MAX_PARTITIONS}, received ${JSON.stringify(v)}`,
    );
  }
  return Number(v);
}

function parseKey(flag: string, text: string): number {
  if (!/^-?\d+$/.test(text.trim())) {
    throw new UsageError(`--${flag} must be an integer, received ${JSON.stringify(text)}`);
  }
  try {
    return checkKey(`--${flag}`, Number(text));
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

export interface Keys {
  key1: number;
  key2: number;
  /** The --name the keys came from, if any. */
  name?: string;
}

/** `--key1` and `--key2`, or `--name` (hashed with `LeaderLock.keysFromName`). */
export function resolveKeys(values: Values): Keys {
  const { key1, key2, name } = values;
  if (typeof name === 'string') {
    if (key1 !== undefined || key2 !== undefined) {
      throw new UsageError('give either --name or --key1 and --key2, not both');
    }
    if (name.length === 0) throw new UsageError('--name must not be empty');
    const [k1, k2] = keysFromName(name);
    return { key1: k1, key2: k2, name };
  }
  if (typeof key1 !== 'string' || typeof key2 !== 'string') {
    const missing =
      typeof key1 === 'string' ? '--key2' : typeof key2 === 'string' ? '--key1' : 'the lock key';
    throw new UsageError(`missing ${missing}: give --key1 and --key2 (32-bit integers), or --name`);
  }
  return { key1: parseKey('key1', key1), key2: parseKey('key2', key2) };
}

/** Where the connection string came from, for messages. */
export interface Dsn {
  /** Undefined: libpq-style PG* environment variables (PGHOST, PGUSER, …). */
  url: string | undefined;
  source: '--dsn' | 'PG_DSN' | 'DATABASE_URL' | 'PGHOST';
}

/** `--dsn`, else `$PG_DSN`, else `$DATABASE_URL`, else the PG* variables if PGHOST is set. */
export function resolveDsn(values: Values, env: NodeJS.ProcessEnv = process.env): Dsn {
  const flag = values.dsn;
  if (typeof flag === 'string') {
    if (flag === '') throw new UsageError('--dsn must not be empty');
    return { url: flag, source: '--dsn' };
  }
  if (env.PG_DSN) return { url: env.PG_DSN, source: 'PG_DSN' };
  if (env.DATABASE_URL) return { url: env.DATABASE_URL, source: 'DATABASE_URL' };
  if (env.PGHOST) return { url: undefined, source: 'PGHOST' };
  throw new UsageError('no database given: pass --dsn postgres://…, or set PG_DSN or DATABASE_URL');
}

/** A connection string with its passwords replaced by `***` (URL, multi-host and key=value forms). */
export function redact(dsn: string | undefined): string {
  return dsn === undefined ? '(PG* environment)' : redactConnectionString(dsn);
}

/** Remove every occurrence of the DSN's passwords from a text (driver messages may echo them). */
export function scrub(text: string, dsn: string | undefined): string {
  if (!dsn) return text;
  let out = text.split(dsn).join(redact(dsn));
  for (const password of new Set(passwordsIn(dsn))) {
    if (password.length >= 3) out = out.split(password).join('***');
  }
  return out;
}
