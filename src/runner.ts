/**
 * `runWhileLeader`: run a function in each leadership term. One run at a time per
 * registration: the next term's run starts only after the previous one has settled, so
 * two runs are never alive at once in this process. A run receives the term; its signal
 * aborts when the term ends, and the run should return promptly then.
 */
import type { Callbacks } from './callbacks.js';
import { PgLeaderLockError } from './errors.js';
import type { Term, Terms } from './term.js';

export type LeaderWork = (term: Term) => void | Promise<void>;

/** Returned by `runWhileLeader`: stop running the function. */
export interface LeaderWorkHandle extends AsyncDisposable {
  /** Abort the current run's signal, start no more runs; resolves when the current run has settled. */
  stop(): Promise<void>;
  /** Resolves when no run is in progress. */
  settled(): Promise<void>;
}

/** A run that threw or rejected (other than by its term's abort). Goes to onError. */
export class LeaderWorkError extends PgLeaderLockError {
  override name = 'LeaderWorkError';
  readonly termId: number;
  constructor(termId: number, cause: unknown) {
    super(`leader work failed in term ${termId}: ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
      code: 'ERR_PGLEADERLOCK_RUN',
    });
    this.termId = termId;
  }
}

export class Runners {
  private readonly all = new Set<Runner>();

  constructor(
    private readonly terms: Terms,
    private readonly callbacks: Callbacks,
  ) {}

  add(fn: LeaderWork): LeaderWorkHandle {
    const runner = new Runner(fn, this.callbacks);
    const stopping = new AbortController();
    runner.stopSignal = stopping.signal;
    this.all.add(runner);
    const unsubscribe = this.terms.onStart((term) => runner.start(term));
    const current = this.terms.current;
    if (current) runner.start(current);
    const stop = async (): Promise<void> => {
      unsubscribe();
      this.all.delete(runner);
      runner.stopped = true;
      stopping.abort(
        new PgLeaderLockError('runWhileLeader handle stopped', { code: 'ERR_PGLEADERLOCK_RUN' }),
      );
      await runner.settled();
    };
    return { stop, settled: () => runner.settled(), [Symbol.asyncDispose]: stop };
  }

  /** Resolves when every registered function has settled its current run. */
  settled(): Promise<void> {
    return Promise.all([...this.all].map((r) => r.settled())).then(() => {});
  }
}

class Runner {
  stopped = false;
  /** Aborts when the handle is stopped; each run's signal follows it as well as the term's. */
  stopSignal: AbortSignal = new AbortController().signal;
  private tail: Promise<void> = Promise.resolve();
  private running = 0;

  constructor(
    private readonly fn: LeaderWork,
    private readonly callbacks: Callbacks,
  ) {}

  start(term: Term): void {
    this.running += 1;
    this.tail = this.tail.then(async () => {
      try {
        if (this.stopped || term.signal.aborted) return;
        await this.fn({ ...term, signal: AbortSignal.any([term.signal, this.stopSignal]) });
      } catch (err) {
        // ending by the abort (term over, or handle stopped) is the expected way out
        const aborted = term.signal.aborted || this.stopSignal.aborted;
        const reasons: unknown[] = [term.signal.reason, this.stopSignal.reason];
        const byAbort = aborted && (reasons.includes(err) || (err as Error)?.name === 'AbortError');
        if (!byAbort) this.callbacks.emit('error', new LeaderWorkError(term.id, err));
      } finally {
        this.running -= 1;
      }
    });
  }

  settled(): Promise<void> {
    return this.running === 0 ? Promise.resolve() : this.tail;
  }
}
