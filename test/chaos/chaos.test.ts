/** Short chaos run (in npm test). The long form: npm run chaos. */
import { expect, it } from 'vitest';
import { formatReport, runChaos } from './chaos.js';

it.each(['wait', 'poll'] as const)(
  'chaos (%s mode): 5 candidates, every fault kind (kill, stepDown, blackhole, freeze, terminate, restart) injected at least once in a seeded order, then seeded draws, work that takes 100 ms to stop, takeover delay 200 ms: never two leaders nor two runs at once, a leader after each',
  async (acquireMode) => {
    const seed = process.env.PGLEADERLOCK_CHAOS_SEED
      ? Number(process.env.PGLEADERLOCK_CHAOS_SEED)
      : undefined;
    const report = await runChaos({ candidates: 5, durationMs: 15_000, acquireMode, workStopMs: 100, seed });
    console.log(
      `[chaos ${acquireMode}] seed ${report.seed} (replay: PGLEADERLOCK_CHAOS_SEED=${report.seed}), ${report.faults.length} faults, ${report.intervals.length} intervals\n${formatReport(report)}`,
    );
    expect(report.takeoverDelayMs).toBe(200);
    // the takeover delay covers every kind: an overlap after any of them fails below
    expect(report.covered.size).toBe(6);
    for (const kind of ['kill', 'stepDown', 'blackhole', 'freeze', 'terminate', 'restart'] as const) {
      expect(report.faults.filter((f) => f.kind === kind).length, `${kind} injected`).toBeGreaterThanOrEqual(
        1,
      );
    }
    // every fault is covered (the lease, or the takeover delay): no overlap at all
    for (const o of report.overlaps) expect.soft(o, `overlap after ${o.fault}`).toBeUndefined();
    // runWhileLeader across processes: never two runs at once
    expect(report.runs.length).toBeGreaterThanOrEqual(report.faults.length / 2);
    for (const o of report.runOverlaps) expect.soft(o, `run overlap after ${o.fault}`).toBeUndefined();
    for (const f of report.faults) {
      expect.soft(f.gapMs, `no leader within the bound after ${f.kind}`).not.toBeNull();
      if (f.gapMs !== null)
        expect.soft(f.gapMs, `gap after ${f.kind}`).toBeLessThan(report.gapBoundMs[f.kind]);
    }
    expect(report.cleanExits).toBe(5);
  },
  120_000,
);
