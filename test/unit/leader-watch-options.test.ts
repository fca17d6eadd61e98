/**
 * LeaderWatch (docs/choosing-the-leader.md): its options are validated as LeaderLock's (at
 * construction, errors naming the option and the value received, unknown options refused),
 * its registrations as LeaderLock's `on*`, and what it does before it is started.
 */
import { describe, expect, it } from 'vitest';
import { ExponentialBackoff, LeaderLock, LeaderWatch, type LeaderWatchOptions } from '../../src/index.js';
import { resolveWatchOptions, watchApplicationName } from '../../src/watch/options.js';

const make = (o: Record<string, unknown>) =>
  new LeaderWatch({
    key1: 1,
    key2: 2,
    connectionString: 'postgres://u:pw@127.0.0.1:1/db',
    ...o,
  } as LeaderWatchOptions);

describe('LeaderWatch option validation', () => {
  it.each([
    [{ key1: 1.5 }, TypeError, /key1 must be an integer, received 1.5/],
    [{ key1: '1' }, TypeError, /key1 must be an integer, received "1"/],
    [{ key2: 2_147_483_648 }, RangeError, /key2 .*received 2147483648/],
    [{ key2: undefined }, TypeError, /key2 must be an integer, received undefined/],
    [{ name: 'x' }, TypeError, /either name or key1 and key2/],
    [{ healthIntervalMs: -1 }, RangeError, /healthIntervalMs .*received -1/],
    [{ healthIntervalMs: 0 }, RangeError, /healthIntervalMs must be greater than 0/],
    [{ healthIntervalMs: Number.NaN }, RangeError, /healthIntervalMs .*received NaN/],
    [{ healthIntervalMs: 2 ** 31 }, RangeError, /healthIntervalMs must be at most 2147483647 ms/],
    [{ healthIntervalMs: 2 ** 30 }, RangeError, /healthIntervalMs \+ queryTimeoutMs must be at most/],
    [{ queryTimeoutMs: '5s' }, TypeError, /queryTimeoutMs must be a number of milliseconds, received "5s"/],
    [{ closeTimeoutMs: -5 }, RangeError, /closeTimeoutMs .*received -5/],
    [{ callbackTimeoutMs: 0 }, RangeError, /callbackTimeoutMs must be greater than 0/],
    [{ unref: 'yes' }, TypeError, /unref must be a boolean, received "yes"/],
    [
      { retryStrategy: { delay: 1 } },
      TypeError,
      /retryStrategy must have a nextDelayMs\(ctx\) method, received \{"delay":1\}/,
    ],
    [{ signal: {} }, TypeError, /signal must be an AbortSignal/],
    [{ logger: console.log }, TypeError, /logger must have debug, info, warn and error/],
    [{ clock: { now: () => 0 } }, TypeError, /clock must have now, setTimeout and clearTimeout/],
    [{ id: '' }, TypeError, /id must be a string of 1 to 128 characters, received ""/],
    [{ id: 'x'.repeat(129) }, TypeError, /id must be a string of 1 to 128 characters/],
    [{ id: 'a\u0000b' }, TypeError, /id must be printable/],
    [{ connect: async () => ({}) }, TypeError, /either connect or connectionString/],
    [{ connectionString: 5 }, TypeError, /connectionString must be a string, received number/],
    [{ clientConfig: 'x', connectionString: undefined }, TypeError, /clientConfig must be an object/],
    [
      { connectionString: 'postgres://u:pw@h1,h2/db?target_session_attrs=standby' },
      TypeError,
      /target_session_attrs=standby/,
    ],
    // what a watch has no use for is refused, not ignored: it takes no lock
    [{ keyOne: 1 }, TypeError, /unknown LeaderWatch option "keyOne"/],
    [{ takeoverDelayMs: 0 }, TypeError, /unknown LeaderWatch option "takeoverDelayMs"/],
    [{ acquireMode: 'wait' }, TypeError, /unknown LeaderWatch option "acquireMode"/],
    [{ serverReleaseMs: 20_000 }, TypeError, /unknown LeaderWatch option "serverReleaseMs"/],
  ])('%o is rejected', (opts, type, message) => {
    expect(() => make(opts)).toThrow(type);
    expect(() => make(opts)).toThrow(message);
  });

  it('rejects a non-object', () => {
    expect(() => new LeaderWatch(null as unknown as LeaderWatchOptions)).toThrow(
      /LeaderWatch options must be an object, received null/,
    );
  });

  it('never puts the password in an error message', () => {
    let message = '';
    try {
      make({ key1: Number.NaN });
    } catch (e) {
      message = String(e);
    }
    expect(message).toContain('key1');
    expect(message).not.toContain('pw');
  });

  it('takes a name as LeaderLock does, or keys; exposes them and its id', () => {
    const byName = make({ key1: undefined, key2: undefined, name: 'billing', id: 'w1' });
    expect([byName.key1, byName.key2]).toEqual(LeaderLock.keysFromName('billing'));
    expect(LeaderWatch.keysFromName('billing')).toEqual(LeaderLock.keysFromName('billing'));
    expect(byName.id).toBe('w1');
    const byKeys = make({
      key1: -2_147_483_648,
      key2: 2_147_483_647,
      retryStrategy: new ExponentialBackoff(),
    });
    expect([byKeys.key1, byKeys.key2]).toEqual([-2_147_483_648, 2_147_483_647]);
    expect(byKeys.id.length).toBeGreaterThan(0);
  });

  it('defaults: read every 5000 ms, statements 5000 ms, close 1000 ms, callbacks 10000 ms, back-off 100 ms doubling to 30 s, ref', () => {
    const o = resolveWatchOptions({ key1: 1, key2: 2, connectionString: 'postgres://u:pw@127.0.0.1:1/db' });
    expect([o.healthIntervalMs, o.queryTimeoutMs, o.closeTimeoutMs, o.callbackTimeoutMs, o.unref]).toEqual([
      5000,
      5000,
      1000,
      10_000,
      false,
    ]);
    expect(o.retryStrategy).toBeInstanceOf(ExponentialBackoff);
    const backoff = o.retryStrategy as ExponentialBackoff;
    // the one reconnect policy of every election: at most 1 s while the server is away
    expect([backoff.baseMs, backoff.multiplier, backoff.maxMs, backoff.outageMaxMs]).toEqual([
      100, 2, 30_000, 1000,
    ]);
    expect(o.endpoints.map((e) => e.label)).toEqual(['127.0.0.1:1']);
  });

  it('names its session pgleaderlock-watch:<id>, or by its start and a hash when that would not survive intact', () => {
    expect(watchApplicationName('w1')).toBe('pgleaderlock-watch:w1');
    const long = watchApplicationName('é'.repeat(40));
    expect(Buffer.byteLength(long)).toBeLessThanOrEqual(63);
    expect(long).toMatch(/^pgleaderlock-watch:\?+~[a-z2-7]{13}$/);
  });
});

describe('LeaderWatch before start', () => {
  it('knows nobody, is not connected, and close() resolves at once', async () => {
    const watch = make({});
    expect(watch.leader).toBeNull();
    expect(watch.connected).toBe(false);
    await watch.close();
    await watch[Symbol.asyncDispose]();
  });

  it('start() with an aborted signal does nothing', async () => {
    const watch = make({ signal: AbortSignal.abort() });
    await watch.start();
    expect(watch.connected).toBe(false);
  });

  it('onChange and onError validate as LeaderLock registrations and return the function', () => {
    const watch = make({});
    const fn = (): void => {};
    expect(watch.onChange(fn)).toBe(fn);
    expect(watch.onError(fn, { signal: new AbortController().signal })).toBe(fn);
    expect(() => watch.onChange('x' as unknown as () => void)).toThrow(/onChange expects a function/);
    expect(() => watch.onChange(fn, { signal: {} as AbortSignal })).toThrow(
      /onChange options.signal must be an AbortSignal/,
    );
  });
});
