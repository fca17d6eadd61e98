/**
 * Timers that fire early, as Node's do. A Node timer counts from the event loop's cached
 * time (taken when the loop last woke), not from `performance.now()` when it is armed: one
 * armed late in a busy turn fires up to that turn's length before its deadline as
 * `performance.now()` reads it (measured: 38 of 100 timers armed after a 3 ms busy turn,
 * by up to 1.5 ms). So a simulated process's timer may fire up to `maxMs` (never more than
 * its own delay) before its deadline, its clock's `now()` still reading the true simulated
 * time. What is early, and by how much, comes from a stream of the seed's own, forked once
 * per process as it is made, so the scenario's other draws are those it made before
 * (SIM_EARLY_TIMERS=off: every timer exactly on time, and every trace as before).
 */
import { Random } from './random.js';

/** A scenario's early timers: the share of its processes' timers that fire early, by up to `maxMs`. */
export interface EarlyTimers {
  share: number;
  maxMs: number;
}

/** The early timers of the scenario of `seed` (null: none; a quarter of the seeds, or all with SIM_EARLY_TIMERS=off). */
export function earlyTimersFor(
  seed: number,
  enabled = process.env.SIM_EARLY_TIMERS !== 'off',
): EarlyTimers | null {
  if (!enabled) return null;
  const share = earlyRandom(seed).pick([0, 0.1, 0.4, 1]);
  return share === 0 ? null : { share, maxMs: 2 };
}

/** The stream the processes' streams fork from (its first draw made the profile). */
function earlyRandom(seed: number): Random {
  return new Random((seed ^ 0xea71_7113) >>> 0);
}

/** Hands each new process of a scenario a stream of its own. */
export class EarlyStreams {
  private readonly root: Random;
  private readonly edges: Random;

  constructor(
    seed: number,
    readonly p: EarlyTimers,
  ) {
    this.root = earlyRandom(seed);
    this.root.next(); // the profile's draw
    this.edges = this.root.fork();
  }

  /**
   * Where an early timer matters: a pause that ends just before the lease runs out (the
   * lapse timer, armed before it, fires early as the process thaws, and the lease's end
   * comes before the check sent then can answer). For a freeze of a process that leads:
   * half of them (null: as drawn) end this many ms (up to twice `maxMs`) before its lease's end.
   */
  leaseEdge(): number | null {
    const edge = this.edges.chance(0.5);
    const before = this.edges.next() * 2 * this.p.maxMs;
    return edge ? before : null;
  }

  /** The next process's: how much earlier than `ms` from now its next timer fires. */
  forProcess(): (ms: number) => number {
    const rng = this.root.fork();
    const { share, maxMs } = this.p;
    return (ms) => (rng.next() < share ? rng.next() * Math.min(maxMs, ms) : 0);
  }
}
