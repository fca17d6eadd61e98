/**
 * How soon a candidate given every host leads on a promoted standby after the primary is
 * SIGKILLed (docs/safety.md, "Primary failover"): in the serial timing project, because the
 * figure is a wall-clock bound (in the integration project, beside two other files on two
 * cores, its p50 once reached 603 ms against 376 ms alone). The scenario's other checks run
 * in the integration project too (integration/failover.test.ts).
 */
import { describe, it } from 'vitest';
import { expectNearBaseline } from '../harness/baseline.js';
import { promotionRounds, spread, useCandidates } from '../harness/failover.js';

describe.each(['poll', 'wait'] as const)('primary failover (%s mode, default timings)', (mode) => {
  const c = useCandidates();

  it('SIGKILL the primary, promote the standby: one leader, on the promoted server, within 200 ms (p50 of 3 rounds) of its baseline: a bare 250 ms timer and two bare connections measured in the same round', async () => {
    const baseline: number[] = [];
    const samples = await promotionRounds(c, mode, 3, baseline);
    console.log(
      `[promotion ${mode}] SIGKILL + promote -> leader on the promoted server: ${spread(samples)}; the baseline (a bare 250 ms timer + two bare connections): ${spread(baseline)}`,
    );
    // what it holds: the 250 ms takeover delay (the crash is unclean), up to 100 ms to the
    // next survey, then a survey, a SCRAM connection and the session's preparation (16 ms per
    // connection on this VM): p50 376–399 ms alone, 392–481 ms in most parallel runs
    // (the fixed 600 ms bound before was at or below a recorded 603 ms): the survey's next
    // tick (up to 100 ms) and the session's preparation over the baseline; another delay, or
    // a back-off in place of the 100 ms survey, still fails
    expectNearBaseline(
      `${mode} mode: promotion → leader on the promoted server, against a bare 250 ms timer and two bare connections`,
      { subject: samples, baseline },
      { overMs: 200, compare: 'paired' },
    );
  }, 90_000); // a replicated cluster per mode: 30 s ran out at load 20
});
