import type { LeaderElection } from 'pgleaderlock';

/** Where messages come from and go to: a table and a broker in production, arrays in a test. */
export interface OutboxPorts {
  /** The oldest message not sent yet, or null when there is none. */
  next(signal: AbortSignal): Promise<string | null>;
  send(message: string, signal: AbortSignal): Promise<void>;
  /** Wait for more messages; resolves early when `signal` aborts. */
  idle(signal: AbortSignal): Promise<void>;
}

/**
 * Leader-only work: while this replica leads, send the outbox's messages one at a time, and
 * stop the moment leadership ends. `leader()` says who leads, so that requests can be
 * forwarded to it. Typed against `LeaderElection`, so a test can pass a `FakeLeaderLock`.
 */
export function runOutbox(lock: LeaderElection, ports: OutboxPorts): { leader(): string | null } {
  let leader: string | null = null;
  lock.onAcquired(() => {
    leader = lock.id;
  });
  lock.onNewLeader((id) => {
    leader = id;
  });
  lock.onLost(() => {
    leader = null;
  });
  lock.runWhileLeader(async (term) => {
    while (!term.signal.aborted) {
      const message = await ports.next(term.signal);
      if (message === null) await ports.idle(term.signal);
      else await ports.send(message, term.signal);
    }
  });
  return { leader: () => leader };
}
