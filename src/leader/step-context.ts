/** What the steps (steps.ts, takeover.ts, release-steps.ts) need from the loop that runs them. */
import type { Input } from './fsm.js';
import type { Phase } from './phase.js';
import type { Session } from './session.js';

/** What the steps need from the loop. */
export interface StepContext {
  /** A signal aborted by the loop's next wake-up. */
  arm(): AbortSignal;
  /** Open a session (wired to wake the loop when it dies); `signal` abandons the attempt (a shutdown). */
  open(signal: AbortSignal): Promise<Session>;
  /**
   * Hand the loop an input that changes the data of `phase`, not its state (fsm.ts: an
   * attempt's session, its takeover delay); resolves with the phase that follows, which the
   * step goes on with. A step never writes its phase itself.
   */
  advance<P extends Phase>(phase: P, input: Input): Promise<P>;
}
