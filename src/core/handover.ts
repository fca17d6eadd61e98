/**
 * Proof that the previous holder's work has stopped (docs/safety.md, "Takeover delay" and
 * "Proof of drain"). Every lock session listens on its key's channel. Three events are
 * sent there, each committed by the statement that makes it true:
 *  - `acquired`: committed by the statement that grants the lock, so before the new
 *    holder's term can open;
 *  - `released`: committed by a releasing leader after its `runWhileLeader` runs returned
 *    and before the unlock that frees the key, in the same round trip, only while its
 *    backend holds the key (sql.ts `releaseSql`);
 *  - `drained`: sent by a leader that lost its session uncleanly (terminated, timed out,
 *    reset) once its runs of the lost term have returned, from its next session, before it
 *    queues again. It names the lost session (its marker token and backend pid).
 * A session receives the events committed after its LISTEN in commit order, and a waiting
 * session receives those committed before its grant together with the grant. So a new
 * holder whose last `acquired`/`released` event before its own `acquired` is a `released`
 * knows that every holder before it stopped its work before letting go. Otherwise its
 * previous holder is the session of the last `acquired` it saw, named by its marker token
 * and backend pid (or, if it saw none, the backend that held the lock when it connected); a
 * `drained` naming exactly that session, token and pid, proves that holder's work has
 * stopped too, and ends the takeover delay. Anything else (a `drained` of another session,
 * or of an earlier term of the same candidate, an `acquired` without a pid (an older
 * version), nothing seen at all: a server restart, the first holder ever) is no proof (the
 * token alone is not: alike seeded `random`s draw equal tokens).
 */

import { checkId } from './identity.js';
import { show, timeoutOf } from './validate.js';

/** The default `timeoutMs` of a handover (`handoverTo`, a priority, a request). */
export const HANDOVER_TIMEOUT_MS = 5000;

/**
 * The longest `timeoutMs` of a handover. A directive whose deadline lies further ahead than
 * twice this is not one of ours (a forged event: docs/choosing-the-leader.md) and is ignored.
 */
export const MAX_HANDOVER_TIMEOUT_MS = 60_000;

/** `handoverTo(id, options)`'s arguments, checked: the handover's `timeoutMs` (1 to MAX_HANDOVER_TIMEOUT_MS). */
export function handoverTimeoutOf(id: unknown, options: unknown): number {
  if (typeof id !== 'string' || id.length === 0) {
    throw new TypeError(`handoverTo: id must be a non-empty string, received ${show(id)}`);
  }
  checkId('handoverTo: id', id); // no candidate can have another id

  const timeoutMs = timeoutOf('handoverTo', options) ?? HANDOVER_TIMEOUT_MS;
  if (timeoutMs === 0 || timeoutMs > MAX_HANDOVER_TIMEOUT_MS) {
    throw new RangeError(
      `handoverTo: timeoutMs must be between 1 and ${MAX_HANDOVER_TIMEOUT_MS}, received ${show(timeoutMs)}`,
    );
  }
  return timeoutMs;
}

/**
 * A handover to a named successor (succession.ts), carried by a `released` event. Times are
 * the server's, epoch milliseconds. While `to` has a session, a waiter granted the lock that
 * is not `to` yields it (sends `released` with the same directive, unlocks, queues again)
 * before its term opens: until `until`, and after that, until `backUntil`, to `back` (the
 * leader that handed over, queued again), which takes it then.
 */
export interface Directive {
  readonly to: string;
  readonly back: string | null;
  readonly until: number;
  readonly backUntil: number;
}

/** A handover to `to` about to be sent (its deadlines not yet known): `to` has `timeoutMs` to take the lock. */
export interface NewHandover {
  readonly to: string;
  readonly back: string | null;
  readonly timeoutMs: number;
}

/** An event on a key's channel. `session` is the sending lock session's marker token. */
export type HandoverEvent =
  | {
      readonly kind: 'acquired';
      readonly id: string;
      readonly session: string;
      readonly priority: number;
      /** The granted session's backend pid (null: an older version's event, which names no backend). */
      readonly pid: number | null;
    }
  | {
      readonly kind: 'released';
      readonly id: string;
      readonly session: string;
      /** A handover in progress (null: a plain release). */
      readonly directive: Directive | null;
    }
  | {
      readonly kind: 'drained';
      readonly id: string;
      readonly session: string;
      /** The lost session whose runs have returned: its marker token and backend pid. */
      readonly lost: { readonly session: string; readonly pid: number };
    }
  /** A candidate joined (its session LISTENs and is about to queue), with its priority. */
  | { readonly kind: 'waiting'; readonly id: string; readonly session: string; readonly priority: number }
  /** Anyone who may NOTIFY asks the leader to step down, or to hand over to `to`. */
  | { readonly kind: 'resign' }
  | { readonly kind: 'handover'; readonly to: string };

/** The kinds that change who holds the lock. */
type HolderEvent = Extract<HandoverEvent, { kind: 'acquired' | 'released' }>;

/** A session as other sessions know it: its marker token (from its events) and backend pid. */
export interface SessionIdentity {
  readonly session: string;
  readonly pid: number;
}

/** An `acquired` event names the granted session's backend `pid` too (the proof of drain matches token and pid). */
export function payload(
  kind: 'acquired' | 'released',
  id: string,
  session: string,
  priority = 0,
  pid: number | null = null,
): string {
  if (kind === 'released') return JSON.stringify({ e: kind, id, s: session });
  return JSON.stringify(
    pid === null
      ? { e: kind, id, s: session, p: priority }
      : { e: kind, id, s: session, p: priority, b: pid },
  );
}

