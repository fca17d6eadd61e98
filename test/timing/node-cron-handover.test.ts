/**
 * How soon a new leader takes a fire whose claim the old term withdrew late (docs/node-cron.md,
 * `leaderWaitMs`): it asks again every 20 ms, so it takes the fire within 100 ms of the
 * withdrawal. A wall-clock bound, hence here (one file at a time): under the integration
 * project's parallel files a busy event loop once took 103 ms. What is claimed, and how
 * often it asks: test/integration/node-cron.test.ts.
 */
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { handoverAtClaim } from '../harness/cron-handover.js';
import { databaseUrl } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();
const pools: pg.Pool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((p) => p.end()));
});

describe('pgleaderlock/node-cron, a handover at a fire', () => {
  it('a next leader with leaderWaitMs takes the fire within 100 ms of the old claim’s withdrawal', async () => {
    const pool = new pg.Pool({
      connectionString: databaseUrl(),
      max: 2,
      application_name: `pgleaderlock:${locks.tag}-claims`,
    });
    pool.on('error', () => {});
    pools.push(pool);
    const h = await handoverAtClaim(locks, pool, 'pgleaderlock_cron_claims');
    expect(h.nextRun).toBe(true);
    expect(h.withdrawnAt).toBeGreaterThan(h.askedAt);
    console.log(`claim taken ${Math.round(h.ranAt - h.withdrawnAt)} ms after the old claim was withdrawn`);
    expect(h.ranAt - h.withdrawnAt).toBeLessThan(100);
    // asked again every 20 ms: the median pause between an answer and the next ask
    const pauses = h.asks.slice(1).map((a, i) => a.sentAt - (h.asks[i] as { answeredAt: number }).answeredAt);
    const median = [...pauses].sort((a, b) => a - b)[Math.floor(pauses.length / 2)] as number;
    console.log(`${h.asks.length} asks, median pause ${median.toFixed(1)} ms`);
    expect(pauses.length).toBeGreaterThan(2);
    expect(median).toBeLessThan(30);
  });
});
