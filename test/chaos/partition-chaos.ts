/**
 * Chaos for PartitionedLeadership: N worker processes, each behind a fault proxy of its own,
 * on a server of the run's own. The run is a list of seeded sequences (plan.ts): every
 * choice (which fault, which worker, the storm's order and pauses, how a worker is frozen)
 * is drawn from the sequence's seed. Faults are injected one at a time (a storm is several joins,
 * clean leaves and kills in quick succession, overlapping each other); after each the run
 * waits until every partition runs again, ⌊P/N⌋ or ⌈P/N⌉ per live worker, and nothing moved
 * for 300 ms. Afterwards the runs the workers reported (monotonic clock shared through
 * process.hrtime; a run ends when its work stopped or at its lease end, whichever is first)
 * are checked for two runs of one partition at once.
 *
 * Every fault here is covered: a frozen or blackholed worker's terms end with its lease,
 * before the server frees its locks; a kill, `pg_terminate_backend` or a server restart
 * frees them at once, and the takeover delay (`takeoverDelayMs`) covers the old owner's
 * detection plus the work's stop time (`stopMs`); a clean leave or rebalance drains first.
 *
 * Long form: npm run chaos:partitions -- <seconds> <workers> <partitions> (partitions-main.ts).
 */

import type { ChildProcess } from 'node:child_process';
import { eventually } from '../harness/db.js';
import { type PgServer, startPgServer } from '../harness/pg-server.js';
import {
  findRunOverlaps,
  heldPartitions,
  now,
  partitionCluster,
  type Run,
  type RunOverlap,
  sleep,
} from './partition-cluster.js';
import {
  choose,
  describePartitionStep,
  type PartitionFault,
  type PartitionStep,
  planPartitionSequence,
} from './plan.js';

export type { PartitionFault };
/**
 * The random run's faults. `freezeInFence`: a SIGKILL, then another worker frozen 10–60 ms
 * later, while its takeover delays on the dead worker's partitions are pending; on waking
 * its fence timers are due before its lease timer, and must not open terms past the lease
 * (reported as terms opened past their lease; the library once did, 44 in 15 faults).
 */
export const PARTITION_FAULTS: readonly PartitionFault[] = [
  'kill',
  'terminate',
  'restart',
  'blackhole',
  'freeze',
  'leave',
  'storm',
  'freezeInFence',
];
export const ALL_PARTITION_FAULTS: readonly PartitionFault[] = PARTITION_FAULTS;

export interface PartitionChaosOptions {
  workers: number;
  partitions: number;
  /** The sequences' seeds (plan.ts `sequenceSeeds`), run in this order on one cluster. */
  seeds: readonly number[];
  /** Faults per sequence. Default 1. */
  steps?: number;
  /** Stop after the sequence during which this much time has passed (the long form). Default: run every seed. */
  durationMs?: number;
  /** The sequences draw from these (default PARTITION_FAULTS); sequence i's first is kinds[seed % kinds.length]. */
  kinds?: readonly PartitionFault[];
  /** Defaults as the LeaderLock chaos: 200, 500 (server release bound 1400 ms, lease 1260 ms). */
  healthIntervalMs?: number;
  queryTimeoutMs?: number;
  /** The work stops this long after its term aborts. Default 100. */
  stopMs?: number;
  /** Default 250: the work's stop time plus 150 ms for the old owner's detection. */
  takeoverDelayMs?: number;
  /** How long a frozen worker stays frozen. Default server release bound + 600 ms. */
  freezeMs?: number;
  /** Joins, leaves and kills per storm (as many joins as removals). Default 6. */
  stormActions?: number;
  /** Each fault has this long to settle (balanced again). Default 60 s. */
  settleTimeoutMs?: number;
  track?: (proc: ChildProcess) => void;
  log?: (line: string) => void;
}

export interface PartitionFaultRecord {
  kind: PartitionFault;
  /** The seed of its sequence, and the step in words (its choices). */
  seed: number;
  step: string;
  at: number;
  /** The worker it hit (a storm: what it did). */
  target: string;
  /** Runs started from the fault until balanced again. */
  moved: number;
  /** From the fault to balanced again; null if not within settleTimeoutMs. */
  balancedMs: number | null;
}

export interface PartitionChaosReport {
  /** The sequences run: each seed and its steps in words (its choice list). */
  sequences: { seed: number; steps: string[] }[];
  faults: PartitionFaultRecord[];
  runs: Run[];
  overlaps: (RunOverlap & { fault: PartitionFault | 'none' })[];
  /** Longest time a partition had no run, per fault (the gap attributed to the fault before it). */
  maxGapMs: Partial<Record<PartitionFault, number>>;
  /** Runs whose term opened past its lease. */
  lateStarts: Run[];
  /** The kind of the last fault injected at or before `t`. */
  faultAt: (t: number) => PartitionFault | 'none';
  /** After the last fault settled: partition locks on the server, partitions running, and those not running. */
  heldAtEnd: number;
  runningAtEnd: number;
  ownerlessAtEnd: number[];
  /** How many partitions each live worker ran at the end. */
  perWorkerAtEnd: number[];
  /** Live workers at the end (a storm's removal becomes a join when one worker is left). */
  workersAtEnd: number;
  errors: number;
  workersStarted: number;
  settings: {
    healthIntervalMs: number;
    queryTimeoutMs: number;
    serverReleaseMs: number;
    stopMs: number;
    takeoverDelayMs: number;
    freezeMs: number;
  };
}