/** A `released` event carrying a directive whose `until` is already known (a yield forwards it). */
export function forwardPayload(id: string, session: string, d: Directive): string {
  return JSON.stringify({ e: 'released', id, s: session, ...d });
}

export function waitingPayload(id: string, session: string, priority: number): string {
  return JSON.stringify({ e: 'waiting', id, s: session, p: priority });
}

export function drainedPayload(id: string, session: string, lost: SessionIdentity): string {
  return JSON.stringify({ e: 'drained', id, s: session, lost: lost.session, pid: lost.pid });
}

/** A request to the leader (the CLI's `resign` and `handover`). */
export function requestPayload(request: { to: string } | null): string {
  return JSON.stringify(request === null ? { e: 'resign' } : { e: 'handover', to: request.to });
}

const isInt = (v: unknown): v is number => Number.isSafeInteger(v);

/** Parse a payload; an older version's plain-id announcement counts as `acquired`. Null if malformed or unknown. */
export function parseEvent(text: string): HandoverEvent | null {
  if (!text.startsWith('{')) return { kind: 'acquired', id: text, session: '', priority: 0, pid: null };
  let v: {
    e?: unknown;
    id?: unknown;
    s?: unknown;
    lost?: unknown;
    pid?: unknown;
    p?: unknown;
    b?: unknown;
  } & Record<string, unknown>;
  try {
    v = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof v !== 'object' || v === null) return null;
  if (v.e === 'resign') return { kind: 'resign' };
  if (v.e === 'handover')
    return typeof v.to === 'string' && v.to !== '' ? { kind: 'handover', to: v.to } : null;
  if (typeof v.id !== 'string' || typeof v.s !== 'string') return null;
  const priority = isInt(v.p) ? v.p : 0;
  if (v.e === 'acquired')
    return { kind: 'acquired', id: v.id, session: v.s, priority, pid: isInt(v.b) ? v.b : null };
  if (v.e === 'waiting') return { kind: 'waiting', id: v.id, session: v.s, priority };
  if (v.e === 'released') {
    const { to, back, until, backUntil } = v;
    const directive =
      typeof to === 'string' &&
      to !== '' &&
      isInt(until) &&
      isInt(backUntil) &&
      (back === null || typeof back === 'string')
        ? { to, back, until, backUntil }
        : null;
    return { kind: 'released', id: v.id, session: v.s, directive };
  }
  if (v.e === 'drained' && typeof v.lost === 'string' && v.lost !== '' && isInt(v.pid)) {
    return { kind: 'drained', id: v.id, session: v.s, lost: { session: v.lost, pid: v.pid } };
  }
  return null;
}

/** What a grant learnt from the events before it: a proven clean handover, and a handover in progress. */
export interface GrantProof {
  readonly clean: boolean;
  readonly directive: Directive | null;
}

/** What one session has seen on its channel, in order. */
export class HandoverLog {
  /** The last `acquired` or `released` event (a `drained` changes no holder). */
  private last: HolderEvent | null = null;
  private proof: GrantProof | null = null;
  /** Since this session's own grant: the holder before it, until its term opens. */
  private previous: { session: string; pid: number | null } | { pid: number } | null = null;
  /** The lost sessions announced drained lately (a few; the newest last). */
  private readonly drained: SessionIdentity[] = [];
  /** The ids heard taking the lock (`acquired`) since this session's own last `released`. */
  private takenSinceRelease: Set<string> | null = null;

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
    if (event.kind !== 'acquired' && event.kind !== 'released') return; // changes no holder
    if (event.kind === 'released' && event.session === this.session) this.takenSinceRelease = new Set();
    else if (event.kind === 'acquired') this.takenSinceRelease?.add(event.id);
    if (event.kind === 'acquired' && event.session === this.session) {
      const last = this.last;
      this.proof =
        last?.kind === 'released'
          ? { clean: true, directive: last.directive }
          : { clean: false, directive: null };
      const before = this.last;
      const atConnect = this.holderAtConnect();
      this.previous =
        before?.kind === 'acquired' && before.session !== ''
          ? { session: before.session, pid: before.pid }
          : before === null && atConnect !== null
            ? { pid: atConnect }
            : null;
    }
    this.last = event;
  }

  /**
   * Whether `id` was heard taking the lock after this session's own last release: a
   * handover's successor took it, even if it has already given it up again (to a candidate
   * of a higher priority, this one included) before a look at `pg_locks` could see it hold.
   */
  tookOver(id: string): boolean {
    return this.takenSinceRelease?.has(id) === true;
  }

  /**
   * After a grant (its own `acquired` seen): was the handover proven clean, and was a
   * handover to a named successor in progress? Read once.
   */
  takeProof(): GrantProof {
    const proof = this.proof ?? { clean: false, directive: null };
    this.proof = null;
    return proof;
  }

  /**
   * Under the takeover delay: has the holder before this session's grant announced that
   * the runs of its lost term have returned? True only for a `drained` naming exactly
   * that holder's session (by its token and backend pid, or by the backend pid that held
   * the lock at connect when no `acquired` was seen since).
   */
  previousDrained(): boolean {
    return this.drainOf() !== null;
  }

  /** The `drained` that proves the holder before this session's grant drained (null: none), for the log. */
  drainOf(): {
    previous: { session: string; pid: number | null } | { pid: number };
    drained: SessionIdentity;
  } | null {
    const p = this.previous;
    if (p === null) return null;
    const d = this.drained.find((d) => d.pid === p.pid && (!('session' in p) || d.session === p.session));
    return d === undefined ? null : { previous: p, drained: d };
  }
}
