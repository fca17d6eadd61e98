/**
 * Who leads, as a watch knows it: the lock's holder, from the events on the key's channel
 * (handover.ts: `acquired` is committed by the statement that grants the lock, `released` by
 * a clean release before its unlock) and from reading `pg_locks` (at connect, then every
 * `healthIntervalMs`: a holder that died sends nothing). Pure bookkeeping, no I/O.
 */
import { applicationName } from '../core/connect.js';
import type { HandoverEvent } from '../leader/handover.js';

/** The holder of the watched lock. */
export interface WatchedLeader {
  /**
   * The holder's candidate id (its `LeaderLock` `id`). A holder found by reading `pg_locks`
   * is known by its `application_name`, which PostgreSQL cuts to 63 bytes: for a longer id,
   * the id cut there; for a session that is not a pgleaderlock lock, its raw application_name.
   */
  readonly id: string;
  /**
   * When it took the lock, as closely as the watch can tell. For a grant the watch heard
   * announced: the moment it heard it (milliseconds after the grant). For a holder that
   * already held the lock when the watch connected, or that the watch learned of only by
   * reading `pg_locks`: the start of the holder's database session, the earliest the grant
   * can have been (PostgreSQL does not record when a lock was granted; a follower that
   * queued for an hour shows an hour too early).
   */
  readonly since: Date;
}

/** What `pg_locks` says holds the lock now. */
export interface HolderRow {
  readonly id: string;
  readonly since: Date;
}

interface Known {
  readonly leader: WatchedLeader;
  /** The holder's session token, from its `acquired` event (null: learned by a read). */
  readonly session: string | null;
}

/** Two ids that name the same candidate, one of them possibly cut to application_name's 63 bytes. */
function sameCandidate(a: string, b: string): boolean {
  return a === b || applicationName(a) === applicationName(b);
}

export class LeaderView {
  private known: Known | null = null;
  /**
   * Counts the `acquired`/`released` events applied. A read whose answer arrives after an
   * event that was delivered while it ran may predate that event: its caller reads again.
   */
  seq = 0;

  get leader(): WatchedLeader | null {
    return this.known?.leader ?? null;
  }

  /** Apply an event from the key's channel; true if `leader` changed. Other kinds change nothing. */
  event(e: HandoverEvent, now: Date): boolean {
    if (e.kind !== 'acquired' && e.kind !== 'released') return false;
    this.seq += 1;
    const k = this.known;
    const session = e.session === '' ? null : e.session; // an older version's plain announcement
    const same =
      k !== null &&
      sameCandidate(k.leader.id, e.id) &&
      (k.session === null || session === null || k.session === session);
    if (e.kind === 'released') {
      // only the current holder's release ends it (a release heard after a read that already
      // showed the next holder is old news)
      if (!same) return false;
      this.known = null;
      return true;
    }
    if (same && k !== null) {
      // the grant a read already showed: keep its `since`, learn its session
      if (k.session === null && session !== null) this.known = { leader: k.leader, session };
      return false;
    }
    this.known = { leader: { id: e.id, since: now }, session };
    return true;
  }

  /** Apply what `pg_locks` says now; true if `leader` changed. */
  read(holder: HolderRow | null): boolean {
    const k = this.known;
    if (holder === null) {
      if (k === null) return false;
      this.known = null;
      return true;
    }
    if (k !== null && sameCandidate(k.leader.id, holder.id)) return false;
    this.known = { leader: { id: holder.id, since: holder.since }, session: null };
    return true;
  }

  /** Forget the leader (the watch cannot know any more); true if there was one. */
  clear(): boolean {
    const had = this.known !== null;
    this.known = null;
    return had;
  }
}