export async function runPartitionChaos(opts: PartitionChaosOptions): Promise<PartitionChaosReport> {
  const log = opts.log ?? (() => {});
  const P = opts.partitions;
  const healthIntervalMs = opts.healthIntervalMs ?? 200;
  const queryTimeoutMs = opts.queryTimeoutMs ?? 500;
  const serverReleaseMs = 2 * (healthIntervalMs + queryTimeoutMs); // the library's default
  const stopMs = opts.stopMs ?? 100;
  const takeoverDelayMs = opts.takeoverDelayMs ?? stopMs + 150;
  const freezeMs = opts.freezeMs ?? serverReleaseMs + 600;
  const settleTimeoutMs = opts.settleTimeoutMs ?? 60_000;
  const name = `chaos-p-${opts.seeds[0] ?? 0}`; // the run has a server of its own
  const server: PgServer = await startPgServer();
  const c = partitionCluster({
    url: server.url,
    name,
    partitions: P,
    takeoverDelayMs,
    stopMs,
    healthIntervalMs,
    queryTimeoutMs,
    proxied: true,
    ...(opts.track ? { track: opts.track } : {}),
  });
  const faults: PartitionFaultRecord[] = [];
  let started = 0;
  const spawn = (): Promise<string> => {
    started += 1;
    return c.spawn();
  };
  const live = (): string[] => [...c.procs.keys()];
  /** A run ended (reported after message `seen`), in `id` if given. */
  const ended = (seen: number, id?: string) => () =>
    c.msgs.slice(seen).some((m) => m.ev === 'end' && (id === undefined || m.id === id));
  /** Every partition runs and none on `id`. */
  const movedOff = (id: string) => () => c.running().size === P && ![...c.running().values()].includes(id);

  /** Live workers by id (workers are named w0, w1, …: by number). */
  const liveSorted = (): string[] => live().sort((a, b) => Number(a.slice(1)) - Number(b.slice(1)));
  const storm = async (step: PartitionStep): Promise<string> => {
    const pending: Promise<unknown>[] = [];
    const done: string[] = [];
    for (const action of step.storm) {
      if (action.join || live().length <= 1) {
        const id = await spawn();
        done.push(`+${id}`);
      } else {
        const id = choose(liveSorted(), action.pick) as string;
        if (action.kill) {
          c.kill(id);
          done.push(`kill ${id}`);
        } else {
          pending.push(c.stop(id));
          done.push(`-${id}`);
        }
      }
      await sleep(action.pauseMs);
    }
    await Promise.all(pending);
    return done.join(' ');
  };

  const inject = async (step: PartitionStep, seen: number): Promise<string> => {
    const kind = step.kind;
    const victim = choose(liveSorted(), step.pick) as string;
    switch (kind) {
      case 'kill':
        c.kill(victim);
        await eventually(() => c.running().size === P, { timeoutMs: settleTimeoutMs, what: 'kill to move' });
        await spawn();
        return victim;
      case 'leave':
        await c.stop(victim);
        await spawn();
        return victim;
      case 'terminate':
        await c.terminate(victim);
        await eventually(ended(seen, victim), { what: 'terminate to end runs' });
        return victim;
      case 'restart':
        await server.restart('fast');
        await eventually(ended(seen), { what: 'restart to end runs' });
        return 'server';
      case 'blackhole':
        c.blackhole(victim);
        await eventually(movedOff(victim), {
          timeoutMs: settleTimeoutMs,
          what: 'blackholed partitions to move',
        });
        c.heal(victim);
        return victim;
      case 'freeze':
        await c.freeze(victim, freezeMs, step.freezeHow);
        await sleep(freezeMs);
        await eventually(ended(seen, victim), { what: 'the frozen worker to wake' });
        return victim;
      case 'storm':
        return storm(step);
      case 'freezeInFence': {
        const other = choose(
          liveSorted().filter((id) => id !== victim),
          step.other,
        ) as string;
        c.kill(victim);
        await sleep(step.fenceGapMs);
        await c.freeze(other, freezeMs, step.freezeHow);
        await sleep(freezeMs);
        await eventually(ended(seen, other), { what: 'the frozen worker to wake' });
        await spawn();
        return `kill ${victim}, freeze ${other}`;
      }
    }
  };

  let heldAtEnd = 0;
  let runningAtEnd = 0;
  let ownerlessAtEnd: number[] = [];
  let perWorkerAtEnd: number[] = [];
  let workersAtEnd = 0;
  const sequences: { seed: number; steps: string[] }[] = [];
  try {
    for (let i = 0; i < opts.workers; i++) await spawn();
    await c.balanced('the first balance', settleTimeoutMs, 300);
    const endAt = opts.durationMs === undefined ? Number.POSITIVE_INFINITY : now() + opts.durationMs;
    const kinds = opts.kinds ?? PARTITION_FAULTS;
    const planned = opts.seeds.flatMap((seed) => {
      const steps = planPartitionSequence(seed, kinds, opts.steps ?? 1, opts.stormActions ?? 6);
      return steps.map((step, i) => ({ seed, step, first: i === 0, all: steps }));
    });
    for (const { seed, step, first, all } of planned) {
      if (first) {
        if (now() > endAt) break;
        sequences.push({ seed, steps: all.map(describePartitionStep) });
      }
      const kind = step.kind;
      const at = now();
      const seen = c.msgs.length;
      const record: PartitionFaultRecord = {
        kind,
        seed,
        step: describePartitionStep(step),
        at,
        target: '',
        moved: 0,
        balancedMs: null,
      };
      faults.push(record);
      log(`[${seed}] ${record.step}`);
      try {
        record.target = await inject(step, seen);
        await c.balanced(`balance after ${kind}`, settleTimeoutMs, 300);
        record.balancedMs = now() - at;
      } catch (err) {
        log(`  ${kind}: ${(err as Error).message}`);
      }
      record.moved = c.msgs.slice(seen).filter((m) => m.ev === 'start').length;
      log(
        `${kind} ${record.target}: ${record.moved} runs started, balanced after ${record.balancedMs?.toFixed(0) ?? 'never'} ms`,
      );
      if (record.balancedMs === null) {
        // no next fault on an unsettled cluster; past a second timeout, stop and report
        const settled = await c.balanced('balance before the next fault', settleTimeoutMs, 300).then(
          () => true,
          (err: Error) => {
            log(`  ${err.message}`);
            return false;
          },
        );
        if (!settled) break;
      }
      await sleep(step.pauseMs);
    }
    heldAtEnd = await heldPartitions(server.url, name);
    const running = c.running();
    runningAtEnd = running.size;
    ownerlessAtEnd = [...Array(P).keys()].filter((p) => !running.has(p));
    perWorkerAtEnd = [...c.perWorker().values()];
    workersAtEnd = c.procs.size;
  } finally {
    await c.close();
    await server.dispose();
  }

  const runs = c.runs();
  const faultAt = (t: number): PartitionFault | 'none' =>
    [...faults].reverse().find((f) => f.at <= t)?.kind ?? 'none';
  const maxGapMs: Partial<Record<PartitionFault, number>> = {};
  for (const rs of groupBy(runs.filter((r) => r.end > r.start)).values()) {
    let lastEnd = Number.NEGATIVE_INFINITY;
    for (const r of rs.sort((x, y) => x.start - y.start)) {
      const kind = faultAt(lastEnd);
      if (r.start > lastEnd && kind !== 'none')
        maxGapMs[kind] = Math.max(maxGapMs[kind] ?? 0, r.start - lastEnd);
      lastEnd = Math.max(lastEnd, r.end);
    }
  }
  return {
    sequences,
    faults,
    runs,
    overlaps: findRunOverlaps(runs).map((o) => ({ ...o, fault: faultAt(o.at) })),
    maxGapMs,
    lateStarts: runs.filter((r) => r.late),
    faultAt,
    heldAtEnd,
    runningAtEnd,
    ownerlessAtEnd,
    perWorkerAtEnd,
    workersAtEnd,
    errors: c.msgs.filter((m) => m.ev === 'error').length,
    workersStarted: started,
    settings: { healthIntervalMs, queryTimeoutMs, serverReleaseMs, stopMs, takeoverDelayMs, freezeMs },
  };
}

