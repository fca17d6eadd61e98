/**
 * The chaos suites' seeds and plans. A chaos run is a list of short sequences; each
 * sequence has a seed of its own, and every choice of the sequence (which fault, whom it
 * hits, how long a freeze or a blackhole lasts, the pauses, the priorities of joiners, which
 * waiting candidate a handover names) is drawn up front from one generator seeded with it
 * (test/sim/random.ts, the simulation's mulberry32). A plan is a pure function of its seed:
 * the same seed gives the same list of steps, which `describeStep` prints. What a step hits
 * is resolved when it runs (the leader at that moment, the `pick`-th follower by name), so
 * timing (who won the last election, how fast the kernel and the server answer) may differ
 * from run to run; the choices do not.
 *
 * Seeds: sequence `i` of a suite has seed `base + offset + i` (base `DEFAULT_BASE_SEED`, or
 * `CHAOS_BASE_SEED`); `CHAOS_SEED=<seed>` runs only the sequence of that seed.
 */
import { Random } from '../sim/random.js';

export type FaultKind =
  | 'kill'
  | 'stepDown'
  | 'blackhole'
  | 'freeze'
  | 'terminate'
  | 'reset'
  | 'restart'
  | 'join'
  | 'leave'
  | 'respawn'
  | 'resign'
  | 'handover'
  | 'handoverTo';

/**
 * Real faults: SIGKILL, stepDown, the fault proxy's blackhole (healed by a reset of the
 * connections given up on, then traffic again) and reset (RST to both sides), a freeze
 * (SIGSTOP/SIGCONT, or a busy event loop), pg_terminate_backend, a server restart.
 */
export const BASIC_KINDS: readonly FaultKind[] = [
  'kill',
  'stepDown',
  'blackhole',
  'freeze',
  'terminate',
  'reset',
  'restart',
];
/**
 * Priority churn: `join` (a new candidate, a drawn priority), `leave` (SIGTERM: it shuts
 * down), `respawn` (SIGTERM, then the same id back with a new priority), `resign` and
 * `handover` (a NOTIFY on the key's channel to a waiting candidate), `handoverTo` (called
 * by the leader). Half of the leaves and respawns hit the leader, half a follower.
 */
export const CHURN_KINDS: readonly FaultKind[] = [
  'join',
  'leave',
  'respawn',
  'resign',
  'handover',
  'handoverTo',
];
/** Kinds that may hit a follower instead of the leader (then the leader must stay). */
const TARGETED: ReadonlySet<FaultKind> = new Set(['kill', 'blackhole', 'freeze', 'terminate', 'reset']);

/** The base seed CI uses (fixed, so a CI run is reproducible). */
export const DEFAULT_BASE_SEED = 20261202;

function parseSeed(value: string, name: string): number {
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < 0 || n >= 2 ** 32)
    throw new RangeError(`${name} must be an integer in [0, 2^32), got ${JSON.stringify(value)}`);
  return n;
}

/**
 * The seeds of a suite's sequences: `base + offset + i` for i < count, or only
 * `CHAOS_SEED` if set. `offset` keeps the suites' seeds apart.
 */
export function sequenceSeeds(offset: number, count: number, env = process.env): number[] {
  if (env.CHAOS_SEED) return [parseSeed(env.CHAOS_SEED, 'CHAOS_SEED')];
  const base = env.CHAOS_BASE_SEED ? parseSeed(env.CHAOS_BASE_SEED, 'CHAOS_BASE_SEED') : DEFAULT_BASE_SEED;
  return Array.from({ length: count }, (_, i) => (base + offset + i) >>> 0);
}

/** How to replay a sequence, for assertion messages. */
export const replayHint = (seed: number): string => `seed ${seed} (replay: CHAOS_SEED=${seed})`;

export interface Step {
  kind: FaultKind;
  /** Whom a kill, blackhole, freeze, terminate, reset, leave or respawn hits. */
  target: 'leader' | 'follower';
  /** [0, 1): which follower (by name), which waiting candidate a handover names. */
  pick: number;
  /** A joiner's or a respawned candidate's priority. */
  priority: number;
  /** How long a freeze lasts, or a follower's blackhole before it is healed (ms). */
  holdMs: number;
  freezeHow: 'sigstop' | 'busy';
  /** Once the cluster is calm, this long before the step (ms). */
  pauseMs: number;
}

export interface PlanOptions {
  kinds: readonly FaultKind[];
  /** Candidates at the start of each sequence (churn keeps them within two of it). */
  candidates: number;
  /** Priority levels (0: off). */
  priorities: number;
  /** The server release bound: a leader's freeze lasts longer than it, so that it is replaced. */
  serverReleaseMs: number;
  /** Steps per sequence: 1, or 2 to this one time in four (short sequences keep the suite's time). Default 2. */
  maxSteps?: number;
}

/**
 * The steps of the sequence of `seed`: a pure function of its arguments. The first step's
 * kind is `kinds[seed % kinds.length]`, so that consecutive seeds cover every kind; each
 * step draws the same number of values whatever its kind, so the list stays comparable.
 */
