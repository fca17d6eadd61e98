/**
 * A LeaderLock scenario's profile and plan, drawn from its seed (swarm testing: how many
 * candidates, which mode, timings, ids, priorities, which faults and how often, how slow
 * the network, whether a pooler is in the path and of which kind).
 */
import { DecorrelatedJitter, ExponentialBackoff, type RetryStrategy } from '../../src/core/retry.js';
import { type EarlyTimers, earlyTimersFor } from './early.js';
import { failoverBoundMs } from './failover.js';
import type { NetProfile } from './net.js';
import {
  describePartitionProfile,
  isPartitionSeed,
  type PartitionProfile,
  type PartitionStep,
} from './partition-profile.js';
import { type PoolerProfile, poolerFor } from './pooler.js';
import { Random } from './random.js';
import { drawTimings } from './timings.js';

export const KEY = { key1: 7, key2: -9 };
export const KEY_ID = `${KEY.key1}:${KEY.key2}`;

export interface Profile {
  mode: 'wait' | 'poll';
  candidates: { id: string; priority: number }[];
  healthIntervalMs: number;
  queryTimeoutMs: number;
  waitSliceMs: number;
  closeTimeoutMs: number;
  takeoverDelayMs: number;
  retry: { kind: 'exponential' | 'jitter'; baseMs: number; maxMs: number };
  net: NetProfile;
  drainMaxMs: number;
  chaosMs: number;
  /** The pooler in the path (null: candidates connect directly). */
  pooler: PoolerProfile | null;
  /** Timers that fire early (early.ts; only where drawn, so other seeds' profiles read as before). */
  earlyTimers?: EarlyTimers;
}

export type Step =
  | {
      at: number;
      op:
        | 'start'
        | 'stepDown'
        | 'shutdown'
        | 'crash'
        | 'freeze'
        | 'freezeOnGrant'
        | 'blackhole'
        | 'reset'
        | 'terminate'
        /** Directed scenarios only: every connection of the process blackholed, new ones hang. */
        | 'partition'
        /** Directed scenarios only: pg_advisory_unlock_all on its lock backend, unseen by the lock. */
        | 'unlockAll';
      who: number;
      ms?: number;
      /** freezeOnGrant: its lock connection is blackholed as it thaws. */
      thenBlackhole?: boolean;
    }
  | { at: number; op: 'handoverTo'; who: number; to: number }
  | { at: number; op: 'restart'; ms: number };

/** A `LeaderWatch` observer's timings (watches.ts), and in directed scenarios its faults. */
export interface WatchProfile {
  at: number;
  healthIntervalMs: number;
  queryTimeoutMs: number;
  retryMaxMs: number;
  /** Directed scenarios: blackhole its live connections at this time (claims tests). */
  blackholeAt?: number;
  /** Directed scenarios: close() it at this time; `w<i> closed` is logged as that resolves. */
  closeAt?: number;
}

/** The seed of scenario `index` of a run with base seed `base` (each scenario replays alone from it). */
export function scenarioSeed(base: number, index: number): number {
  return new Random((base ^ Math.imul(index + 1, 0x9e3779b9)) >>> 0).int(0, 2 ** 32 - 1);
}

/** A scenario's profile in one line (its candidates: id, its bytes in application_name, priority). */
export function describeProfile(seed: number, o: Options = {}): string {
  if (isPartitionSeed(seed) && !o.lockOnly) return describePartitionProfile(seed, o.earlyTimers);
  const p = drawProfile(new Random(seed).fork(), o);
  const ids = p.candidates.map((c) => {
    const bytes = Buffer.byteLength(`pgleaderlock:${c.id}`);
    const verbatim = bytes <= 63 && /^[ -~]*$/.test(c.id);
    return `${JSON.stringify(c.id)} p=${c.priority}${verbatim ? '' : ` (application_name cannot carry it: ${bytes} bytes)`}`;
  });
  const pool = poolerFor(seed, p.candidates.length);
  const via = pool
    ? `through a ${pool.mode}-mode pooler (${pool.choice}, pool ${pool.size}, ${pool.warm} warm); `
    : '';
  const early = earlyTimersFor(seed, o.earlyTimers);
  const soon = early ? `; ${early.share * 100} % of timers up to ${early.maxMs} ms early` : '';
  return `${via}${p.mode} mode, health ${p.healthIntervalMs} ms, query ${p.queryTimeoutMs} ms, slice ${p.waitSliceMs} ms, takeover delay ${p.takeoverDelayMs} ms; ${ids.join(', ')}${soon}`;
}

export interface Outcome {
  seed: number;
  violations: string[];
  steps: number;
  simMs: number;
  trace: string[] | null;
  plan: Step[] | PartitionStep[];
  profile: Profile | PartitionProfile;
}

/** Ids as deployments make them: short, longer than application_name's 63 bytes, non-ASCII. */
function idFor(rng: Random, i: number, kind: 'short' | 'long' | 'nonascii'): string {
  if (kind === 'short') return `c${i}`;
  if (kind === 'long')
    return `billing-scheduler-deployment-7f9c8d6b5-x2k9p-candidate-${i}`.padEnd(rng.int(57, 70), 'z');
  return rng.pick([`höher-priorität-${i}`, `кандидат-${i}`, `候補-${i}`]);
}

/** What a run may draw: `verbatimIds` keeps to ids that application_name carries as they are (issue 35 open). */
export interface Options {
  verbatimIds?: boolean;
  /** Only LeaderLock scenarios (no partition scenario for the seeds that would draw one). */
  lockOnly?: boolean;
  /** False: every timer fires on time (default: early.ts draws it, unless SIM_EARLY_TIMERS=off). */
  earlyTimers?: boolean;
  /**
   * A directed scenario (claims.test.ts): these profile fields and this plan replace what the
   * seed draws (the draws still happen, so the seed's other choices are as without it).
   */
  fixed?: {
    profile?: Partial<Profile>;
    plan?: Step[];
    /** Log each candidate's `health().ready` as it changes, sampled every this many ms. */
    sampleReadyMs?: number;
    /** `LeaderWatch` observers (watches.ts), instead of none. */
    watches?: WatchProfile[];
  };
}