function groupBy(runs: readonly Run[]): Map<number, Run[]> {
  const out = new Map<number, Run[]>();
  for (const r of runs) out.set(r.p, [...(out.get(r.p) ?? []), r]);
  return out;
}

/** Markdown table of a report, one row per fault kind injected. */
export function formatPartitionReport(r: PartitionChaosReport): string {
  const lines = [
    '| fault | injected | overlaps | terms opened past their lease | max ownerless gap (ms) | max time to balanced (ms) | runs started (total) |',
    '|---|---|---|---|---|---|---|',
  ];
  for (const k of ALL_PARTITION_FAULTS) {
    const fs = r.faults.filter((f) => f.kind === k);
    if (fs.length === 0) continue;
    const settled = fs.map((f) => f.balancedMs ?? Number.POSITIVE_INFINITY);
    lines.push(
      `| ${k} | ${fs.length} | ${r.overlaps.filter((o) => o.fault === k).length} | ${r.lateStarts.filter((l) => r.faultAt(l.start) === k).length} | ${r.maxGapMs[k]?.toFixed(0) ?? '-'} | ${
        settled.length ? Math.max(...settled).toFixed(0) : '-'
      } | ${fs.reduce((n, f) => n + f.moved, 0)} |`,
    );
  }
  return lines.join('\n');
}
