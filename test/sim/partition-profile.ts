/**
 * A partition scenario's profile and plan, drawn from its seed (1–4 workers, the partition
 * count, timings, network, which faults; workers joining late, leaving and joining again,
 * crashing and restarting, freezing; a member session terminated, reset or blackholed; a
 * server restart), and the quiet phase's bounds.
 */
import { type EarlyTimers, earlyTimersFor } from './early.js';
import { type FailoverProfile, partitionFailoverBoundMs } from './failover.js';
import type { NetProfile } from './net.js';
import { type PoolerProfile, poolerFor } from './pooler.js';
import { Random } from './random.js';
import { drawTimings } from './timings.js';

export interface PartitionProfile {
  kind: 'partitions';
  workers: number;
  partitions: number;
  healthIntervalMs: number;
  queryTimeoutMs: number;
  closeTimeoutMs: number;
  takeoverDelayMs: number;
  watchSliceMs: number;
  drainTimeoutMs: number;
  net: NetProfile;
  drainMaxMs: number;
  chaosMs: number;
  pooler?: PoolerProfile | null; // null: workers connect directly
  /** A standby and a promotion (failover.ts; only where drawn, so other seeds' profiles read as before). */
  failover?: FailoverProfile;
  /** Timers that fire early (early.ts; only where drawn). */
  earlyTimers?: EarlyTimers;
}

export type PartitionStep =
  | {
      at: number;
      op: 'start' | 'shutdown' | 'crash' | 'freeze' | 'blackhole' | 'reset' | 'terminate';
      who: number;
      ms?: number;
    }
  | { at: number; op: 'restart'; ms: number };

/** One scenario in five is a partition scenario (the seed decides, so a replay knows). */
export function isPartitionSeed(seed: number): boolean {
  return seed % 5 === 0;
}

export function drawPartitionProfile(rng: Random): PartitionProfile {
  const workers = rng.int(1, 4);
  const partitions = rng.pick([1, 2, 3, 5, 8, 16]);
  const { healthIntervalMs, queryTimeoutMs, net, drainMaxMs } = drawTimings(rng);
  const maxDelay = net.baseMs + net.spikeMs;
  return {
    kind: 'partitions',
    workers,
    partitions,
    healthIntervalMs,
    queryTimeoutMs,
    closeTimeoutMs: rng.pick([100, 300]),
    // docs/safety.md: how long the work takes to stop after its abort, plus detection
    takeoverDelayMs: Math.ceil(drainMaxMs + 2 * maxDelay + 20) + rng.pick([0, 0, 200]),
    watchSliceMs: rng.pick([300, 1000, 3000]),
    drainTimeoutMs: rng.pick([500, 2000]),
    net,
    drainMaxMs,
    chaosMs: rng.int(500, 4000),
  };
}

export function drawPartitionPlan(rng: Random, p: PartitionProfile): PartitionStep[] {
  const n = p.workers;
  const steps: PartitionStep[] = [];
  // most join at once, some later (a join moves partitions)
  for (let i = 0; i < n; i++)
    steps.push({
      at: rng.chance(0.7) ? rng.between(0, 300) : rng.between(300, p.chaosMs),
      op: 'start',
      who: i,
    });
  const release = 2 * (p.healthIntervalMs + p.queryTimeoutMs);
  const faults = rng.pick([0, 1, 3, 6]);
  const all = ['terminate', 'restart', 'freeze', 'blackhole', 'reset', 'crash'] as const;
  const kinds = all.filter(() => rng.chance(0.6));
  for (let k = 0; k < faults && kinds.length > 0; k++) {
    const at = rng.between(200, p.chaosMs);
    const who = rng.int(0, n - 1);
    const kind = rng.pick(kinds);
    if (kind === 'restart') steps.push({ at, op: 'restart', ms: rng.pick([20, 300, 1500]) });
    else if (kind === 'freeze')
      steps.push({ at, op: kind, who, ms: rng.pick([50, release / 2, release * 1.5]) });
    else steps.push({ at, op: kind, who });
    if (kind === 'crash' && rng.chance(0.6)) steps.push({ at: at + rng.between(50, 2000), op: 'start', who });
  }
  const leaves = rng.pick([0, 1, 2]);
  for (let k = 0; k < leaves; k++) {
    const at = rng.between(300, p.chaosMs);
    const who = rng.int(0, n - 1);
    steps.push({ at, op: 'shutdown', who, ms: rng.pick([0, 0, 50]) });
    if (rng.chance(0.7)) steps.push({ at: at + rng.between(10, 1500), op: 'start', who });
  }
  return steps.sort((a, b) => a.at - b.at);
}

/** Workers' pooler (room for each worker's member and watch sessions); a start() refused is no member. */
export function partitionPooler(seed: number, workers: number): PoolerProfile | null {
  return poolerFor(seed, 2 * workers);
}

export function describePartitionProfile(seed: number, earlyTimers?: boolean): string {
  const p = drawPartitionProfile(new Random(seed).fork());
  const pool = partitionPooler(seed, p.workers);
  const early = earlyTimersFor(seed, earlyTimers);
  const via = pool
    ? `through a ${pool.mode}-mode pooler (${pool.choice}, pool ${pool.size}, ${pool.warm} warm); `
    : '';
  return `${via}partitions: ${p.workers} worker(s), ${p.partitions} partition(s), health ${p.healthIntervalMs} ms, query ${p.queryTimeoutMs} ms, takeover delay ${p.takeoverDelayMs} ms, watch slice ${p.watchSliceMs} ms${early ? `; ${early.share * 100} % of timers up to ${early.maxMs} ms early` : ''}`;
}

export interface PartitionOutcome {
  seed: number;
  violations: string[];
  steps: number;
  simMs: number;
  trace: string[] | null;
  plan: PartitionStep[];
  profile: PartitionProfile;
}

/** The quiet phase's bounds: every partition owned and balanced within `bound` of the last fault, then for `hold`. */
export function partitionLivenessBounds(p: PartitionProfile): { bound: number; hold: number } {
  const maxDelay = p.net.baseMs + p.net.spikeMs;
  const release = 2 * (p.healthIntervalMs + p.queryTimeoutMs);
  // a lost session's locks end within `release`; the reconnect backs off to at most 5 s;
  // a join or leave moves partitions within a few checks (each run drained first)
  const bound =
    release +
    p.takeoverDelayMs +
    p.queryTimeoutMs +
    p.closeTimeoutMs +
    5000 +
    3 * p.healthIntervalMs +
    p.drainMaxMs +
    60 * maxDelay +
    100 +
    (p.failover ? partitionFailoverBoundMs(p.takeoverDelayMs, p.healthIntervalMs, maxDelay) : 0);
  const hold = Math.max(3 * p.healthIntervalMs, 500);
  return { bound, hold };
}
