/**
 * Option validation of `LeaderLock` and `PartitionedLeadership`, as properties: any valid
 * options object is accepted; one wrong value (type or range) in an otherwise valid object
 * throws a TypeError or RangeError that names the option and echoes the value; any key
 * outside the documented ones is refused. Constructing starts nothing (no connection).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { MAX_TIMER_MS, show } from '../../src/core/validate.js';
import { LeaderLock, PartitionedLeadership } from '../../src/index.js';
import { params } from './seed.js';

const INT32 = { min: -(2 ** 31), max: 2 ** 31 - 1 };
const connect = async (): Promise<never> => {
  throw new Error('never called: nothing is started');
};
const noop = (): void => {};
const logger = { debug: noop, info: noop, warn: noop, error: noop };
const clock = { now: () => 0, setTimeout: () => 0, clearTimeout: noop };
const retryStrategy = { nextDelayMs: () => 10 };

/** A printable id (1 to 128 characters, any script). */
const printableId = fc
  .string({ unit: 'grapheme', minLength: 1, maxLength: 40 })
  .filter((s) => s.length <= 128 && !/[\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Cs}\p{Zl}\p{Zp}]/u.test(s));
const asciiId = fc.stringMatching(/^[\x20-\x22\x24-\x39\x3b-\x7e]{1,40}$/);
const ms = (min: number) => fc.integer({ min, max: 100_000_000 });

/** The shared options, valid together (serverReleaseMs leaves room for a health period and its deadline). */
const shared = fc
  .record(
    {
      healthIntervalMs: ms(1),
      queryTimeoutMs: ms(1),
      extraRelease: fc.option(fc.integer({ min: 0, max: 1000 }), { nil: undefined }),
      closeTimeoutMs: ms(0),
      callbackTimeoutMs: ms(1),
      takeoverDelayMs: ms(0),
      unref: fc.boolean(),
      logger: fc.constant(logger),
      clock: fc.constant(clock),
      signal: fc.constant(null).map(() => new AbortController().signal),
    },
    { requiredKeys: [] },
  )
  .map(({ extraRelease, ...o }) => {
    const h = o.healthIntervalMs ?? 5000;
    const q = o.queryTimeoutMs ?? 5000;
    // the default, 2 × (health + query), or above it
    return extraRelease === undefined ? o : { ...o, serverReleaseMs: 2 * (h + q) + extraRelease };
  });

const lockOptions = fc
  .tuple(
    shared,
    fc.oneof(
      fc.record({ key1: fc.integer(INT32), key2: fc.integer(INT32) }),
      fc.record({ name: fc.string({ minLength: 1, maxLength: 80 }) }),
    ),
    fc.record(
      {
        id: printableId,
        priority: fc.maxSafeInteger().map((n) => n * (n % 2 ? -1 : 1)),
        retryStrategy: fc.constant(retryStrategy),
        reconnectGraceMs: fc.oneof(ms(1), fc.constant(null)),
        autoReacquire: fc.boolean(),
        acquireMode: fc.constantFrom('wait' as const, 'poll' as const),
        waitSliceMs: ms(100),
        fencing: fc.oneof(fc.boolean(), fc.record({ table: fc.constantFrom('epochs', 'app.epochs') })),
        random: fc.constant(() => 0.5),
      },
      { requiredKeys: [] },
    ),
  )
  .map(([s, k, o]) => ({ ...s, ...k, ...o, connect }));

const partitionOptions = fc
  .tuple(
    shared,
    fc.record({
      name: fc.string({ minLength: 1, maxLength: 80 }),
      partitions: fc.integer({ min: 1, max: 4096 }),
    }),
    fc.record(
      {
        id: asciiId,
        drainTimeoutMs: ms(0),
        watchSliceMs: ms(1),
        fencing: fc.boolean(),
        random: fc.constant(() => 0.5),
      },
      { requiredKeys: [] },
    ),
  )
  .map(([s, n, o]) => ({ ...s, ...n, ...o, connect }));

type Bad = { option: string; value: unknown; error: typeof TypeError | typeof RangeError };

