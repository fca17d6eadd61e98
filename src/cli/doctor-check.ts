/** One doctor check's outcome (doctor-checks.ts runs them). */
export type Verdict = 'ok' | 'warn' | 'fail';

export interface Check {
  readonly id: string;
  readonly verdict: Verdict;
  readonly reason: string;
  /** What to do about a warn or a fail. */
  readonly fix?: string;
}
