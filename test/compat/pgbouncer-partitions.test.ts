/**
 * PartitionedLeadership behind a real PgBouncer (one per test, in front of this file's own
 * PostgreSQL server), as test/compat/pgbouncer.test.ts does for LeaderLock. Transaction and
 * statement pooling share a backend between clients, which breaks session advisory locks:
 * a worker must refuse them (`start()` rejects with ERR_PGLEADERLOCK_UNSAFE), no partition
 * may be owned by two workers meanwhile, and nothing may stay behind on a pooled backend.
 * Session pooling works: workers join, split the partitions and leave.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import type { PartitionedLeadership } from '../../src/index.js';
import { keysOf } from '../../src/partitions/sql.js';
import { adminQuery, eventually, ownServer, testTag, within } from '../harness/db.js';
import type { PgServer } from '../harness/pg-server.js';
import {
  type PgBouncer,
  type PgBouncerOptions,
  startPgBouncer,
  stopWhileProbeWaits,
} from '../harness/pgbouncer.js';
import { type TermRecorder, useTermRecorder } from '../harness/terms.js';
import { partitionWorker } from '../harness/workers.js';

const PARTITIONS = 16;

let server: PgServer;
beforeAll(async () => {
  server = await ownServer();
});
afterAll(async () => {
  await server?.dispose();
});

const uniqueName = (): string => `bouncer-parts-${Date.now()}-${Math.random().toString(36).slice(2, 8)}`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

type Make = (name: string) => PartitionedLeadership;

const recordTerms = useTermRecorder();

/**
 * Run `body` with a PgBouncer of its own and a worker factory pointed at it. Afterwards
 * every worker is shut down and no client of ours may be left on PgBouncer (the leak guard).
 */
async function withBouncer(
  options: Omit<PgBouncerOptions, 'server'>,
  body: (bouncer: PgBouncer, make: Make) => Promise<void>,
): Promise<void> {
  await using bouncer = await startPgBouncer({ server, ...options });
  onTestFinished(() => bouncer.dispose()); // also when the test times out and `await using` never runs
  const tag = testTag();
  const made: PartitionedLeadership[] = [];
  const make: Make = (name) => {
    const w = partitionWorker({
      name,
      partitions: PARTITIONS,
      id: `${tag}-${made.length}`,
      connectionString: bouncer.url,
      healthIntervalMs: 200,
      takeoverDelayMs: 0, // a term opens at once: a second owner would show within the sampling
    });
    w.onError(() => {}); // the refusals are asserted through start()
    made.push(w);
    return w;
  };
  const stuck: Error[] = [];
  try {
    await body(bouncer, make);
  } finally {
    await Promise.all(
      made.map((w) =>
        within(w.shutdown({ timeoutMs: 5000 }), 10_000, `shutdown of ${w.id}`).catch((err: Error) => {
          stuck.push(err);
        }),
      ),
    );
  }
  if (stuck.length) throw new Error(stuck.map((e) => e.message).join('; '));
  if (!bouncer.running) return;
  let left: unknown[] = [];
  await eventually(
    async () => {
      left = (await bouncer.show('CLIENTS')).filter((c) => c.database !== 'pgbouncer');
      return left.length === 0;
    },
    { timeoutMs: 3000, what: 'no clients left on PgBouncer' },
  ).catch((err: Error) => {
    throw new Error(`${err.message}; left: ${JSON.stringify(left)}`);
  });
}

/** Wait at least `minMs` and until `until` settles; then the partitions whose terms on two workers overlapped (none, if safe). */
async function ownedByBothMeanwhile(
  terms: TermRecorder,
  minMs: number,
  until: Promise<unknown> = Promise.resolve(),
): Promise<string[]> {
  await Promise.all([sleep(minMs), until.catch(() => {})]);
  return [...new Set(terms.overlaps().map((o) => o.a.key))].sort();
}

/** Every advisory lock row of `name`'s keys (members and partitions), held or awaited, read on the server itself. */
async function lockRows(
  name: string,
): Promise<{ pid: number; granted: boolean; key: string; objid: string }[]> {
  const k = keysOf(name);
  return adminQuery(
    server.url,
    `SELECT pid, granted, CASE classid WHEN $1::int4::oid THEN 'member' ELSE 'partition' END AS key, objid::text AS objid
       FROM pg_locks
      WHERE locktype = 'advisory' AND objsubid = 2
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND classid IN ($1::int4::oid, $2::int4::oid)`,
    [k.members, k.partitions],
  );
}

