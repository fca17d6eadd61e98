/**
 * What a lock does with the events on its key's channel that are addressed to a leader or
 * to a candidate (docs/choosing-the-leader.md):
 *  - `waiting` (a candidate joined, with its priority): a leader whose priority is lower
 *    hands over to it (succession.ts); a term that opens first asks who queued before it;
 *  - `resign` / `handover` (anyone who may NOTIFY, e.g. the CLI): the leader steps down
 *    (poll mode: hands over to a known candidate, if one is still there), or hands over to
 *    the named candidate, its release bounded by `callbackTimeoutMs`;
 *  - `released` naming this candidate as successor (poll mode): attempt at once;
 *  - `acquired` by another candidate (poll mode): say again that this one waits, with its
 *    priority, so that the new leader knows it.
 * Failures are logged (`handover_failed`); a forced release is reported by the release.
 */

import { sleep } from '../core/clock.js';
import { toError } from '../core/errors.js';
import type { HandoverEvent } from '../core/handover.js';
import { HANDOVER_TIMEOUT_MS } from '../core/handover.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import type { Session } from './session.js';

/** What the requests act on: the lifecycle (lifecycle.ts). */
export interface RequestTarget {
  readonly state: string;
  /** The leader's session while a term is open, else null. */
  leaderSession(): Session | null;
  handoverTo(to: string, timeoutMs: number, queueWithinMs?: number): Promise<void>;
  stepDown(deadline: number | null): Promise<void>;
  /** Poll mode: attempt at once (a handover named this candidate). */
  invite(from: string): void;
}

/**
 * Wait mode: a candidate that announced itself may take a few round trips more to queue;
 * a leader looks at the queue again this often, for this long (a higher-priority candidate
 * that dies before it queues is then no longer waited for).
 */
const QUEUE_POLL_MS = 5;
const QUEUE_WITHIN_MS = 1000;
/** Wait mode: after a term opens, the queue is read again after these delays (a candidate that announced itself before the term opened, unheard). */
const RECHECK_MS = [100, 1000];
/** A candidate that said it joined (wait mode), worth waiting for to queue until `until` (clock time). */
interface Announcer {
  readonly id: string;
  readonly until: number;
}

/** Candidates remembered (their last announced priority), newest last. */
const REMEMBERED = 256;

export class Requests {
  /** Candidates heard of (a `waiting` or `acquired` event): id → priority. */
  private readonly candidates = new Map<string, number>();
  /** Sessions that had a term opened (their later terms have heard every announcement). */
  private readonly opened = new WeakSet<Session>();
  /**
   * Wait mode: the last candidate with a higher priority heard announcing itself while this
   * lock did not lead (a follower, or pending in its takeover delay). It may not have queued
   * yet when the next term opens: that term's queue read waits for it, until
   * QUEUE_WITHIN_MS after it was heard (a candidate that left before it queued is not
   * waited for long after).
   */
  private announcedMeanwhile: Announcer | null = null;
  /** A reconsideration is running; `again`: run one more after it (for this announcer, if any). */
  private busy = false;
  private again: { announcer: Announcer | null } | null = null;

  constructor(
    private readonly o: ResolvedOptions,
    private readonly target: RequestTarget,
  ) {}

  heard(event: HandoverEvent, session: Session): void {
    switch (event.kind) {
      case 'waiting':
        this.remember(event.id, event.priority);
        if (event.id === this.o.id || event.priority <= this.o.priority) return;
        if (this.o.acquireMode !== 'wait') this.reconsider(null);
        else {
          const announcer = { id: event.id, until: this.o.clock.now() + QUEUE_WITHIN_MS };
          if (this.target.leaderSession() === null) this.announcedMeanwhile = announcer;
          else this.reconsider(announcer);
        }
        return;
      case 'acquired':
        this.remember(event.id, event.priority);
        if (event.id === this.announcedMeanwhile?.id) this.announcedMeanwhile = null; // it queued: it led
        // poll mode: a follower is idle between attempts; the new leader must learn its priority
        if (this.o.acquireMode === 'poll' && event.id !== this.o.id && this.target.leaderSession() === null) {
          session.channel.announceWaiting().catch(() => {}); // a dead session is reported by the loop
        }
        return;
      case 'released':
        // poll mode: a handover names this candidate: attempt now, not at the end of a back-off
        if (this.o.acquireMode === 'poll' && event.directive?.to === this.o.id) this.target.invite(event.id);
        return;
      case 'resign':
        if (this.target.leaderSession() === null) return;
        this.log('resign_requested', {});
        this.resign();
        return;
      case 'handover':
        if (this.target.leaderSession() === null) return;
        this.log('handover_requested', { to: event.to });
        this.handover(event.to);
        return;
      case 'drained':
        return;
    }
  }