// null is left out: the options read `value ?? default`, so null means the default (as undefined)
const notANumber = fc.oneof(fc.string(), fc.boolean(), fc.constant({}), fc.bigInt());
/** A duration option's wrong values: not a number (TypeError); negative, not finite, past 2^31 - 1 (RangeError). */
function badDuration(option: string, positive: boolean): fc.Arbitrary<Bad> {
  return fc.oneof(
    notANumber.map((value) => ({ option, value, error: TypeError })),
    fc
      .oneof(
        fc.double({ max: -Number.MIN_VALUE, noNaN: true }),
        fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY),
        fc.double({ min: MAX_TIMER_MS + 1, noNaN: true }),
        positive ? fc.constant(0) : fc.constant(-1),
      )
      .map((value) => ({ option, value, error: RangeError })),
  );
}

const sharedBad: fc.Arbitrary<Bad>[] = [
  badDuration('healthIntervalMs', true),
  badDuration('queryTimeoutMs', true),
  badDuration('closeTimeoutMs', false),
  badDuration('callbackTimeoutMs', true),
  badDuration('takeoverDelayMs', false),
  notANumber
    .filter((v) => typeof v !== 'boolean')
    .map((value) => ({ option: 'unref', value, error: TypeError })),
  fc.oneof(fc.string(), fc.integer(), fc.constant({ now: 1 })).map((value) => ({
    option: 'clock',
    value,
    error: TypeError,
  })),
  fc.oneof(fc.string(), fc.constant({})).map((value) => ({ option: 'signal', value, error: TypeError })),
  fc
    .oneof(fc.string(), fc.constant({ info: 1 }))
    .map((value) => ({ option: 'logger', value, error: TypeError })),
];

const lockBad = fc.oneof(
  ...sharedBad,
  fc.constantFrom('key1', 'key2').chain((option) =>
    fc.oneof(
      fc
        .oneof(
          fc.double({ noNaN: true }).filter((d) => !Number.isInteger(d)),
          fc.string(),
        )
        .map((value) => ({ option, value, error: TypeError })),
      fc
        .oneof(
          fc.integer({ min: 2 ** 31, max: 2 ** 52 }),
          fc.integer({ min: -(2 ** 52), max: -(2 ** 31) - 1 }),
        )
        .map((value) => ({ option, value, error: RangeError })),
    ),
  ),
  fc
    .oneof(
      fc.constant(''),
      fc.string({ minLength: 129, maxLength: 200 }),
      fc.constantFrom('a\nb', 'x\u200by'),
      fc.integer(),
    )
    .map((value) => ({ option: 'id', value, error: TypeError })),
  fc
    .oneof(
      fc.double().filter((d) => !Number.isSafeInteger(d)),
      fc.constant(2 ** 53),
    )
    .map((value) => ({ option: 'priority', value, error: RangeError })),
  badDuration('reconnectGraceMs', true),
  badDuration('waitSliceMs', true),
  fc.integer({ min: 1, max: 99 }).map((value) => ({ option: 'waitSliceMs', value, error: RangeError })),
  fc
    .oneof(
      fc.string().filter((s) => s !== 'wait' && s !== 'poll'),
      fc.integer(),
    )
    .map((value) => ({ option: 'acquireMode', value, error: TypeError })),
  notANumber
    .filter((v) => typeof v !== 'boolean')
    .map((value) => ({ option: 'autoReacquire', value, error: TypeError })),
  fc
    .oneof(fc.constant({}), fc.string())
    .map((value) => ({ option: 'retryStrategy', value, error: TypeError })),
  fc.oneof(fc.string(), fc.integer()).map((value) => ({ option: 'random', value, error: TypeError })),
  fc.oneof(fc.string(), fc.integer()).map((value) => ({ option: 'fencing', value, error: TypeError })),
);

const partitionBad = fc.oneof(
  ...sharedBad,
  fc
    .oneof(
      fc.integer({ min: -1000, max: 0 }),
      fc.integer({ min: 4097 }),
      fc.double().filter((d) => !Number.isInteger(d)),
    )
    .map((value) => ({ option: 'partitions', value, error: RangeError })),
  fc
    .oneof(
      fc.constant(''),
      fc.string({ minLength: 41, maxLength: 60 }),
      fc.constantFrom('a#b', 'a:b', 'ü', 'a\tb'),
    )
    .map((value) => ({ option: 'id', value, error: TypeError })),
  badDuration('drainTimeoutMs', false),
  badDuration('watchSliceMs', true),
  fc.oneof(fc.string(), fc.integer()).map((value) => ({ option: 'random', value, error: TypeError })),
);

