/**
 * `runForEach`: each registered function runs in every open term of every partition this
 * worker owns, on the same runners as `LeaderLock.runWhileLeader` (runner.ts), one term
 * sequence per partition. One run at a time per registration and partition: a partition's
 * next term's run starts only after the previous one has settled, so two runs of one
 * partition are never alive at once in this process, even when a lost partition is taken
 * again while its old run still ignores its abort.
 */
import type { LeaderWorkHandle } from '../core/runner.js';
import { Runners } from '../core/runner.js';
import type { PartitionTerm } from './term.js';

/**
 * Work for `runForEach`: runs once per partition term on this worker, and should return soon
 * after `term.signal` aborts.
 */
export type PartitionWork = (partition: number, term: PartitionTerm) => Promise<void> | void;

export class PartitionRuns {
  private readonly byPartition = new Map<number, Runners<PartitionTerm>>();
  /** Each registration (the same function may be registered twice), and its handle on each partition's runners. */
  private readonly works = new Set<{ fn: PartitionWork; handles: Map<number, LeaderWorkHandle> }>();

  constructor(
    private readonly failed: (term: PartitionTerm, error: unknown) => void,
    private readonly now: () => number,
    /** The term a run receives (the term with the run's own signal), recorded as issued. */
    private readonly withSignal: (term: PartitionTerm, signal: AbortSignal) => PartitionTerm,
  ) {}

  /** Register `fn`; `openTerm(p)` is partition p's open term, if any (its run starts at once). */
  add(fn: PartitionWork, openTerm: (partition: number) => PartitionTerm | null): LeaderWorkHandle {
    const handles = new Map<number, LeaderWorkHandle>();
    const registration = { fn, handles };
    this.works.add(registration);
    for (const [partition, runners] of this.byPartition) {
      handles.set(partition, runners.add(run(fn), openTerm(partition)));
    }
    const stop = async (): Promise<void> => {
      this.works.delete(registration);
      await Promise.all([...handles.values()].map((h) => h.stop()));
    };
    const settled = async (): Promise<void> => {
      await Promise.all([...handles.values()].map((h) => h.settled()));
    };
    return { stop, settled, [Symbol.asyncDispose]: stop };
  }

  /** A partition's term opened: every registration starts a run in it (after its previous run there). */
  start(term: PartitionTerm): void {
    this.runnersOf(term.partition).start(term);
  }

  /** True while a run of `partition` (any term) is running or queued. */
  busy(partition: number): boolean {
    return this.byPartition.get(partition)?.busy ?? false;
  }

  /** Resolves when no run of `partition` is running or queued. */
  idle(partition: number): Promise<void> {
    return this.byPartition.get(partition)?.idle() ?? Promise.resolve();
  }

  /** Resolves when no run of any partition is running or queued. */
  async allIdle(): Promise<void> {
    await Promise.all([...this.byPartition.values()].map((r) => r.idle()));
  }

  /** The run still going the longest after its term ended: its partition, term and how long. */
  overdue(): { partition: number; termId: number; ms: number } | null {
    let worst: { partition: number; termId: number; ms: number } | null = null;
    for (const [partition, runners] of this.byPartition) {
      const o = runners.overdue();
      if (o && (!worst || o.ms > worst.ms)) worst = { partition, ...o };
    }
    return worst;
  }

  private runnersOf(partition: number): Runners<PartitionTerm> {
    let runners = this.byPartition.get(partition);
    if (!runners) {
      runners = new Runners<PartitionTerm>(this.failed, this.now, this.withSignal);
      this.byPartition.set(partition, runners);
      for (const { fn, handles } of this.works) handles.set(partition, runners.add(run(fn), null));
    }
    return runners;
  }
}

const run =
  (fn: PartitionWork) =>
  (term: PartitionTerm): unknown =>
    fn(term.partition, term);