  /**
   * A term opened: a candidate with a higher priority that queued before it takes over now.
   * A candidate heard announcing itself before the term opened may not have queued yet: the
   * read waits for it, as for one heard while leading. Only a session's first term can have
   * missed an announcement (one sent before its LISTEN): then the queue is read, and in
   * wait mode read again a little later too (an announcer that had not queued yet). A later
   * term on the same session has heard every announcement since: it reads the queue only
   * if it knows of a higher priority.
   */
  termOpened(): void {
    const session = this.target.leaderSession();
    if (session === null) return;
    const announcer = this.announcedMeanwhile;
    this.announcedMeanwhile = null;
    const first = !this.opened.has(session);
    this.opened.add(session);
    // sent from a 0 ms timer of the clock: the callbacks queued as the term opened
    // (onAcquired) start first, not behind the read's send, unless an earlier callback is
    // still running (they run one at a time); the read waits for their synchronous part. The
    // clock's timer, not setImmediate: on an injected clock (the simulation's) a timer of the
    // runtime's own fired only at the clock's next event, up to 105 ms later there
    const read = (): void =>
      void this.o.clock.setTimeout(() => {
        if (this.target.leaderSession() === session) this.reconsider(announcer);
      }, 0);
    if (!first) {
      if ([...this.candidates].some(([id, p]) => id !== this.o.id && p > this.o.priority)) read();
      return;
    }
    read();
    if (this.o.acquireMode !== 'wait') return;
    for (const ms of RECHECK_MS) {
      const timer = this.o.clock.setTimeout(() => {
        if (this.target.leaderSession() === session) this.reconsider(null);
      }, ms);
      session.onDeath(() => this.o.clock.clearTimeout(timer));
    }
  }

  /**
   * Hand over to the best waiting candidate with a priority above this one's, if any: the
   * highest priority, then the longest wait (wait mode: from the queue itself; poll mode:
   * from the announcements, each checked to still have a session). `announcer`: a
   * candidate that just said it joined (wait mode: it is given a moment to queue).
   */
  private reconsider(announcer: Announcer | null): void {
    if (this.busy) {
      this.again = { announcer: announcer ?? this.again?.announcer ?? null };
      return;
    }
    this.busy = true;
    this.pick(announcer)
      .then((best) => {
        if (best === null || this.target.leaderSession() === null) return;
        this.log('handover_preferred', { to: best.id, priority: best.priority });
        return this.target.handoverTo(best.id, HANDOVER_TIMEOUT_MS);
      })
      .catch((err: unknown) => this.failed('handover', toError(err)))
      .finally(() => {
        this.busy = false;
        const again = this.again;
        this.again = null;
        if (again !== null) this.reconsider(again.announcer);
      });
  }

  private async pick(announcer: Announcer | null): Promise<{ id: string; priority: number } | null> {
    const { clock } = this.o;
    const above = (c: { id: string; priority: number }): boolean =>
      c.id !== this.o.id && c.priority > this.o.priority;
    if (this.o.acquireMode === 'wait') {
      const until = announcer?.until ?? 0;
      for (;;) {
        const session = this.target.leaderSession();
        if (session === null) return null;
        const queued = await session.channel.queued();
        const best = queued.filter(above).sort((a, b) => b.priority - a.priority)[0] ?? null;
        // the announcer is worth waiting for only while it has not queued yet
        if (best !== null || announcer === null || queued.some((c) => c.id === announcer.id)) return best;
        if (clock.now() >= until) return null;
        // ended with the session (a shutdown closes it): no timer left behind
        const ended = new AbortController();
        const off = session.onDeath(() => ended.abort());
        await sleep(clock, QUEUE_POLL_MS, ended.signal);
        off();
      }
    }
    return this.pickConnected(above);
  }

  /**
   * Step down. Poll mode: nobody is queued, and followers attempt at their own pace, so a
   * plain release would mostly be taken back by this leader: hand over instead to a known
   * candidate that still has a session (the highest priority first), if there is one.
   */
  private resign(): void {
    const deadline = this.o.clock.now() + this.o.callbackTimeoutMs;
    const stepDown = (): Promise<void> => this.target.stepDown(deadline);
    const next = this.o.acquireMode === 'poll' ? this.pickConnected(() => true) : Promise.resolve(null);
    next
      .then((c) => (c === null ? stepDown() : this.target.handoverTo(c.id, HANDOVER_TIMEOUT_MS)))
      .catch((err: unknown) => this.failed('resign', toError(err)));
  }

  /** Poll mode: the best known candidate passing `accept` that still has a session (the gone are forgotten). */
  private async pickConnected(
    accept: (c: { id: string; priority: number }) => boolean,
  ): Promise<{ id: string; priority: number } | null> {
    const known = [...this.candidates]
      .map(([id, priority]) => ({ id, priority }))
      .filter((c) => c.id !== this.o.id && accept(c))
      .sort((a, b) => b.priority - a.priority);
    for (const c of known) {
      const session = this.target.leaderSession();
      if (session === null) return null;
      if ((await session.channel.successor(c.id)).connected) return c;
      this.candidates.delete(c.id); // gone
    }
    return null;
  }

  private handover(to: string): void {
    this.target
      .handoverTo(to, HANDOVER_TIMEOUT_MS)
      .catch((err: unknown) => this.failed('handover', toError(err)));
  }

  private remember(id: string, priority: number): void {
    this.candidates.delete(id);
    this.candidates.set(id, priority);
    if (this.candidates.size > REMEMBERED) {
      const oldest = this.candidates.keys().next().value;
      if (oldest !== undefined) this.candidates.delete(oldest);
    }
  }

  private failed(what: 'resign' | 'handover', error: Error): void {
    this.o.logger.warn({ event: `${what}_failed`, err: error }, `${what}_failed`);
  }

  private log(event: string, fields: Record<string, unknown>): void {
    this.o.logger.info({ event, ...fields }, event);
  }
}