const LOCK_KEYS = new Set(Object.keys({ ...lockKeys() }));
function lockKeys(): Record<string, true> {
  const names =
    'connectionString clientConfig connect key1 key2 name id priority retryStrategy healthIntervalMs reconnectGraceMs autoReacquire signal queryTimeoutMs acquireMode waitSliceMs serverReleaseMs closeTimeoutMs fencing callbackTimeoutMs takeoverDelayMs unref logger clock random';
  return Object.fromEntries(names.split(' ').map((n) => [n, true]));
}

function expectRefused(make: () => unknown, bad: Bad): void {
  let thrown: unknown;
  try {
    make();
  } catch (err) {
    thrown = err;
  }
  expect(thrown).toBeInstanceOf(bad.error);
  const message = (thrown as Error).message;
  expect(message).toContain(bad.option);
  expect(message).toContain(show(bad.value));
}

describe('LeaderLock options', () => {
  it('any valid options object is accepted (200 runs)', () => {
    fc.assert(
      fc.property(lockOptions, (o) => {
        expect(new LeaderLock(o)).toBeInstanceOf(LeaderLock);
      }),
      params(200),
    );
  });

  it('one wrong value: a TypeError or RangeError naming the option and echoing the value (400 runs)', () => {
    fc.assert(
      fc.property(lockOptions, lockBad, (o, bad) => {
        // a wrong key1/key2 goes with keys, not with a name (that is the other error)
        const { name: _name, ...keyed } = { ...o, name: undefined };
        const base = bad.option.startsWith('key') ? { ...keyed, key1: 1, key2: 2 } : o;
        expectRefused(() => new LeaderLock({ ...base, [bad.option]: bad.value } as never), bad);
      }),
      params(400),
    );
  });

  it('a key outside the documented options is refused, by name (100 runs)', () => {
    fc.assert(
      fc.property(
        lockOptions,
        fc.string({ minLength: 1 }).filter((k) => !LOCK_KEYS.has(k) && k !== '__proto__'),
        (o, key) => {
          expect(() => new LeaderLock({ ...o, [key]: 1 } as never)).toThrow(
            new TypeError(`unknown LeaderLock option ${JSON.stringify(key)}`),
          );
        },
      ),
      params(100),
    );
  });
});

describe('PartitionedLeadership options', () => {
  it('any valid options object is accepted (200 runs)', () => {
    fc.assert(
      fc.property(partitionOptions, (o) => {
        expect(new PartitionedLeadership(o)).toBeInstanceOf(PartitionedLeadership);
      }),
      params(200),
    );
  });

  it('one wrong value: a TypeError or RangeError naming the option and echoing the value (400 runs)', () => {
    fc.assert(
      fc.property(partitionOptions, partitionBad, (o, bad) => {
        expectRefused(() => new PartitionedLeadership({ ...o, [bad.option]: bad.value } as never), bad);
      }),
      params(400),
    );
  });

  it('a key outside the documented options is refused, by name (100 runs)', () => {
    const known = new Set([...LOCK_KEYS, 'partitions', 'drainTimeoutMs', 'watchSliceMs']);
    for (const k of [
      'key1',
      'key2',
      'priority',
      'retryStrategy',
      'reconnectGraceMs',
      'autoReacquire',
      'acquireMode',
      'waitSliceMs',
    ])
      known.delete(k);
    fc.assert(
      fc.property(
        partitionOptions,
        fc
          .oneof(
            fc.string({ minLength: 1 }),
            fc.constantFrom('key1', 'priority', 'acquireMode', 'waitSliceMs'),
          )
          .filter((k) => !known.has(k) && k !== '__proto__'),
        (o, key) => {
          expect(() => new PartitionedLeadership({ ...o, [key]: 1 } as never)).toThrow(
            new TypeError(`unknown PartitionedLeadership option ${JSON.stringify(key)}`),
          );
        },
      ),
      params(100),
    );
  });
});
