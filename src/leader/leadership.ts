/**
 * Leadership: the one owner of everything that makes this process a leader: the term,
 * the lease behind `isLeader`, and the fencing epoch.
 * Nothing else opens or ends a term. A `Leadership` lives in the lifecycle's LEADER phase
 * only; leaving LEADER ends it for good (`end`), so nothing can reopen a term after a
 * step-down or shutdown has begun.
 *
 * While it lives, a term can be suspended and reopened: the lease lapsed with no check
 * to renew it (the term ends, the loop checks at once), or the session died (the term
 * ends at once, before the loop has even run). A successful ownership check renews the
 * lease and, if the term was suspended by a lapse, opens a new term with the same epoch:
 * the lock was never lost.
 */
import type { Clock } from '../core/clock.js';
import { Lease } from '../core/lease.js';
import type { Safety } from '../core/safety.js';
import { type Term, TermEndedError } from '../core/term.js';

/** What an acquisition proved: a time no later than the grant, under which settings, with which epoch. */
export interface Grant {
  /** A clock time no later than the grant (the lease counts from it). */
  readonly sentAt: number;
  readonly safety: Safety;
  /** The fencing epoch bumped for this acquisition, or null without fencing. */
  readonly epoch: bigint | null;
}

/** Told about every term this lock opens (runners, waitForLeadership, onAcquired). */
export interface TermEvents {
  opened(term: Term): void;
  /** The lease was renewed (isLeader may have turned true again without a new term). */
  renewed(): void;
}

/** Per-lock term numbering, shared by every Leadership of the lock. */
export class TermIds {
  private next = 1;
  take(): number {
    return this.next++;
  }
}

export class Leadership {
  private active: { term: Term; controller: AbortController } | null = null;
  /** The lease behind `isLeader` (core/lease.ts): its timer suspends the term when it runs out. */
  private readonly lease: Lease;
  private ended = false;
  private current: Safety;
  /** onAcquired is still owed for this acquisition: it goes with the first term that opens. */
  reportOnOpen = false;
  readonly epoch: bigint | null;

  constructor(
    grant: Grant,
    clock: Clock,
    private readonly ids: TermIds,
    private readonly events: TermEvents,
    /** The lease ran out unrenewed (the term has just been suspended): check now. */
    private readonly onLapse: () => void,
    /** The server the lock is held on (Term.host). */
    private readonly host: string,
  ) {
    this.epoch = grant.epoch;
    this.current = grant.safety;
    this.lease = new Lease(clock, () => {
      if (this.ended) return;
      this.closeTerm('lease expired before a check renewed it (leader work is suspended)');
      this.onLapse();
    });
    this.leaseEnd = grant.sentAt + grant.safety.leaseMs;
  }

  /** The lease's end: set when the lifecycle begins (the timer with it), pushed by each renewal. */
  private leaseEnd: number;

  /**
   * Called once the lifecycle is in its LEADER phase: open the first term and arm the
   * lease timer. A grant whose lease already ran out (a slow epoch bump, a frozen
   * process) opens no term: the lapse timer fires at once and the next check decides.
   */
  begin(): void {
    this.lease.set(this.leaseEnd);
    if (this.leaseValid()) this.open();
  }

  /** The open term, or null while suspended or after the end. */
  get term(): Term | null {
    return this.active?.term ?? null;
  }

  /** A term is open and the lease has not run out (read from the clock at each call). */
  get valid(): boolean {
    return this.active !== null && this.leaseValid();
  }

  get safety(): Safety {
    return this.current;
  }

  /** When the lease ends (or ended), on the lock's clock. */
  get leaseExpiresAt(): number {
    return this.leaseEnd;
  }

  /** A successful ownership check sent at `sentAt` renews the lease; a suspended term reopens. */
  renew(sentAt: number, safety: Safety = this.current): void {
    if (this.ended) return;
    this.current = safety;
    this.leaseEnd = Math.max(this.leaseEnd, sentAt + safety.leaseMs);
    this.lease.set(this.leaseEnd);
    if (!this.active && this.leaseValid()) this.open();
    else this.events.renewed();
  }

  /** End the term but keep the leadership: a later renewal may reopen it. */
  suspend(why: string): void {
    this.closeTerm(why);
  }

  /** End for good: the term ends now and no term opens again. Idempotent. */
  end(why: string): void {
    if (this.ended) return;
    this.ended = true;
    this.lease.set(null);
    this.closeTerm(why);
  }

  private leaseValid(): boolean {
    return this.lease.valid();
  }

  private open(): void {
    const controller = new AbortController();
    const term: Term = {
      id: this.ids.take(),
      acquiredAt: new Date(),
      signal: controller.signal,
      epoch: this.epoch,
      host: this.host,
    };
    this.active = { term, controller };
    this.events.opened(term);
  }

  private closeTerm(why: string): void {
    const a = this.active;
    if (!a) return;
    this.active = null;
    a.controller.abort(new TermEndedError(a.term.id, why));
  }
}