export function drawProfile(rng: Random, o: Options = {}): Profile {
  const n = rng.int(1, 4);
  const drawn = rng.pick([
    ['short'],
    ['short'],
    ['short', 'long'],
    ['short', 'nonascii'],
    ['long', 'nonascii', 'short'],
  ] as const);
  const idKinds = o.verbatimIds ? (['short'] as const) : drawn;
  const priorities = rng.chance(0.5);
  const candidates = Array.from({ length: n }, (_, i) => ({
    id: idFor(rng, i, rng.pick(idKinds)),
    priority: priorities ? rng.int(0, 3) : 0,
  }));
  const { healthIntervalMs, queryTimeoutMs, net, drainMaxMs } = drawTimings(rng);
  const maxDelay = net.baseMs + net.spikeMs;
  // docs/safety.md: set it to how long the work takes to stop after its abort, plus detection
  const takeoverDelayMs = Math.ceil(drainMaxMs + 2 * maxDelay + 20) + rng.pick([0, 0, 200]);
  return {
    mode: rng.pick(['wait', 'poll'] as const),
    candidates,
    healthIntervalMs,
    queryTimeoutMs,
    waitSliceMs: rng.pick([300, 1000, 3000]),
    closeTimeoutMs: rng.pick([100, 300]),
    takeoverDelayMs,
    retry: {
      kind: rng.pick(['exponential', 'jitter'] as const),
      baseMs: rng.pick([20, 100, 300]),
      maxMs: rng.pick([500, 1500]),
    },
    net,
    drainMaxMs,
    chaosMs: rng.int(500, 4000),
    pooler: null,
  };
}

export function drawPlan(rng: Random, p: Profile): Step[] {
  const n = p.candidates.length;
  const steps: Step[] = [];
  for (let i = 0; i < n; i++) steps.push({ at: rng.between(0, 300), op: 'start', who: i });
  const release = 2 * (p.healthIntervalMs + p.queryTimeoutMs);
  const faults = rng.pick([0, 1, 3, 6]);
  const all = ['terminate', 'restart', 'freeze', 'freezeOnGrant', 'blackhole', 'reset', 'crash'] as const;
  const kinds = all.filter(() => rng.chance(0.6));
  for (let k = 0; k < faults && kinds.length > 0; k++) {
    const at = rng.between(200, p.chaosMs);
    const who = rng.int(-1, n - 1); // -1: whoever leads then
    const kind = rng.pick(kinds);
    if (kind === 'restart') steps.push({ at, op: 'restart', ms: rng.pick([20, 300, 1500]) });
    else if (kind === 'freeze' || kind === 'freezeOnGrant') {
      // freezeOnGrant: the process freezes as the server grants it the key, before it reads the grant
      const ms = rng.pick([50, release / 2, release * 1.5]);
      if (kind === 'freeze') steps.push({ at, op: kind, who, ms });
      else steps.push({ at, op: kind, who: rng.int(0, n - 1), ms, thenBlackhole: rng.chance(0.5) });
    } else steps.push({ at, op: kind, who });
    if (kind === 'crash' && rng.chance(0.6))
      steps.push({ at: at + rng.between(50, 2000), op: 'start', who: who });
  }
  const ops = rng.pick([0, 2, 5]);
  for (let k = 0; k < ops; k++) {
    const at = rng.between(300, p.chaosMs);
    const who = rng.int(-1, n - 1);
    const op = rng.pick(['stepDown', 'stepDown', 'handoverTo', 'shutdown'] as const);
    if (op === 'handoverTo') steps.push({ at, op, who, to: rng.int(0, n - 1) });
    else if (op === 'shutdown') {
      steps.push({ at, op, who, ms: rng.pick([0, 0, 50]) });
      if (rng.chance(0.7)) steps.push({ at: at + rng.between(10, 1500), op: 'start', who });
    } else steps.push({ at, op, who, ms: rng.pick([0, 0, 30]) });
  }
  return steps.sort((a, b) => a.at - b.at);
}

/**
 * The quiet phase's bounds: a leader within `bound` of the last fault (with a failover, what
 * it adds: failover.ts), leading then for `hold` without a break.
 */
export function livenessBounds(p: Profile, failover: boolean): { bound: number; hold: number } {
  const maxDelay = p.net.baseMs + p.net.spikeMs;
  const release = 2 * (p.healthIntervalMs + p.queryTimeoutMs);
  const bound =
    release +
    p.takeoverDelayMs +
    (p.mode === 'wait' ? 1.1 * p.waitSliceMs : 0) +
    p.queryTimeoutMs +
    p.closeTimeoutMs +
    p.retry.maxMs +
    p.healthIntervalMs +
    40 * maxDelay +
    100 +
    (failover ? failoverBoundMs(p.takeoverDelayMs, maxDelay) : 0);
  const hold = Math.max(3 * p.healthIntervalMs, p.mode === 'wait' ? 1.5 * p.waitSliceMs : 0, 500);
  return { bound, hold };
}

/** A candidate's retry strategy as the profile draws it, its jitter from `rng`. */
export function retryFor(p: Profile, rng: Random): RetryStrategy {
  const o = { baseMs: p.retry.baseMs, maxMs: p.retry.maxMs, random: () => rng.next() };
  return p.retry.kind === 'exponential' ? new ExponentialBackoff(o) : new DecorrelatedJitter(o);
}
