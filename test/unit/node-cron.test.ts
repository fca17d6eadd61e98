/** pgleaderlock/node-cron without a database: fire keys, options, and the types node-cron expects. */
import fs from 'node:fs';
import path from 'node:path';
import cron, { type RunCoordinator } from 'node-cron';
import type pg from 'pg';
import { describe, expect, expectTypeOf, it } from 'vitest';
import { LeaderLock } from '../../src/index.js';
import {
  fireKey,
  type LeaderCoordinator,
  leaderCoordinator,
  parseFireKey,
  type Queryable,
} from '../../src/node-cron/index.js';
import { FakeClock, flush } from './fakes.js';

const quiet = { info() {}, warn() {}, error() {}, debug() {} };
const pool: Queryable = { query: async () => ({ rows: [], rowCount: 0, command: '', oid: 0, fields: [] }) };
const fenced = () =>
  new LeaderLock({ name: 'cron-unit', connectionString: 'postgres://localhost/x', fencing: true });

describe('parseFireKey', () => {
  it('splits "<task>:<ISO time>", the task name keeping its own colons', () => {
    expect(parseFireKey('report:2026-03-01T03:00:00.000Z')).toEqual({
      task: 'report',
      fireAt: new Date('2026-03-01T03:00:00.000Z'),
    });
    expect(parseFireKey('billing:eu:2026-03-01T03:00:00.000Z').task).toBe('billing:eu');
    expect(parseFireKey('a b\nc:1970-01-01T00:00:00.000Z').task).toBe('a b\nc');
    expect(parseFireKey('far:+010000-01-01T00:00:00.000Z').fireAt.getUTCFullYear()).toBe(10000);
  });

  it('is the inverse of fireKey', () => {
    const at = new Date('2026-11-05T23:59:59.000Z');
    expect(parseFireKey(fireKey('x:y', at))).toEqual({ task: 'x:y', fireAt: at });
  });

  it.each([
    ['no time', 'report'],
    ['no task', ':2026-03-01T03:00:00.000Z'],
    ['no separator', 'report2026-03-01T03:00:00.000Z'],
    ['a local time', 'report:2026-03-01T03:00:00.000'],
    ['no milliseconds', 'report:2026-03-01T03:00:00Z'],
    ['an offset instead of Z', 'report:2026-03-01T03:00:00.000+01:00'],
    ['a day that does not exist', 'report:2026-02-30T03:00:00.000Z'],
    ['an hour out of range', 'report:2026-03-01T24:00:00.000Z'],
    ['a number', 42],
    ['undefined', undefined],
  ])('refuses %s with a TypeError (node-cron then skips the fire)', (_, key) => {
    expect(() => parseFireKey(key)).toThrow(TypeError);
  });

  it('reads the keys the real node-cron v4 passes: the task name and the scheduled second', async () => {
    const keys: string[] = [];
    const task = cron.schedule('* * * * * *', () => {}, {
      name: 'unit:tick',
      distributed: true,
      runCoordinator: {
        shouldRun(key) {
          keys.push(key);
          return false;
        },
      },
      logger: quiet,
    });
    try {
      const deadline = performance.now() + 2500;
      while (keys.length === 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    } finally {
      await task.destroy();
    }
    expect(keys.length).toBeGreaterThan(0);
    const fire = parseFireKey(keys[0]);
    expect(fire.task).toBe('unit:tick');
    expect(fire.fireAt.getUTCMilliseconds()).toBe(0); // the slot, not the moment it ran
    expect(Math.abs(Date.now() - fire.fireAt.getTime())).toBeLessThan(3000);
  });
});

describe('leaderCoordinator options', () => {
  it('needs a lock with fencing on', () => {
    const lock = new LeaderLock({ name: 'cron-unit', connectionString: 'postgres://localhost/x' });
    expect(() => leaderCoordinator(lock, { pool })).toThrow(/fencing: true/);
  });

  it.each([
    ['a pool without query()', { pool: {} }, /pool must be/],
    ['an unknown option', { pool, leaderWaitMS: 100 }, /unknown leaderCoordinator option "leaderWaitMS"/],
    ['an empty name', { pool, name: '' }, /name must be/],
    ['a table name with a quote', { pool, table: 'x"; drop table y; --' }, /table must be/],
    ['timeoutMs 0', { pool, timeoutMs: 0 }, /timeoutMs must be greater than 0/],
    ['a negative leaderWaitMs', { pool, leaderWaitMs: -1 }, /leaderWaitMs/],
    ['retainMs past the longest timer', { pool, retainMs: 2 ** 31 }, /retainMs/],
  ])('refuses %s, naming it', (_, options, message) => {
    expect(() => leaderCoordinator(fenced(), options as never)).toThrow(message);
  });

  it('a lock that does not lead never runs a fire, and asks the database nothing', async () => {
    let queries = 0;
    const counting: Queryable = {
      query: async () => {
        queries += 1;
        return { rows: [], rowCount: 0, command: '', oid: 0, fields: [] };
      },
    };
    const coordinator = leaderCoordinator(fenced(), { pool: counting, leaderWaitMs: 50 });
    expect(await coordinator.shouldRun('report:2026-03-01T03:00:00.000Z', 30_000)).toBe(false);
    expect(queries).toBe(0);
  });

  // the default (5 s, docs/node-cron.md) is checked here, on the clock; the integration test of
  // a claim blocked on a real row lock sets a shorter timeoutMs
  it.each([
    ['timeoutMs 60000', 60_000, { timeoutMs: 60_000 }],
    ['no timeoutMs: the default, 5 s', 5000, {}],
  ] as const)(
    'times a claim on its clock (%s): a database that does not answer fails the fire after timeoutMs of that clock',
    async (_label, timeoutMs, options) => {
      const clock = new FakeClock();
      // a lock that leads under epoch 5 (all the coordinator reads of it)
      const leading = {
        fencingTable: '"pgleaderlock_epochs"',
        key1: 1,
        key2: 2,
        id: 'a',
        isLeader: true,
        term: { id: 1, epoch: 5n },
      } as unknown as LeaderLock;
      const hanging: Queryable = {
        query: (text: string) =>
          /create table/i.test(text) ? pool.query(text, []) : new Promise<never>(() => {}),
      } as Queryable;
      const coordinator = leaderCoordinator(leading, { pool: hanging, ...options, clock });
      const outcome = coordinator.shouldRun('report:2026-03-01T03:00:00.000Z').then(
        () => 'ran',
        (e: unknown) => e,
      );
      for (let i = 0; i < 20; i++) await flush();
      await clock.advance(timeoutMs - 1);
      let settled = false;
      void outcome.then(() => {
        settled = true;
      });
      await flush();
      expect(settled).toBe(false);
      await clock.advance(1);
      expect(await outcome).toMatchObject({ code: 'ERR_PGLEADERLOCK_QUERY_TIMEOUT' });
    },
  );

  it('refuses a clock without the three methods, naming it', () => {
    expect(() => leaderCoordinator(fenced(), { pool, clock: { now: () => 0 } as never })).toThrow(
      /clock must have now, setTimeout and clearTimeout methods, received/,
    );
  });

  it('fits node-cron’s RunCoordinator; a pg.Pool or pg.Client is a Queryable', () => {
    expectTypeOf<LeaderCoordinator>().toExtend<RunCoordinator>();
    expectTypeOf<pg.Pool>().toExtend<Queryable>();
    expectTypeOf<pg.Client>().toExtend<Queryable>();
    expectTypeOf<pg.PoolClient>().toExtend<Queryable>();
  });
});

describe('docs/node-cron.md', () => {
  const root = path.resolve(import.meta.dirname, '../..');
  const doc = fs.readFileSync(path.join(root, 'docs/node-cron.md'), 'utf8');
  it.each(['examples/node-cron.ts', 'examples/nestjs/leader-only.ts'])('quotes %s verbatim', (file) => {
    expect(doc).toContain(fs.readFileSync(path.join(root, file), 'utf8').trim());
  });
});