describe.each(['transaction', 'statement'] as const)('PgBouncer in %s mode', (poolMode) => {
  it.each([
    [1, 'staggered'],
    [1, 'simultaneously'],
    [20, 'staggered'],
    [20, 'simultaneously'],
  ] as const)(
    `pool size %i, two workers (${PARTITIONS} partitions, one name) started %s: each start() rejects with ERR_PGLEADERLOCK_UNSAFE naming the pooler; in 1.5 s while they try, no two partition terms overlap; after shutdown() no advisory lock of the name is held or awaited on any backend`,
    async (poolSize, start) => {
      expect.assertions(4);
      await withBouncer({ poolMode, defaultPoolSize: poolSize }, async (_bouncer, make) => {
        const terms = recordTerms();
        const name = uniqueName();
        const a = make(name);
        const b = make(name);
        const startA = a.start();
        startA.catch(() => {}); // asserted below; handled now so that the wait does not report it
        let startB: Promise<void> | null = null;
        const starting = (async () => {
          if (start === 'staggered') await sleep(300); // the stagger itself, not a wait for an event
          startB = b.start();
          startB.catch(() => {});
          await Promise.allSettled([startA, startB]);
        })();
        // every partition term recorded for 1.5 s, and on until both start() calls have settled (within 10 s)
        const ownedByBoth = await ownedByBothMeanwhile(
          terms,
          1500,
          within(starting, 10_000, 'the two start() calls to settle').catch(() => {}),
        );
        // soft: a failing run reports every part of the contract it breaks, not only the first
        expect.soft(ownedByBoth, 'partitions owned by both workers at once').toEqual([]);
        const refused = { code: 'ERR_PGLEADERLOCK_UNSAFE', message: expect.stringMatching(/pooler/) };
        await expect
          .soft(within(startA, 1000, "A's start() to settle"), "A's start()")
          .rejects.toMatchObject(refused);
        await expect
          .soft(
            within(startB ?? Promise.reject(new Error('B never started')), 1000, "B's start() to settle"),
            "B's start()",
          )
          .rejects.toMatchObject(refused);
        await within(Promise.all([a.shutdown(), b.shutdown()]), 10_000, 'both shutdown() calls');
        // straight to PostgreSQL, with PgBouncer (and its pooled backends) still up
        let rows: unknown[] = [];
        await eventually(
          async () => {
            rows = await lockRows(name);
            return rows.length === 0;
          },
          { timeoutMs: 2000, what: 'no pg_locks row for the name' },
        ).catch(() => {});
        expect.soft(rows, 'advisory locks of the name left on a pooled backend').toEqual([]);
      });
    },
  );
});

describe('PgBouncer in session mode', () => {
  it(`a worker's start() resolves and it owns all ${PARTITIONS} partitions, each held once on the server; a second worker joins and they split them 8/8, no two partition terms overlap; after shutdown() nothing of the name is held`, async () => {
    await withBouncer({ poolMode: 'session' }, async (_bouncer, make) => {
      const terms = recordTerms();
      const name = uniqueName();
      const a = make(name);
      await within(a.start(), 10_000, "A's start()");
      expect(await a.waitForBalance({ timeoutMs: 10_000 })).toBe(true);
      expect([...a.owned].sort((x, y) => x - y)).toEqual([...Array(PARTITIONS).keys()]);
      const held = (await lockRows(name)).filter((r) => r.key === 'partition');
      expect(held).toHaveLength(PARTITIONS);
      expect(held.every((r) => r.granted)).toBe(true);
      expect(new Set(held.map((r) => r.objid)).size).toBe(PARTITIONS);

      const b = make(name);
      const balanced = (async () => {
        await within(b.start(), 10_000, "B's start()");
        await eventually(() => a.owned.size === PARTITIONS / 2 && b.owned.size === PARTITIONS / 2, {
          timeoutMs: 10_000,
          what: 'an 8/8 split',
        });
      })();
      const both = await ownedByBothMeanwhile(terms, 500, balanced);
      await balanced; // rethrows if B did not start or the split did not come
      expect(both, 'partitions owned by both workers at once').toEqual([]);
      expect(terms.spans.length).toBeGreaterThanOrEqual(PARTITIONS + PARTITIONS / 2); // A's 16, then B's 8
      expect(new Set([...a.owned, ...b.owned]).size).toBe(PARTITIONS);

      await Promise.all([a.shutdown(), b.shutdown()]);
      let rows: unknown[] = [];
      await eventually(
        async () => {
          rows = await lockRows(name);
          return rows.length === 0;
        },
        { timeoutMs: 2000, what: 'no pg_locks row for the name' },
      ).catch(() => {});
      expect(rows, 'advisory locks of the name left after shutdown').toEqual([]);
    });
  });

  it('shutdown() while the probe waits for a backend (pool size 1, a reset query that takes 1 s): the probe connection is closed within 100 ms of the call, start() resolves, no error is reported', async () => {
    // as for the lock (pgbouncer.test.ts): a probe not abandoned would wait over 1 s
    const slowReset = { serverResetQuery: 'SELECT pg_sleep(1)' };
    await withBouncer({ poolMode: 'session', defaultPoolSize: 1, ...slowReset }, async (bouncer, make) => {
      const w = make(uniqueName());
      const errors: Error[] = [];
      w.onError((err) => {
        errors.push(err);
      });
      const starting = w.start();
      const closed = await stopWhileProbeWaits(bouncer, () => w.shutdown());
      await within(starting, 1000, 'start() to resolve');
      console.log(
        `[pgbouncer partitions] shutdown during the pooler probe: its connection closed ${closed.toFixed(1)} ms after the call`,
      );
      // bound: compat/pgbouncer-partitions-probe-closed
      expect(closed).toBeLessThan(100);
      expect(errors).toEqual([]);
      expect(w.owned.size).toBe(0);
    });
  });
});
