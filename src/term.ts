/**
 * Leadership terms. A term opens each time the lock becomes leader (also when a recovered
 * leadership returns from RECONNECTING) and ends the moment leadership ends, whatever the
 * cause; its `signal` aborts then, synchronously with the state change.
 */
import { PgLeaderLockError } from './errors.js';

/** One period of leadership. */
export interface Term {
  /** 1, 2, 3, … within this LeaderLock. */
  readonly id: number;
  /** Wall-clock time the term opened. */
  readonly acquiredAt: Date;
  /** Aborts when the term ends (loss, release, step-down, shutdown, entering RECONNECTING). */
  readonly signal: AbortSignal;
  /** Fencing epoch, when fencing is on; otherwise null. */
  readonly epoch: bigint | null;
}

/** Why a term ended: the reason its signal aborts with. */
export class TermEndedError extends PgLeaderLockError {
  override name = 'TermEndedError';
  readonly termId: number;
  constructor(termId: number, why: string) {
    super(`leadership term ${termId} ended: ${why}`, { code: 'ERR_PGLEADERLOCK_TERM_ENDED' });
    this.termId = termId;
  }
}

export class Terms {
  private nextId = 1;
  private active: { term: Term; controller: AbortController } | null = null;
  private readonly startListeners = new Set<(term: Term) => void>();

  get current(): Term | null {
    return this.active?.term ?? null;
  }

  open(epoch: bigint | null = null): Term {
    this.end('superseded');
    const controller = new AbortController();
    const term: Term = { id: this.nextId++, acquiredAt: new Date(), signal: controller.signal, epoch };
    this.active = { term, controller };
    for (const fn of this.startListeners) fn(term);
    return term;
  }

  /** End the current term, if any: its signal aborts now. */
  end(why: string): void {
    const a = this.active;
    if (!a) return;
    this.active = null;
    a.controller.abort(new TermEndedError(a.term.id, why));
  }

  /** Called with each new term, synchronously. Returns an unsubscribe. */
  onStart(fn: (term: Term) => void): () => void {
    this.startListeners.add(fn);
    return () => this.startListeners.delete(fn);
  }
}
