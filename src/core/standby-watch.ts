/**
 * A cluster with no primary (a failover in progress): the survey's connections to the
 * standbys are kept open and asked every `PRIMARY_POLL_MS` whether one was promoted (one
 * tiny statement per standby, no new connection, and no exponential back-off run up by
 * refusals). primary.ts hands them over in its `NoPrimaryError`.
 */
import type pg from 'pg';
import { type Clock, sleep } from './clock.js';
import { destroyClient } from './connect.js';

/** How often a follower asks the standbys whether one was promoted. */
export const PRIMARY_POLL_MS = 100;

const IN_RECOVERY = '/* pgleaderlock:survey */ SELECT pg_is_in_recovery() AS recovery';

/**
 * Open connections to the standbys of a cluster with no primary, asked every
 * `PRIMARY_POLL_MS` whether one was promoted. `promoted()` resolves true as soon as one is,
 * false when `signal` aborts or every connection failed (then: survey again).
 */
export class StandbyWatch {
  constructor(
    private readonly standbys: { label: string; client: pg.Client }[],
    private readonly o: { readonly clock: Clock; readonly queryTimeoutMs: number },
  ) {
    for (const s of standbys) s.client.on('error', () => {});
  }

  async promoted(signal: AbortSignal): Promise<boolean> {
    while (!signal.aborted && this.standbys.length > 0) {
      for (const s of [...this.standbys]) {
        try {
          const { rows } = await this.bounded(s.client.query<{ recovery: boolean }>(IN_RECOVERY), signal);
          if (rows[0]?.recovery === false) return true;
        } catch {
          // a stop does not wait for a statement in flight (a standby may hang): close() ends it
          if (signal.aborted) return false;
          destroyClient(s.client);
          this.standbys.splice(this.standbys.indexOf(s), 1);
        }
      }
      await sleep(this.o.clock, PRIMARY_POLL_MS, signal);
    }
    return false;
  }

  close(): void {
    for (const s of this.standbys.splice(0)) destroyClient(s.client);
  }

  /** `p` within queryTimeoutMs, or until `signal` aborts (the statement is left to close()). */
  private bounded<T>(p: Promise<T>, signal: AbortSignal): Promise<T> {
    let timer: unknown;
    let onAbort = (): void => {};
    p.catch(() => {}); // settles after the race is over when it lost
    return Promise.race([
      p,
      new Promise<never>((_, reject) => {
        timer = this.o.clock.setTimeout(() => reject(new Error('no answer')), this.o.queryTimeoutMs);
        onAbort = () => reject(new Error('stopped'));
        if (signal.aborted) onAbort();
        else signal.addEventListener('abort', onAbort, { once: true });
      }),
    ]).finally(() => {
      this.o.clock.clearTimeout(timer);
      signal.removeEventListener('abort', onAbort);
    });
  }
}
