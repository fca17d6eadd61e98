/**
 * How soon a candidate given every host leads on a promoted standby after the primary is
 * SIGKILLed (docs/safety.md, "Primary failover"): in the serial timing project, because the
 * figure is a wall-clock bound (in the integration project, beside two other files on two
 * cores, its p50 once reached 603 ms against 376 ms alone). The scenario's other checks run
 * in the integration project too (integration/failover.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { promotionRounds, spread, useCandidates } from '../harness/failover.js';

describe.each(['poll', 'wait'] as const)('primary failover (%s mode, default timings)', (mode) => {
  const c = useCandidates();

  it('SIGKILL the primary, promote the standby: one leader, on the promoted server, within 600 ms of it leaving recovery (p50 of 3)', async () => {
    const samples = await promotionRounds(c, mode, 3);
    console.log(`[promotion ${mode}] SIGKILL + promote -> leader on the promoted server: ${spread(samples)}`);
    // what it holds: the 250 ms takeover delay (the crash is unclean), up to 100 ms to the
    // next survey, then a survey, a SCRAM connection and the session's preparation (16 ms per
    // connection on this VM): p50 376–399 ms alone, 392–481 ms in most parallel runs
    expect([...samples].sort((a, b) => a - b)[1]).toBeLessThanOrEqual(600);
  });
});
