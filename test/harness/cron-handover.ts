/**
 * The handover at a fire of docs/node-cron.md, shared by the integration test (what is
 * claimed, and how often the next leader asks) and the timing test (how soon after the
 * withdrawal it takes the fire): the old leader steps down right after its claim commits,
 * and its withdrawal reaches the database only `withdrawDelayMs` after the next leader's
 * first ask was answered (a loaded machine); the next leader (`leaderWaitMs`) asks again
 * until the withdrawal is in. Held until that first answer, not for a fixed time after the
 * step-down: the test reads the claims before the next leader asks, and under load (6) a
 * fixed 300 ms had passed by then, the withdrawal already in (nothing left to read).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { fireKey, leaderCoordinator, type Queryable } from '../../src/node-cron/index.js';
import { DEFAULT_CLAIMS_TABLE } from '../../src/node-cron/sql.js';
import { adminQuery, databaseUrl, eventually, randomKeys } from './db.js';
import type { LockFactory } from './locks.js';

/** One claim statement the next leader sent: when, and what it was answered. */
export interface Ask {
  sentAt: number;
  answeredAt: number;
  outcome: string | undefined;
}

export interface Handover {
  /** What each leader's `shouldRun` returned. */
  oldRun: boolean;
  nextRun: boolean;
  /** When the old leader's withdrawal was answered, and the next leader's `shouldRun`. */
  withdrawnAt: number;
  ranAt: number;
  /** When the next leader's `shouldRun` was called. */
  askedAt: number;
  asks: Ask[];
  /** The claims left for the fire's scope, by epoch, and the next leader's epoch. */
  epochsBefore: string[];
  epochsAfter: string[];
  oldEpoch: string;
  nextEpoch: string;
}

/** The claims of `scope` in the default claims table, oldest fire first. */
export function claimsOf(scope: string): Promise<{ fire_at: Date; epoch: string; finished: boolean }[]> {
  return adminQuery(
    databaseUrl(),
    `SELECT fire_at, epoch::text AS epoch, finished_at IS NOT NULL AS finished FROM ${DEFAULT_CLAIMS_TABLE}
      WHERE scope = $1 ORDER BY fire_at`,
    [scope],
  );
}

const epochsOf = async (scope: string): Promise<string[]> => (await claimsOf(scope)).map((c) => c.epoch);

/** The scenario, with a pool of its own for both coordinators' claims (tagged for the leak guard). */
export async function handoverAtClaim(locks: LockFactory, withdrawDelayMs = 300): Promise<Handover> {
  const pool = new pg.Pool({
    connectionString: databaseUrl(),
    max: 2,
    application_name: `pgleaderlock:${locks.tag}-claims`,
  });
  pool.on('error', () => {});
  try {
    return await scenario(locks, pool, withdrawDelayMs);
  } finally {
    await pool.end();
  }
}

async function scenario(locks: LockFactory, pool: pg.Pool, withdrawDelayMs: number): Promise<Handover> {
  const keys = randomKeys();
  const old = locks.make({ ...keys, fencing: true, autoReacquire: false });
  await old.start();
  await old.waitForLeadership();
  const oldEpoch = String(old.term?.epoch);
  const next = locks.make({ ...keys, fencing: true });
  await next.start();
  const scope = `${locks.tag}-scope`;
  let withdrawnAt = 0;
  let firstAnswer: () => void = () => {};
  const answered = new Promise<void>((resolve) => {
    firstAnswer = resolve;
  });
  const oldPool: Queryable = {
    async query(text, values) {
      if (text.includes('pgleaderlock:cron-withdraw')) {
        await answered;
        await sleep(withdrawDelayMs);
        const r = await pool.query(text, values);
        withdrawnAt = performance.now();
        return r as never;
      }
      const r = await pool.query(text, values);
      if (text.includes('/* pgleaderlock:cron-claim */') && r.rows[0]?.outcome === 'claimed')
        await old.stepDown();
      return r as never;
    },
  };
  const asks: Ask[] = [];
  const nextPool: Queryable = {
    async query(text, values) {
      const sentAt = performance.now();
      const r = await pool.query(text, values);
      if (text.includes('/* pgleaderlock:cron-claim */')) {
        asks.push({
          sentAt,
          answeredAt: performance.now(),
          outcome: r.rows[0]?.outcome as string | undefined,
        });
        firstAnswer();
      }
      return r as never;
    },
  };
  const oldC = leaderCoordinator(old, { pool: oldPool, name: scope });
  const nextC = leaderCoordinator(next, { pool: nextPool, name: scope, leaderWaitMs: 1000 });
  const key = fireKey('tick', new Date(Math.floor(Date.now() / 1000) * 1000 + 60_000));
  const oldRun = oldC.shouldRun(key, 30_000);
  await eventually(() => next.isLeader, { what: 'the follower to lead' });
  const epochsBefore = await epochsOf(scope);
  const askedAt = performance.now();
  const nextRun = await nextC.shouldRun(key, 30_000);
  const ranAt = performance.now();
  const oldResult = await oldRun; // after its withdrawal: withdrawnAt is set
  return {
    oldRun: oldResult,
    nextRun,
    withdrawnAt,
    ranAt,
    askedAt,
    asks,
    epochsBefore,
    epochsAfter: await epochsOf(scope),
    oldEpoch,
    nextEpoch: String(next.term?.epoch),
  };
}
