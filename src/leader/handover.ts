/**
 * Proof that the previous holder's work has stopped (docs/safety.md, "Takeover delay" and
 * "Proof of drain"). Every lock session listens on its key's channel. Three events are
 * sent there, each committed by the statement that makes it true:
 *  - `acquired`: committed by the statement that grants the lock, so before the new
 *    holder's term can open;
 *  - `released`: committed by a releasing leader after its `runWhileLeader` runs returned
 *    and before its `pg_advisory_unlock`, in the same round trip;
 *  - `drained`: sent by a leader that lost its session uncleanly (terminated, timed out,
 *    reset) once its runs of the lost term have returned, from its next session, before it
 *    queues again. It names the lost session (its marker token and backend pid).
 * A session receives the events committed after its LISTEN in commit order, and a waiting
 * session receives those committed before its grant together with the grant. So a new
 * holder whose last `acquired`/`released` event before its own `acquired` is a `released`
 * knows that every holder before it stopped its work before letting go. Otherwise its
 * previous holder is the session of the last `acquired` it saw (or, if it saw none, the
 * backend that held the lock when it connected); a `drained` naming exactly that session
 * proves that holder's work has stopped too, and ends the takeover delay. Anything else (a
 * `drained` of another session, or of an earlier term of the same candidate, nothing seen
 * at all: a server restart, the first holder ever) is no proof.
 */

/** An event on a key's channel. `session` is the sending lock session's marker token. */
export type HandoverEvent =
  | { readonly kind: 'acquired' | 'released'; readonly id: string; readonly session: string }
  | {
      readonly kind: 'drained';
      readonly id: string;
      readonly session: string;
      /** The lost session whose runs have returned: its marker token and backend pid. */
      readonly lost: { readonly session: string; readonly pid: number };
    };

/** A session as other sessions know it: its marker token (from its events) and backend pid. */
export interface SessionIdentity {
  readonly session: string;
  readonly pid: number;
}

export function payload(kind: 'acquired' | 'released', id: string, session: string): string {
  return JSON.stringify({ e: kind, id, s: session });
}

export function drainedPayload(id: string, session: string, lost: SessionIdentity): string {
  return JSON.stringify({ e: 'drained', id, s: session, lost: lost.session, pid: lost.pid });
}

/** Parse a payload; an older version's plain-id announcement counts as `acquired`. Null if malformed. */
export function parseEvent(text: string): HandoverEvent | null {
  if (!text.startsWith('{')) return { kind: 'acquired', id: text, session: '' };
  try {
    const v = JSON.parse(text) as { e?: unknown; id?: unknown; s?: unknown; lost?: unknown; pid?: unknown };
    if (typeof v.id !== 'string' || typeof v.s !== 'string') return null;
    if (v.e === 'acquired' || v.e === 'released') return { kind: v.e, id: v.id, session: v.s };
    if (v.e === 'drained' && typeof v.lost === 'string' && v.lost !== '' && Number.isInteger(v.pid)) {
      return { kind: 'drained', id: v.id, session: v.s, lost: { session: v.lost, pid: v.pid as number } };
    }
    return null;
  } catch {
    return null;
  }
}

/** What one session has seen on its channel, in order. */
export class HandoverLog {
  /** The last `acquired` or `released` event (a `drained` changes no holder). */
  private last: HandoverEvent | null = null;
  private proof: boolean | null = null;
  /** Since this session's own grant: the holder before it, until its term opens. */
  private previous: { session: string } | { pid: number } | null = null;
  /** The lost sessions announced drained lately (a few; the newest last). */
  private readonly drained: SessionIdentity[] = [];

  constructor(
    private readonly session: string,
    /** The backend holding the lock when this session connected (null: nobody). */
    private readonly holderAtConnect: () => number | null,
  ) {}

  see(event: HandoverEvent): void {
    if (event.kind === 'drained') {
      this.drained.push(event.lost);
      if (this.drained.length > 8) this.drained.shift();
      return;
    }
    if (event.kind === 'acquired' && event.session === this.session) {
      this.proof = this.last?.kind === 'released';
      const before = this.last;
      const atConnect = this.holderAtConnect();
      this.previous =
        before?.kind === 'acquired' && before.session !== ''
          ? { session: before.session }
          : before === null && atConnect !== null
            ? { pid: atConnect }
            : null;
    }
    this.last = event;
  }

  /** After a grant (its own `acquired` seen): was the handover proven clean? Read once. */
  takeProof(): boolean {
    const clean = this.proof === true;
    this.proof = null;
    return clean;
  }

  /**
   * Under the takeover delay: has the holder before this session's grant announced that
   * the runs of its lost term have returned? True only for a `drained` naming exactly
   * that holder's session (by its token, or by the backend pid that held the lock at
   * connect when no `acquired` was seen since).
   */
  previousDrained(): boolean {
    const p = this.previous;
    if (p === null) return false;
    return this.drained.some((d) => ('session' in p ? d.session === p.session : d.pid === p.pid));
  }
}
