/**
 * Who leads, as a watch knows it: the lock's holder, from the events on the key's channel
 * (handover.ts: `acquired` is committed by the statement that grants the lock, `released` by
 * a clean release before its unlock) and from reading `pg_locks` (at connect, then every
 * `healthIntervalMs`: a holder that died sends nothing). Pure bookkeeping, no I/O.
 */

import type { HandoverEvent } from '../core/handover.js';
import { applicationName } from '../core/identity.js';

/** The holder of the watched lock. */
export interface WatchedLeader {
  /**
   * The holder's candidate id (its `LeaderLock` `id`), whole whatever its length or
   * alphabet (core/identity.ts); for a session that is not a pgleaderlock lock, its raw
   * application_name.
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
  /** Its application_name, which names a candidate exactly (core/identity.ts). */
  readonly name: string;
  readonly since: Date;
}

interface Known {
  readonly leader: WatchedLeader;
  /** Its application_name (core/identity.ts): what an event's id and a read are matched by. */
  readonly name: string;
  /** The holder's session token, from its `acquired` event (null: learned by a read). */
  readonly session: string | null;
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
    const name = applicationName(e.id);
    const same =
      k !== null && k.name === name && (k.session === null || session === null || k.session === session);
    if (e.kind === 'released') {
      // only the current holder's release ends it (a release heard after a read that already
      // showed the next holder is old news)
      if (!same) return false;
      this.known = null;
      return true;
    }
    if (same && k !== null) {
      // the grant a read already showed: keep its `since`, learn its session
      if (k.session === null && session !== null) this.known = { leader: k.leader, name, session };
      return false;
    }
    this.known = { leader: { id: e.id, since: now }, name, session };
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
    if (k !== null && k.name === holder.name) return false;
    this.known = { leader: { id: holder.id, since: holder.since }, name: holder.name, session: null };
    return true;
  }

  /** Forget the leader (the watch cannot know any more); true if there was one. */
  clear(): boolean {
    const had = this.known !== null;
    this.known = null;
    return had;
  }
}
