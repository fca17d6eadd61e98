/**
 * The defaults README.md states (options table, "The lock frees itself"): checked on the
 * resolved options, so a changed default fails here before it contradicts the docs.
 */
import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/leader/options.js';

describe('documented defaults', () => {
  it('healthIntervalMs 5000, queryTimeoutMs 5000, waitSliceMs 30000, callbackTimeoutMs 10000, closeTimeoutMs 1000, takeoverDelayMs 250; serverReleaseMs = 2 × (5000 + 5000) = 20000 (a frozen leader is taken over within about 20 s)', () => {
    const o = resolveOptions({ key1: 1, key2: 2, connectionString: 'postgres://u@h/db' });
    expect({
      healthIntervalMs: o.healthIntervalMs,
      queryTimeoutMs: o.queryTimeoutMs,
      waitSliceMs: o.waitSliceMs,
      callbackTimeoutMs: o.callbackTimeoutMs,
      closeTimeoutMs: o.closeTimeoutMs,
      takeoverDelayMs: o.takeoverDelayMs,
      serverReleaseMs: o.serverReleaseMs,
    }).toEqual({
      healthIntervalMs: 5000,
      queryTimeoutMs: 5000,
      waitSliceMs: 30_000,
      callbackTimeoutMs: 10_000,
      closeTimeoutMs: 1000,
      takeoverDelayMs: 250,
      serverReleaseMs: 20_000,
    });
  });
});
