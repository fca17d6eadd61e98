/**
 * `handoverTo(id)` on the lifecycle's side (docs/choosing-the-leader.md): check that the
 * candidate waits, end the term, and have the releasing phase name it in its `released`
 * event (release.ts, succession.ts). One handover at a time: from the call until the
 * release carries it, another call, or a stepDown, waits its turn or is refused.
 */
import { deferred, sleep } from '../core/clock.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import type { MailView, Phase, PhaseOf, Release } from './phase.js';
import { type Handover, newRelease } from './phase.js';
import { handoverError } from './succession.js';

/** What a handover reads and asks of the lifecycle. */
export interface HandingOverHost {
  phase(): Phase;
  /** The lock's state, for messages. */
  state(): string;
  readonly mail: MailView;
  /** Ask the loop for this release (the lifecycle puts it in the request box and wakes the loop). */
  release(release: Release): void;
}

export class HandingOver {
  /** A handover whose candidate is being checked, until its release carries it. */
  checking: { readonly to: string; readonly done: Promise<void> } | null = null;

  constructor(
    private readonly o: ResolvedOptions,
    private readonly host: HandingOverHost,
  ) {}

  /**
   * Hand leadership to the waiting candidate `to` (succession.ts): the term ends, its runs
   * drain (within `callbackTimeoutMs`, else the session is closed by force), then the
   * release names `to`. Resolves once `to` holds the lock; rejects if this lock is not a
   * leader free to hand over, if `to` does not wait (with `queueWithinMs`: has not queued
   * within that long), or if it does not take the lock within `timeoutMs` of the unlock.
   */
  async handoverTo(to: string, timeoutMs: number, queueWithinMs: number): Promise<void> {
    const { mail } = this.host;
    const busy = (): Error | null => {
      const p = this.host.phase();
      if (mail.stop) return handoverError(`cannot hand over to "${to}": the lock is shutting down`);
      const pending = this.checking ?? (p.kind === 'releasing' ? p.release.handover : null);
      if (pending !== null && pending !== claim) {
        return handoverError(`cannot hand over to "${to}": a handover to "${pending.to}" is in progress`);
      }
      if (p.kind === 'releasing' || mail.stepDown) {
        return handoverError(`cannot hand over to "${to}": a stepDown is under way`);
      }
      if (p.kind !== 'leader' || p.leadership.term === null) {
        return handoverError(
          `cannot hand over to "${to}": this lock is not the leader (state ${this.host.state()})`,
        );
      }
      return null;
    };
    const checked = deferred<void>();
    const claim = { to, done: checked.promise };
    const early =
      busy() ?? (to === this.o.id ? handoverError(`cannot hand over to "${to}": that is this lock`) : null);
    if (early) throw early;
    this.checking = claim; // until the release carries it (a second call meanwhile is refused)
    try {
      await this.awaitCandidate(to, queueWithinMs, busy);
    } finally {
      this.checking = null;
      checked.resolve();
    }
    const p = this.host.phase() as PhaseOf<'leader'>;
    p.leadership.end(`handover to ${to}`);
    const handover: Handover = { to, timeoutMs, outcome: null };
    const release = newRelease(this.o.clock.now() + this.o.callbackTimeoutMs, handover);
    const d = deferred<void>();
    release.waiters.push(d);
    this.host.release(release);
    await d.promise;
    const outcome = handover.outcome;
    if (outcome === 'taken') return;
    throw (
      outcome ??
      handoverError(
        `handover to "${to}" failed: ${release.expired?.message ?? 'the release did not complete'}`,
        release.expired,
      )
    );
  }

  /** Until the candidate `to` waits (`queueWithinMs`: it may take that long to queue); throws why not. */
  private async awaitCandidate(to: string, queueWithinMs: number, busy: () => Error | null): Promise<void> {
    const session = (this.host.phase() as PhaseOf<'leader'>).session;
    const { clock } = this.o;
    const queuedBy = clock.now() + queueWithinMs;
    for (;;) {
      let ready: boolean;
      try {
        const s = await session.channel.successor(to);
        // poll mode: a candidate is idle between attempts (its session open); it hears the release
        ready = this.o.acquireMode === 'wait' ? s.waits : s.connected;
      } catch (err) {
        throw handoverError(`cannot hand over to "${to}": asking whether it waits failed`, err);
      }
      const now = busy();
      if (now) throw now;
      if (ready) break;
      if (clock.now() >= queuedBy)
        throw handoverError(`cannot hand over: no candidate "${to}" is waiting for the lock`);
      await sleep(clock, 2);
    }
  }
}
