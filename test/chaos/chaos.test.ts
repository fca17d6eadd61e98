/** Short chaos runs (`npm run test:chaos`, which CI runs). The long form: npm run chaos. */
import { describe, expect, it } from 'vitest';
import {
  BASIC_KINDS,
  CHURN_KINDS,
  type ChaosReport,
  CLEAN,
  type FaultKind,
  type FaultRecord,
  formatReport,
  runChaos,
  unexpectedLeader,
} from './chaos.js';
import { planSequence, replayHint, sequenceSeeds } from './plan.js';

/** Seeded sequences per test (plan.ts; CHAOS_SEED=<seed> runs only that one). */
const BASIC_SEQUENCES = 12;
const CHURN_SEQUENCES = 9;
/** Each test's seeds start at base + its offset. */
const OFFSET = { basic: { wait: 0, poll: 1000 }, churn: { wait: 2000, poll: 3000 } } as const;

/** The checks every chaos run makes: each kind injected, no overlap, a leader after each fault within its bound, the leader kept after a fault on a follower, clean exits. */
function checkRun(report: ChaosReport, kinds: readonly FaultKind[]): void {
  for (const kind of kinds) {
    expect(report.covered.has(kind), `${kind} covered`).toBe(true);
    // every kind once (sequence i's first step is kinds[seed % kinds.length]), unless replaying a few seeds
    if (report.sequences.length >= kinds.length)
      expect(report.faults.filter((f) => f.kind === kind).length, `${kind} injected`).toBeGreaterThanOrEqual(
        1,
      );
  }
  // every fault is covered (the lease, the takeover delay, a clean release): no overlap at all
  for (const o of report.overlaps)
    expect
      .soft(o, `overlap after ${o.fault}, sequence ${o.seed === null ? '-' : replayHint(o.seed)}`)
      .toBeUndefined();
  // runWhileLeader across processes: never two runs at once
  expect(report.runs.length).toBeGreaterThanOrEqual(report.faults.filter((f) => f.onLeader).length / 2);
  for (const o of report.runOverlaps)
    expect
      .soft(o, `run overlap after ${o.fault}, sequence ${o.seed === null ? '-' : replayHint(o.seed)}`)
      .toBeUndefined();
  for (const f of report.faults) {
    const what = `${f.step}, sequence ${replayHint(f.seed)}`;
    expect.soft(f.gapMs, `no leader within the bound after ${what}`).not.toBeNull();
    if (f.gapMs !== null) expect.soft(f.gapMs, `gap after ${what}`).toBeLessThan(report.gapBoundMs[f.kind]);
    // a fault on a follower (or a joiner no higher) leaves the leader in place
    if (!f.expectsChange) expect.soft(unexpectedLeader(f), `the same leader after ${what}`).toBe(false);
  }
  expect(report.cleanExits).toBe(report.candidatesAtEnd);
}

/** The sequences' choice lists, for the log. */
const choices = (r: ChaosReport): string =>
  r.sequences.map((s) => `  ${s.seed}: ${s.steps.join('; ')}`).join('\n');

it('a sequence replays: the same seed gives the same choice list, another seed another', () => {
  const o = { kinds: BASIC_KINDS, candidates: 5, priorities: 4, serverReleaseMs: 1400 };
  const seeds = sequenceSeeds(0, 20, {});
  const twice = seeds.map((s) => [planSequence(s, o), planSequence(s, o)]);
  for (const [a, b] of twice) expect(b).toEqual(a);
  expect(new Set(twice.map(([a]) => JSON.stringify(a))).size).toBe(seeds.length);
  expect(sequenceSeeds(0, 3, { CHAOS_SEED: '77' })).toEqual([77]);
  expect(sequenceSeeds(5, 2, { CHAOS_BASE_SEED: '100' })).toEqual([105, 106]);
  expect(() => sequenceSeeds(0, 1, { CHAOS_SEED: 'x' })).toThrow(RangeError);
});

it.each(['wait', 'poll'] as const)(
  `chaos (%s mode): 5 candidates, ${BASIC_SEQUENCES} seeded sequences of 1 or 2 faults (kill, stepDown, blackhole, freeze by SIGSTOP or a busy loop, terminate, reset, restart; on the leader, or on a follower), every kind at least once, work that takes 100 ms to stop, takeover delay 200 ms: never two leaders nor two runs at once, a leader after each fault within its bound, the same leader after a fault on a follower`,
  async (acquireMode) => {
    const report = await runChaos({
      candidates: 5,
      seeds: sequenceSeeds(OFFSET.basic[acquireMode], BASIC_SEQUENCES),
      acquireMode,
      workStopMs: 100,
    });
    console.log(
      `[chaos ${acquireMode}] ${report.sequences.length} sequences, ${report.faults.length} faults (${report.faults.filter((f) => !f.onLeader).length} on a follower), ${report.intervals.length} intervals\n${formatReport(report)}\n${choices(report)}`,
    );
    expect(report.takeoverDelayMs).toBe(200);
    checkRun(report, BASIC_KINDS);
    expect(report.candidatesAtEnd).toBe(5);
  },
  120_000,
);

