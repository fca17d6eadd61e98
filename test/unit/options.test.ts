import { describe, expect, it } from 'vitest';
import { LeaderLock, type LeaderLockOptions } from '../../src/index.js';

const make = (o: Partial<LeaderLockOptions> & Record<string, unknown>) =>
  new LeaderLock({
    key1: 1,
    key2: 2,
    connectionString: 'postgres://u:pw@127.0.0.1:1/db',
    ...o,
  } as LeaderLockOptions);

describe('option validation', () => {
  it.each([
    [{ key1: 1.5 }, TypeError, /key1 must be an integer, received 1.5/],
    [{ key1: '1' }, TypeError, /key1 must be an integer, received "1"/],
    [{ key2: 2_147_483_648 }, RangeError, /key2 .*received 2147483648/],
    [{ key2: -2_147_483_649 }, RangeError, /key2 .*received -2147483649/],
    [{ healthIntervalMs: -1 }, RangeError, /healthIntervalMs .*received -1/],
    [{ healthIntervalMs: Number.NaN }, RangeError, /healthIntervalMs .*received NaN/],
    [{ healthIntervalMs: 0 }, RangeError, /healthIntervalMs must be greater than 0/],
    [{ reconnectGraceMs: Number.POSITIVE_INFINITY }, RangeError, /reconnectGraceMs .*Infinity/],
    [{ queryTimeoutMs: '5s' }, TypeError, /queryTimeoutMs must be a number of milliseconds, received "5s"/],
    [{ autoReacquire: 'yes' }, TypeError, /autoReacquire must be a boolean, received "yes"/],
    [
      { retryStrategy: { delay: 1 } },
      TypeError,
      /retryStrategy must have a nextDelayMs\(ctx\) method, received \{"delay":1\}/,
    ],
    [{ signal: {} }, TypeError, /signal must be an AbortSignal/],
    [{ logger: console.log }, TypeError, /logger must have debug, info, warn and error/],
    [{ id: '' }, TypeError, /id must be a string of 1 to 128 characters, received ""/],
    [{ id: 'x'.repeat(129) }, TypeError, /id must be a string of 1 to 128 characters/],
    [{ id: 'a\u2028b' }, TypeError, /id must be printable/],
    [{ waitSliceMs: 1 }, RangeError, /^waitSliceMs must be at least 100, received 1$/],
    [{ waitSliceMs: 99.5 }, RangeError, /waitSliceMs must be at least 100, received 99.5/],
    [
      { connectionString: 'not a url at all' },
      TypeError,
      /connectionString must be a postgres:\/\/ or postgresql:\/\/ URL, keyword\/value pairs .* received "not a url at all"/,
    ],
    [{ keyOne: 1 }, TypeError, /unknown LeaderLock option "keyOne"/],
    [{ random: 0.5 }, TypeError, /random must be a function, received 0.5/],
    [{ connect: async () => ({}) }, TypeError, /either connect or connectionString/],
  ])('%o is rejected', (opts, type, message) => {
    expect(() => make(opts as Partial<LeaderLockOptions>)).toThrow(type);
    expect(() => make(opts as Partial<LeaderLockOptions>)).toThrow(message);
  });

  it('connect may be a list, one hook per host; an empty list or a non-function in it is refused', () => {
    const hook = async () => ({}) as never;
    const bare = { connectionString: undefined };
    expect(() => make({ ...bare, connect: [hook, hook] })).not.toThrow();
    expect(() => make({ ...bare, connect: [] })).toThrow(/connect must be a function or a non-empty array/);
    expect(() => make({ ...bare, connect: [hook, 'h2'] as never })).toThrow(
      /connect\[1\] must be a function, received "h2"/,
    );
  });

  it('accepts the extremes of the key range and a null grace', () => {
    expect(() => make({ key1: -2_147_483_648, key2: 2_147_483_647, reconnectGraceMs: null })).not.toThrow();
  });

  it('a connection string that does not parse is refused without its password', () => {
    expect(() => make({ connectionString: 'postgress://u:hunter22@db.example/app' })).toThrow(
      /connectionString must be a postgres:\/\/ .*received "postgress:\/\/u:\*\*\*@db.example\/app"/,
    );
    for (const malformed of ['postgres:u:s3cret@h/db', 'pg://u:s3cret@h/db', 'u:s3cret@h/db']) {
      expect(() => make({ connectionString: malformed })).toThrow(/connectionString must be a postgres:\/\//);
      expect(() => make({ connectionString: malformed })).not.toThrow(/s3cret/);
    }
    // as pg's URL parser does: leading and trailing spaces and control characters are dropped
    for (const padded of [
      ' postgres://u:s3cret@h/db',
      '\tpostgres://u:s3cret@h/db\n',
      'POSTGRES://u:s3cret@h/db',
    ]) {
      expect(() => make({ connectionString: padded })).not.toThrow();
    }
    expect(() => make({ connectionString: '/var/run/postgresql' })).not.toThrow();
    expect(() => make({ connectionString: 'host=/tmp dbname=x' })).not.toThrow();
  });

  it('never puts the password in an error message', () => {
    let message = '';
    try {
      make({ key1: Number.NaN });
    } catch (e) {
      message = String(e);
    }
    expect(message).toContain('key1'); // it did throw, naming the option
    expect(message).not.toContain('pw');
  });

  it('exposes id and keys; application_name fits in 63 bytes', () => {
    const lock = make({ id: 'é'.repeat(40) });
    expect(lock.id).toBe('é'.repeat(40));
    expect(lock.key1).toBe(1);
    expect(lock.key2).toBe(2);
    expect(lock.state).toBe('stopped');
    expect(lock.isLeader).toBe(false);
  });

  it('callback registration returns the function and rejects non-functions', () => {
    const lock = make({});
    const fn = () => {};
    expect(lock.onAcquired(fn)).toBe(fn);
    expect(lock.onLost(fn)).toBe(fn);
    expect(() => lock.onReleased(42 as unknown as () => void)).toThrow(
      /onReleased expects a function, received number/,
    );
  });
});
