/**
 * The defaults README.md states (options table, "The lock frees itself") and docs/partitions.md
 * states for `PartitionedLeadership`: checked on the resolved options, so a changed default
 * fails here before it contradicts the docs.
 */
import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { resolveOptions } from '../../src/core/lock-options.js';
import { resolvePartitionOptions } from '../../src/partitions/options.js';

describe('documented defaults', () => {
  it('healthIntervalMs 1500, queryTimeoutMs 2000, waitSliceMs 30000, callbackTimeoutMs 10000, closeTimeoutMs 1000, takeoverDelayMs 250; serverReleaseMs = 2 × (1500 + 2000) = 7000 (a frozen leader is taken over within 10 s)', () => {
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
      healthIntervalMs: 1500,
      queryTimeoutMs: 2000,
      waitSliceMs: 30_000,
      callbackTimeoutMs: 10_000,
      closeTimeoutMs: 1000,
      takeoverDelayMs: 250,
      serverReleaseMs: 7000,
    });
  });
});

describe('documented defaults of PartitionedLeadership (docs/partitions.md)', () => {
  const resolved = () =>
    resolvePartitionOptions({ name: 'n', partitions: 8, connectionString: 'postgres://u@h/db' });

  it('callbackTimeoutMs 10000, takeoverDelayMs 250, watchSliceMs 10000; drainTimeoutMs 10000; fencing off', () => {
    const o = resolved();
    expect({
      callbackTimeoutMs: o.callbackTimeoutMs,
      takeoverDelayMs: o.takeoverDelayMs,
      watchSliceMs: o.watchSliceMs,
      drainTimeoutMs: o.drainTimeoutMs,
      fencingTable: o.fencingTable,
      unref: o.unref,
    }).toEqual({
      callbackTimeoutMs: 10_000,
      takeoverDelayMs: 250,
      watchSliceMs: 10_000,
      drainTimeoutMs: 10_000,
      fencingTable: null,
      unref: false,
    });
  });

  it("the options shared with LeaderLock have LeaderLock's defaults (health 1500, query 2000, server release 7000, close 1000)", () => {
    const p = resolved();
    const l = resolveOptions({ key1: 1, key2: 2, connectionString: 'postgres://u@h/db' });
    const shared = (o: typeof p | typeof l) => ({
      healthIntervalMs: o.healthIntervalMs,
      queryTimeoutMs: o.queryTimeoutMs,
      serverReleaseMs: o.serverReleaseMs,
      closeTimeoutMs: o.closeTimeoutMs,
      callbackTimeoutMs: o.callbackTimeoutMs,
      takeoverDelayMs: o.takeoverDelayMs,
      unref: o.unref,
    });
    expect(shared(p)).toEqual(shared(l));
    expect(shared(p)).toMatchObject({
      healthIntervalMs: 1500,
      queryTimeoutMs: 2000,
      serverReleaseMs: 7000,
      closeTimeoutMs: 1000,
    });
  });

  it('fencing: true uses the epoch table LeaderLock uses, pgleaderlock_epochs', () => {
    const o = resolvePartitionOptions({
      name: 'n',
      partitions: 8,
      connectionString: 'postgres://u@h/db',
      fencing: true,
    });
    expect(o.fencingTable).toBe('"pgleaderlock_epochs"');
    expect(
      resolveOptions({ key1: 1, key2: 2, connectionString: 'postgres://u@h/db', fencing: true }).fencingTable,
    ).toBe(o.fencingTable);
  });

  it('the default id: host (at most 20 characters), pid and a random suffix; a valid id, different per worker', () => {
    const a = resolved().id;
    const b = resolved().id;
    const host =
      os
        .hostname()
        .replace(/[^A-Za-z0-9.-]/g, '')
        .slice(0, 20) || 'host';
    expect(a.startsWith(`${host}-${process.pid}-`)).toBe(true);
    expect(a).toMatch(/^[A-Za-z0-9.-]{1,20}-\d+-[a-z0-9]{1,6}$/);
    expect(a.length).toBeLessThanOrEqual(40);
    expect(b).not.toBe(a);
  });
});