export function planSequence(seed: number, o: PlanOptions): Step[] {
  const r = new Random(seed);
  const n = r.chance(0.25) ? r.int(2, Math.max(2, o.maxSteps ?? 2)) : 1;
  const min = Math.max(2, o.candidates - 2);
  const max = o.candidates + 2;
  let live = o.candidates;
  const steps: Step[] = [];
  for (let i = 0; i < n; i++) {
    let kind = i === 0 ? (o.kinds[seed % o.kinds.length] as FaultKind) : r.pick(o.kinds);
    const follower = r.chance(0.3);
    const half = r.chance(0.5);
    const pick = r.next();
    const priority = o.priorities > 0 ? r.int(0, o.priorities - 1) : 0;
    const leaderFreezeMs = o.serverReleaseMs + r.int(200, 700);
    const followerHoldMs = r.int(200, o.serverReleaseMs);
    const freezeHow = r.chance(0.7) ? 'sigstop' : 'busy';
    const pauseMs = r.int(0, 300);
    // churn keeps the number of candidates within two of the start
    if (kind === 'leave' && live <= min) kind = 'join';
    else if (kind === 'join' && live >= max) kind = 'leave';
    if (kind === 'join') live++;
    if (kind === 'leave') live--;
    const halfLeader = kind === 'leave' || kind === 'respawn';
    const target: Step['target'] =
      (TARGETED.has(kind) && follower) || (halfLeader && half) ? 'follower' : 'leader';
    steps.push({
      kind,
      target,
      pick,
      priority,
      holdMs: target === 'leader' ? (kind === 'freeze' ? leaderFreezeMs : 0) : followerHoldMs,
      freezeHow,
      pauseMs,
    });
  }
  return steps;
}

/** A step in words (the choice list a failure prints). */
export function describeStep(s: Step): string {
  const on = s.kind === 'restart' || s.kind === 'resign' ? '' : ` ${s.target}`;
  const extra: string[] = [];
  if (s.kind === 'freeze') extra.push(`${s.freezeHow} ${s.holdMs} ms`);
  if (s.kind === 'blackhole' && s.target === 'follower') extra.push(`${s.holdMs} ms`);
  if (s.kind === 'join' || s.kind === 'respawn') extra.push(`p${s.priority}`);
  if (s.target === 'follower' || s.kind === 'handover' || s.kind === 'handoverTo')
    extra.push(`pick ${s.pick.toFixed(3)}`);
  return `+${s.pauseMs}ms ${s.kind}${on}${extra.length ? ` (${extra.join(', ')})` : ''}`;
}

/** The `pick`-th of `items` (pick in [0, 1)). */
export const choose = <T>(items: readonly T[], pick: number): T | undefined =>
  items[Math.min(items.length - 1, Math.floor(pick * items.length))];

/** Priorities of a fresh cluster's candidates, from the first sequence's seed (its own stream). */
export function initialPriorities(seed: number, candidates: number, priorities: number): number[] {
  const r = new Random(seed ^ 0x9e3779b9);
  return Array.from({ length: candidates }, () => (priorities > 0 ? r.int(0, priorities - 1) : 0));
}

// ---- PartitionedLeadership ----

export type PartitionFault =
  | 'kill'
  | 'terminate'
  | 'restart'
  | 'blackhole'
  | 'freeze'
  | 'leave'
  | 'storm'
  | 'freezeInFence';

export interface PartitionStep {
  kind: PartitionFault;
  /** [0, 1): the victim among the live workers (by id). */
  pick: number;
  /** [0, 1): freezeInFence's second worker, among the others. */
  other: number;
  /** freezeInFence: from the kill to the freeze (10–60 ms). */
  fenceGapMs: number;
  /** The freeze: SIGSTOP/SIGCONT or a busy event loop. */
  freezeHow: 'sigstop' | 'busy';
  /** storm: joins and removals in order, each with its pick, whether a removal is a SIGKILL, and the pause after it (50–300 ms). */
  storm: { join: boolean; pick: number; kill: boolean; pauseMs: number }[];
  /** After balanced, this long before the next step (100–300 ms). */
  pauseMs: number;
}

/**
 * The steps of a partition sequence: `steps` faults, the first `kinds[seed % kinds.length]`,
 * the rest drawn; a pure function of its arguments (each step draws the same values).
 */
export function planPartitionSequence(
  seed: number,
  kinds: readonly PartitionFault[],
  steps = 1,
  stormActions = 6,
): PartitionStep[] {
  const r = new Random(seed);
  const out: PartitionStep[] = [];
  for (let i = 0; i < steps; i++) {
    const kind = i === 0 ? (kinds[seed % kinds.length] as PartitionFault) : r.pick(kinds);
    const removals = Math.floor(stormActions / 2);
    const order = [...Array<boolean>(removals).fill(true), ...Array<boolean>(removals).fill(false)];
    for (let j = order.length - 1; j > 0; j--) {
      const k = r.int(0, j);
      [order[j], order[k]] = [order[k] as boolean, order[j] as boolean];
    }
    const storm = order.map((join) => ({
      join,
      pick: r.next(),
      kill: r.int(0, 2) === 0,
      pauseMs: r.int(50, 300),
    }));
    out.push({
      kind,
      pick: r.next(),
      other: r.next(),
      fenceGapMs: r.int(10, 60),
      freezeHow: r.chance(0.5) ? 'sigstop' : 'busy',
      storm,
      pauseMs: r.int(100, 300),
    });
  }
  return out;
}

export function describePartitionStep(s: PartitionStep): string {
  const extra =
    s.kind === 'storm'
      ? s.storm
          .map((a) => `${a.join ? '+' : `${a.kill ? 'kill' : '-'}@${a.pick.toFixed(2)}`} ${a.pauseMs}ms`)
          .join(', ')
      : s.kind === 'freezeInFence'
        ? `kill @${s.pick.toFixed(3)}, ${s.fenceGapMs} ms, ${s.freezeHow} @${s.other.toFixed(3)}`
        : `@${s.pick.toFixed(3)}${s.kind === 'freeze' ? ` ${s.freezeHow}` : ''}`;
  return `${s.kind} (${extra}) +${s.pauseMs}ms`;
}
