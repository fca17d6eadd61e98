/**
 * Proof of a clean handover (docs/safety.md, "Takeover delay"). Every lock session
 * listens on its key's channel. Two events are sent there, each committed by the statement
 * that makes it true:
 *  - `acquired`: committed by the statement that grants the lock, so before the new
 *    holder's term can open;
 *  - `released`: committed by a releasing leader after its `runWhileLeader` runs returned
 *    and before its `pg_advisory_unlock`, in the same round trip.
 * A session receives the events committed after its LISTEN in commit order, and a waiting
 * session receives those committed before its grant together with the grant. So a new
 * holder whose last event before its own `acquired` is a `released` knows that every
 * holder before it stopped its work before letting go; anything else (another holder's
 * `acquired`, or nothing seen at all: connected after the release, a server restart, the
 * first holder ever) is not proof.
 */

/** An event on a key's channel. `session` is the sending lock session's marker token. */
export interface HandoverEvent {
  readonly kind: 'acquired' | 'released';
  readonly id: string;
  readonly session: string;
}

export function payload(kind: HandoverEvent['kind'], id: string, session: string): string {
  return JSON.stringify({ e: kind, id, s: session });
}

/** Parse a payload; an older version's plain-id announcement counts as `acquired`. */
export function parseEvent(text: string): HandoverEvent | null {
  if (!text.startsWith('{')) return { kind: 'acquired', id: text, session: '' };
  try {
    const v = JSON.parse(text) as { e?: unknown; id?: unknown; s?: unknown };
    if ((v.e !== 'acquired' && v.e !== 'released') || typeof v.id !== 'string' || typeof v.s !== 'string') {
      return null;
    }
    return { kind: v.e, id: v.id, session: v.s };
  } catch {
    return null;
  }
}

/** What one session has seen on its channel, in order. */
export class HandoverLog {
  private last: HandoverEvent | null = null;
  private proof: boolean | null = null;

  constructor(private readonly session: string) {}

  see(event: HandoverEvent): void {
    if (event.kind === 'acquired' && event.session === this.session) {
      this.proof = this.last?.kind === 'released';
    }
    this.last = event;
  }

  /** After a grant (its own `acquired` seen): was the handover proven clean? Read once. */
  takeProof(): boolean {
    const clean = this.proof === true;
    this.proof = null;
    return clean;
  }
}
