/**
 * How soon a new leader takes a fire whose claim the old term withdrew late (docs/node-cron.md,
 * `leaderWaitMs`): it asks again every 20 ms, so it takes the fire within 100 ms of the
 * withdrawal. A wall-clock bound, hence here (one file at a time): under the integration
 * project's parallel files a busy event loop once took 103 ms. What is claimed, and how
 * often it asks: test/integration/node-cron.test.ts.
 */
import { describe, expect, it } from 'vitest';
import { handoverAtClaim } from '../harness/cron-handover.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();

describe('pgleaderlock/node-cron, a handover at a fire', () => {
  it('a next leader with leaderWaitMs asks again every 20 ms (median pause < 30 ms) and takes the fire within 100 ms of the old claim’s withdrawal', async () => {
    const h = await handoverAtClaim(locks);
    expect(h.nextRun).toBe(true);
    expect(h.withdrawnAt).toBeGreaterThan(h.askedAt);
    console.log(`claim taken ${Math.round(h.ranAt - h.withdrawnAt)} ms after the old claim was withdrawn`);
    // bound: timing/node-cron-after-withdrawal
    expect(h.ranAt - h.withdrawnAt).toBeLessThan(100);
    // asked again every 20 ms: the median pause between an answer and the next ask
    const pauses = h.asks.slice(1).map((a, i) => a.sentAt - (h.asks[i] as { answeredAt: number }).answeredAt);
    const median = [...pauses].sort((a, b) => a - b)[Math.floor(pauses.length / 2)] as number;
    console.log(`${h.asks.length} asks, median pause ${median.toFixed(1)} ms`);
    expect(pauses.length).toBeGreaterThan(2);
    // bound: timing/node-cron-ask-pause
    expect(median).toBeLessThan(30);
  });
});
