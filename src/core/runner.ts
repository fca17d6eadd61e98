/**
 * `runWhileLeader` and `runForEach`: run a function in each term of a sequence (a lock's
 * leadership terms, one partition's terms). One run at a time per
 * registration: the next term's run starts only after the previous one has settled, so
 * two runs are never alive at once in this process. A run receives the term with a
 * signal that aborts when the term ends or the handle is stopped.
 *
 * The run's signal is its own AbortController's, linked to the term's signal and the
 * handle's with listeners removed when the run settles (no `AbortSignal.any`, which on
 * Node 20 never frees a combined signal that aborted with a listener attached).
 */
import { PgLeaderLockError } from './errors.js';

/** What a run needs of a term (a leader's `Term`, a partition's `PartitionTerm`). */
export interface RunTerm {
  readonly id: number;
  readonly signal: AbortSignal;
}

/** A run that threw or rejected other than by its abort: reported (to onError). */
export type RunFailed<T> = (term: T, error: unknown) => void;

/** Returned by `runWhileLeader` and `runForEach`: stop running the function. */
export interface LeaderWorkHandle extends AsyncDisposable {
  /** Abort the current run's signal, start no more runs; resolves when the current run has settled. */
  stop(): Promise<void>;
  /** Resolves when no run is in progress. */
  settled(): Promise<void>;
}

/** The runs of one term sequence: a leader's terms, or one partition's terms. */
export class Runners<T extends RunTerm> {
  private readonly all = new Set<Runner<T>>();
  /** Runners with a run in progress or queued (stopped handles included until they settle). */
  private readonly busySet = new Set<Runner<T>>();

  constructor(
    private readonly failed: RunFailed<T>,
    private readonly now: () => number,
    /** The term a run receives: the term with the run's own signal (a copy). */
    private readonly withSignal: (term: T, signal: AbortSignal) => T = (term, signal) => ({
      ...term,
      signal,
    }),
  ) {}

  /**
   * The run still going the longest after its term ended: its term and for how long
   * (`lock.health()` turns not live when leader work ignores its abort). Null if none.
   */
  overdue(): { termId: number; ms: number } | null {
    let worst: { termId: number; ms: number } | null = null;
    for (const runner of this.busySet) {
      const r = runner.current;
      if (r?.endedAt == null) continue;
      const ms = this.now() - r.endedAt;
      if (!worst || ms > worst.ms) worst = { termId: r.termId, ms };
    }
    return worst;
  }

  /** Register `fn`; `current` is the open term, if any (the run starts in it at once). */
  add(fn: (term: T) => unknown, current: T | null): LeaderWorkHandle {
    const runner = new Runner<T>(fn, this.failed, this.busySet, this.now, this.withSignal);
    this.all.add(runner);
    if (current) runner.start(current);
    const stop = async (): Promise<void> => {
      this.all.delete(runner);
      runner.stop();
      await runner.settled();
    };
    return { stop, settled: () => runner.settled(), [Symbol.asyncDispose]: stop };
  }

  /** A term opened: every registered function starts a run in it (after its previous run). */
  start(term: T): void {
    for (const runner of this.all) runner.start(term);
  }

  /** Resolves when no run of any term is running or queued (runs of stopped handles included). */
  async idle(): Promise<void> {
    for (;;) {
      const busy = [...this.busySet];
      if (busy.length === 0) return;
      await Promise.all(busy.map((r) => r.settled()));
    }
  }

  /** True while some run of any term is running or queued. */
  get busy(): boolean {
    return this.busySet.size > 0;
  }
}

class Runner<T extends RunTerm> {
  /** The run in progress: its term, and when that term ended (null while it lasts). */
  current: { termId: number; endedAt: number | null } | null = null;
  private stopped = false;
  private readonly stopping = new AbortController();
  private tail: Promise<void> = Promise.resolve();
  private pending = 0;

  constructor(
    private readonly fn: (term: T) => unknown,
    private readonly failed: RunFailed<T>,
    private readonly busy: Set<Runner<T>>,
    private readonly now: () => number,
    private readonly withSignal: (term: T, signal: AbortSignal) => T,
  ) {}

  start(term: T): void {
    if (this.stopped) return;
    this.pending += 1;
    this.busy.add(this);
    this.tail = this.tail
      .then(() => this.run(term))
      .finally(() => {
        this.pending -= 1;
        if (this.pending === 0) this.busy.delete(this);
      });
  }

  stop(): void {
    this.stopped = true;
    this.stopping.abort(
      new PgLeaderLockError('runWhileLeader handle stopped', { code: 'ERR_PGLEADERLOCK_RUN' }),
    );
  }

  settled(): Promise<void> {
    return this.pending === 0 ? Promise.resolve() : this.tail;
  }

  private async run(term: T): Promise<void> {
    if (this.stopped || term.signal.aborted) return;
    const controller = new AbortController();
    const sources = [term.signal, this.stopping.signal];
    const current = { termId: term.id, endedAt: null as number | null };
    this.current = current;
    const onAbort = (event: Event): void => {
      current.endedAt ??= this.now();
      controller.abort((event.target as AbortSignal).reason);
    };
    for (const s of sources) s.addEventListener('abort', onAbort, { once: true });
    try {
      await this.fn(this.withSignal(term, controller.signal));
    } catch (err) {
      // ending by the abort (term over, or handle stopped) is the expected way out
      const byAbort =
        controller.signal.aborted &&
        (err === controller.signal.reason || (err as Error | null)?.name === 'AbortError');
      if (!byAbort) this.failed(term, err);
    } finally {
      for (const s of sources) s.removeEventListener('abort', onAbort);
      this.current = null;
    }
  }
}
