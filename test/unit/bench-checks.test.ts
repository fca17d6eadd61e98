import { describe, expect, it } from 'vitest';
import { BOUNDS, type LatencyFigures, latencyChecks } from '../../bench/checks.js';

/** Figures like docs/benchmarks.md's run (ms). */
function healthy(): LatencyFigures {
  return {
    stepDown: { limit: [0.3, 0.34, 0.4], wait: [1.8, 1.9, 2.1] },
    shutdown: { limit: [0.2, 0.22, 0.3], wait: [1.4, 1.45, 1.6] },
    pollStepDown: [20, 55, 90],
    terminate: { limit: [1.3, 1.4, 1.5], off: [1.5, 1.6, 1.7] },
    kill: { wait: [258, 261, 266], off: [8, 8.4, 9] },
    takeoverDelayMs: 250,
  };
}

describe("the bench's headline checks (npm run bench -- --check)", () => {
  it('hold on the figures docs/benchmarks.md records', () => {
    expect(latencyChecks(healthy()).failed).toBe(0);
  });

  it('fail when wait mode is lost (a step-down as slow as polling)', () => {
    const f = healthy();
    f.stepDown.wait = [50, 55, 60];
    const r = latencyChecks(f);
    expect(r.failed).toBeGreaterThanOrEqual(1);
    expect(r.lines.join('\n')).toMatch(/wait mode at least 10× faster.*\*\*no\*\*/);
  });

  it(`fail when a handoff grows past ${BOUNDS.gracefulOverLimit}× the limit (a few round trips more)`, () => {
    const f = healthy();
    f.shutdown.wait = [3.0, 3.2, 3.5]; // 0.22 ms limit: 14.5×
    expect(latencyChecks(f).failed).toBe(1);
  });

  it('fail when a SIGKILL failover skips the takeover delay in any trial, or adds to it', () => {
    const skipped = healthy();
    skipped.kill.wait = [12, 261, 266];
    expect(latencyChecks(skipped).failed).toBe(1);
    const slow = healthy();
    slow.kill.wait = [500, 520, 530];
    expect(latencyChecks(slow).failed).toBe(1);
  });

  it('fail when a terminate failover with the delay off is far above the bare terminate', () => {
    const f = healthy();
    f.terminate.off = [7, 8, 9];
    expect(latencyChecks(f).failed).toBe(1);
  });
});