/**
 * Kinds after which nobody chose the next leader (no resign, no handover): the priority rule
 * alone decides, so a candidate of the top priority must lead again.
 */
const UNCHOSEN: ReadonlySet<FaultKind> = new Set(['join', 'leave', 'respawn', 'kill', 'terminate']);

describe.each(['wait', 'poll'] as const)('priority churn (%s mode)', (acquireMode) => {
  it(`5 candidates, ${CHURN_SEQUENCES} seeded sequences of 1 or 2 steps: candidates with seeded priorities 0–3 join, leave (SIGTERM) and come back with new priorities; the leader is asked to resign or hand over (NOTIFY) or calls handoverTo; kills and terminates; each kind at least once: never two leaders nor two runs at once, a leader after each fault within its bound, first the named successor or a higher joiner (no takeover delay), the leader kept when a follower leaves or a joiner no higher comes; after each join, leave, respawn, kill and terminate a top-priority candidate leads again within the bound`, async () => {
    const kinds: FaultKind[] = [...CHURN_KINDS, 'kill', 'terminate'];
    const report = await runChaos({
      candidates: 5,
      seeds: sequenceSeeds(OFFSET.churn[acquireMode], CHURN_SEQUENCES),
      acquireMode,
      workStopMs: 100,
      faults: kinds,
      priorities: 4,
    });
    // the rule must restore the top priority after a fault nobody chose a leader in, unless
    // the leader was below it already (after a resign or a handover) and nothing moved
    const ruleApplies = (f: FaultRecord): boolean =>
      UNCHOSEN.has(f.kind) && (f.topBefore || (f.expectsChange && f.next !== null));
    const ruleBroken = (f: FaultRecord): boolean => ruleApplies(f) && f.settledMs === null;
    const bad = (f: FaultRecord): boolean =>
      f.gapMs === null ||
      f.gapMs >= report.gapBoundMs[f.kind] ||
      unexpectedLeader(f) ||
      (CLEAN.has(f.kind) && f.expectsChange && f.ready && f.fenced) ||
      /rejected|exited|no candidate waiting/.test(f.note) ||
      ruleBroken(f);
    const failed = report.overlaps.length + report.runOverlaps.length > 0 || report.faults.some(bad);
    console.log(
      `[priority churn ${acquireMode}] ${report.sequences.length} sequences, ${report.faults.length} faults, ${report.intervals.length} intervals, ${report.candidatesStarted} candidates started, ${report.leaves.total} left by SIGTERM (${report.leaves.clean} exited 0), ${report.faults.filter((f) => !f.ready).length} faults with a candidate not yet waiting\n${formatReport(report)}${
        failed ? `\ntrace:\n${report.trace.join('\n')}` : ''
      }\n${choices(report)}`,
    );
    expect(report.takeoverDelayMs).toBe(200);
    checkRun(report, kinds);
    for (const f of report.faults) {
      const what = `${f.kind}${f.target === null ? '' : ` ${f.target}`} (leader ${f.leader}, first after it ${f.next ?? 'none'}; sequence ${replayHint(f.seed)})`;
      // the named successor, or a joiner above the leader, leads first; a follower leaving or
      // a joiner no higher than the leader leaves the leader in place
      expect
        .soft(unexpectedLeader(f), `first leader after ${what}, expected ${f.expected ?? 'the same'}`)
        .toBe(false);
      // a clean handover: the successor's term opens with no takeover delay (when every
      // candidate had its session before the release, and so heard it)
      if (CLEAN.has(f.kind) && f.expectsChange && f.ready)
        expect.soft(f.fenced, `takeover delay after ${what}`).toBe(false);
      // handoverTo resolved, every SIGTERMed candidate exited 0, a waiting candidate to name
      expect.soft(f.note, what).not.toMatch(/rejected|exited|no candidate waiting/);
      // within the gap bound plus one more clean handover (null: not within it)
      if (ruleApplies(f))
        expect.soft(f.settledMs, `a top-priority candidate leading after ${what}`).not.toBeNull();
    }
    expect(report.leaves.clean).toBe(report.leaves.total);
  }, 120_000);
});
