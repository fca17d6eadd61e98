/**
 * The takeover-delay policy both elections use (core/peers.ts `termDelayMs`,
 * `splitBrainDelayMs`), as the table docs/safety.md gives: clean, unclean, split brain. The
 * elections' own behaviour under it is checked in the contract suite (both elections), the
 * simulation and against the replicated cluster (integration/partitions-failover,
 * compat/failover-claims).
 */
import { describe, expect, it } from 'vitest';
import { PEER_INTERVAL_MS, PEER_TIMEOUT_MS, splitBrainDelayMs, termDelayMs } from '../../src/core/peers.js';

describe('the takeover delay of a term (one rule, both elections)', () => {
  it.each([
    ['a clean handover', 250, true, 0, 0],
    ['an unclean one', 250, false, 0, 250],
    ['an unclean one with the delay off', 0, false, 0, 0],
  ] as const)('%s (takeoverDelayMs %i) with no other primary up waits %#', (_, delay, clean, split, want) => {
    expect(termDelayMs(delay, clean, split)).toBe(want);
  });

  it('with another primary up: the split-brain delay, clean or not, and also with takeoverDelayMs 0', () => {
    // LeaderLock: its one leader's peer watch runs every PEER_INTERVAL_MS (100 ms)
    expect(splitBrainDelayMs(250, PEER_INTERVAL_MS)).toBe(250 + 100 + PEER_TIMEOUT_MS);
    // a partition worker: every worker watches, every healthIntervalMs
    expect(splitBrainDelayMs(250, 1500)).toBe(250 + 1500 + 250);
    for (const clean of [true, false]) {
      expect(termDelayMs(250, clean, splitBrainDelayMs(250, 1500))).toBe(2000);
      expect(termDelayMs(0, clean, splitBrainDelayMs(0, PEER_INTERVAL_MS))).toBe(350);
    }
  });
});
