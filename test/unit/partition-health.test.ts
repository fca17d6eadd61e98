/**
 * assessPartitionHealth: each phase and each reason of a partition worker's health(), from
 * snapshots. The worker's own answers against PostgreSQL: test/integration/partitions-health.test.ts.
 */
import { describe, expect, it } from 'vitest';
import {
  assessPartitionHealth,
  type PartitionHealthSnapshot,
  quietBoundMs,
} from '../../src/partitions/health.js';

const running: PartitionHealthSnapshot = {
  started: true,
  phase: 'running',
  lastError: null,
  hung: [],
  loopBlockedMs: null,
  quietMs: 100,
  quietBoundMs: 60_000,
  owned: 4,
  members: 2,
};

describe('assessPartitionHealth', () => {
  it('running normally: live and ready, no reasons, with owned and members passed through', () => {
    expect(assessPartitionHealth(running)).toEqual({
      live: true,
      ready: true,
      reasons: [],
      owned: 4,
      members: 2,
    });
  });

  it('a member that owns no partition is ready', () => {
    expect(assessPartitionHealth({ ...running, owned: 0, members: 9 })).toMatchObject({ ready: true });
  });

  it.each([
    [{ started: false, phase: 'stopped' }, 'not started'],
    [{ started: true, phase: 'stopped' }, 'stopped'],
    [{ phase: 'stopping' }, 'shutting down'],
    [{ phase: 'connecting', lastError: null }, 'connecting: the member session is not open yet'],
    [
      { phase: 'connecting', lastError: new Error('connect ECONNREFUSED 127.0.0.1:1') },
      'the last attempt failed: connect ECONNREFUSED 127.0.0.1:1',
    ],
    [
      { phase: 'running', watchDown: new Error('connection terminated') },
      "the ring watch's session is down (deaths are seen late): connection terminated",
    ],
  ] as const)('%o: live, not ready, "%s"', (change, reason) => {
    expect(assessPartitionHealth({ ...running, quietMs: null, ...change })).toMatchObject({
      live: true,
      ready: false,
      reasons: [reason],
    });
  });

  it('an error of an earlier session is not reported while a session is open', () => {
    expect(assessPartitionHealth({ ...running, lastError: new Error('old') })).toMatchObject({
      ready: true,
      reasons: [],
    });
  });

  it('a blocked event loop: not live, and so not ready', () => {
    expect(assessPartitionHealth({ ...running, loopBlockedMs: 2500.4 })).toMatchObject({
      live: false,
      ready: false,
      reasons: ['the event loop was blocked for at least 2500 ms (in the last 10 s)'],
    });
  });

  it('hung callbacks: not live, one reason each, as given', () => {
    const hung = ['an onAssigned callback has not returned after 12000 ms', 'another'];
    expect(assessPartitionHealth({ ...running, hung })).toMatchObject({ live: false, reasons: hung });
    // after shutdown too: a callback started before is still hung
    expect(assessPartitionHealth({ ...running, phase: 'stopped', quietMs: null, hung }).live).toBe(false);
  });

  it('a loop quiet past its bound is not live while connecting or running; while stopping it is', () => {
    const quiet = { ...running, quietMs: 60_001 };
    expect(assessPartitionHealth(quiet)).toMatchObject({
      live: false,
      reasons: ["the worker's loop has made no progress for 60001 ms (its steps take at most 60000 ms)"],
    });
    expect(assessPartitionHealth({ ...quiet, phase: 'connecting' }).live).toBe(false);
    expect(assessPartitionHealth({ ...quiet, quietMs: 60_000 }).live).toBe(true);
    expect(assessPartitionHealth({ ...quiet, phase: 'stopping' }).live).toBe(true);
  });

  it('the quiet bound covers a back-off, three drains and twenty statements, plus a second', () => {
    expect(quietBoundMs({ healthIntervalMs: 1000, queryTimeoutMs: 100, drainTimeoutMs: 2000 })).toBe(
      5000 + 6000 + 2000 + 1000,
    );
    expect(quietBoundMs({ healthIntervalMs: 9000, queryTimeoutMs: 100, drainTimeoutMs: 0 })).toBe(
      9000 + 2000 + 1000,
    );
  });
});
