/**
 * A voluntary release (`stepDown()`, or `shutdown()` while leader): who waits for it, and
 * the deadline past which its session is closed by force. The RELEASING phase carries it
 * (phase.ts); its timer acts on that phase only, so once the phase is over it does nothing.
 */
import { ShutdownError } from '../core/errors.js';
import type { ResolvedOptions } from '../core/lock-options.js';
import type { Phase, Release } from './phase.js';

/** Arms and settles the releases of one lifecycle. */
export class Releases {
  constructor(
    private readonly o: Pick<ResolvedOptions, 'clock' | 'logger'>,
    /** The lifecycle's phase now. */
    private readonly phase: () => Phase,
    /** Wake the loop. */
    private readonly wake: () => void,
  ) {}

  /** Arm (or re-arm) a release's deadline: past it, the releasing phase's session is closed by force. */
  bound(release: Release, deadline: number | null): void {
    const { clock } = this.o;
    release.deadline = deadline;
    if (release.timer !== null) clock.clearTimeout(release.timer);
    release.timer = null;
    const p = this.phase();
    if (deadline === null || p.kind !== 'releasing' || p.release !== release) return;
    release.timer = clock.setTimeout(
      () => {
        release.timer = null;
        const now = this.phase();
        if (now.kind !== 'releasing' || now.release !== release) return; // that phase is over
        const what = now.after === 'follow' ? 'stepDown' : 'shutdown';
        release.expired = new ShutdownError(
          `${what} did not finish within its timeout; the lock's session was closed by force`,
        );
        this.o.logger.warn({ event: 'forced_close', what }, 'forced_close');
        now.session.destroy(release.expired);
        this.wake();
      },
      Math.max(0, deadline - clock.now()),
    );
  }

  /** The release is over (however it ended): disarm its timer and resolve its waiters. */
  settle(release: Release | null): void {
    if (!release) return;
    if (release.timer !== null) this.o.clock.clearTimeout(release.timer);
    release.timer = null;
    for (const w of release.waiters.splice(0)) w.resolve();
  }
}
