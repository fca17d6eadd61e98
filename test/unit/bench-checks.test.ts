import { describe, expect, it } from 'vitest';
import { BOUNDS, type LatencyFigures, latencyChecks } from '../../bench/checks.js';

/** Figures like docs/benchmarks.md's run of 2026-12-03 (ms, around its p50s). */
function healthy(): LatencyFigures {
  return {
    stepDown: { limit: [0.8, 0.83, 0.9], wait: [2.8, 2.92, 3.1] },
    shutdown: { limit: [0.6, 0.68, 0.8], wait: [2.4, 2.5, 2.7] },
    pollStepDown: [40, 77.2, 120],
    terminate: { limit: [2.4, 2.5, 2.6], off: [3.5, 3.68, 3.9] },
    kill: { wait: [272, 274.1, 280], off: [20, 21.2, 23] },
    takeoverDelayMs: 250,
  };
}

describe("the bench's headline checks (npm run bench -- --check)", () => {
  it('hold on the figures docs/benchmarks.md records', () => {
    expect(latencyChecks(healthy()).failed).toBe(0);
  });

  it('fail when wait mode is lost (a step-down as slow as polling)', () => {
    const f = healthy();
    f.stepDown.wait = [70, 77, 80];
    const r = latencyChecks(f);
    expect(r.failed).toBeGreaterThanOrEqual(1);
    expect(r.lines.join('\n')).toMatch(/wait mode at least 10× faster.*\*\*no\*\*/);
  });

  it(`fail when a handoff grows past ${BOUNDS.gracefulOverLimit}× the limit (a few round trips more)`, () => {
    const f = healthy();
    f.shutdown.wait = [9.0, 9.5, 10]; // 0.68 ms limit: 14×
    expect(latencyChecks(f).failed).toBe(1);
  });

  it('fail when a SIGKILL failover skips the takeover delay in any trial, or adds to it', () => {
    const skipped = healthy();
    skipped.kill.wait = [30, 274.1, 280];
    expect(latencyChecks(skipped).failed).toBe(1);
    const slow = healthy();
    slow.kill.wait = [500, 520, 530];
    expect(latencyChecks(slow).failed).toBe(1);
  });

  it('fail when a terminate failover with the delay off is far above the bare terminate', () => {
    const f = healthy();
    f.terminate.off = [10, 11, 12];
    expect(latencyChecks(f).failed).toBe(1);
  });
});
