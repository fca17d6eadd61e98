/** Short chaos run (in npm test). The long form: npm run chaos. */
import { expect, it } from 'vitest';
import { COVERED, formatReport, runChaos } from './chaos.js';

it.each(['wait', 'poll'] as const)(
  'chaos (%s mode): 5 candidates, random faults, never two leaders for covered faults, a leader after each',
  async (acquireMode) => {
    const report = await runChaos({ candidates: 5, durationMs: 20_000, acquireMode });
    console.log(
      `[chaos ${acquireMode}] ${report.faults.length} faults, ${report.intervals.length} intervals\n${formatReport(report)}`,
    );
    expect(report.faults.length).toBeGreaterThanOrEqual(6);
    for (const o of report.overlaps) {
      // faults the bound covers: no overlap at all; others: no longer than a detection (50 ms)
      if (COVERED.has(o.fault as never)) expect.soft(o, `overlap after ${o.fault}`).toBeUndefined();
      else expect.soft(o.ms, `overlap after ${o.fault}`).toBeLessThan(50);
    }
    // runWhileLeader across processes: never two runs at once for the faults the bound covers
    expect(report.runs.length).toBeGreaterThanOrEqual(report.faults.length / 2);
    for (const o of report.runOverlaps) {
      if (COVERED.has(o.fault as never)) expect.soft(o, `run overlap after ${o.fault}`).toBeUndefined();
    }
    for (const f of report.faults) {
      expect.soft(f.gapMs, `no leader within the bound after ${f.kind}`).not.toBeNull();
      if (f.gapMs !== null)
        expect.soft(f.gapMs, `gap after ${f.kind}`).toBeLessThan(report.gapBoundMs[f.kind]);
    }
    expect(report.cleanExits).toBe(5);
  },
  120_000,
);
