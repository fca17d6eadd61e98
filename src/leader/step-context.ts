/** What the steps (steps.ts, takeover.ts, release-steps.ts) need from the loop that runs them. */
import type { TakeoverDelay } from './phase.js';
import type { Session } from './session.js';

/** What the steps need from the loop. */
export interface StepContext {
  /** A signal aborted by the loop's next wake-up. */
  arm(): AbortSignal;
  /** Open a session (wired to wake the loop when it dies); `signal` abandons the attempt (a shutdown). */
  open(signal: AbortSignal): Promise<Session>;
  /** A takeover delay began (the phase carries it). */
  delayed(delay: TakeoverDelay): void;
}
