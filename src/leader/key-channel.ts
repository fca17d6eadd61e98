/**
 * A lock session's key channel (handover.ts): it LISTENs from the moment the session is
 * prepared, records every event for the proof of a clean handover before anyone else hears
 * it, and sends this candidate's own: `waiting` (with its priority) when it joins and again
 * to a new leader (poll mode), `drained` after an unclean loss. It also answers the
 * questions a handover asks of the server: does a candidate hold the lock, wait for it,
 * have a session at all, and who is queued with which priority (succession.ts, requests.ts).
 */
import pg from 'pg';
import type { Connection } from '../core/connection.js';
import {
  drainedPayload,
  type HandoverEvent,
  type HandoverLog,
  parseEvent,
  type SessionIdentity,
  waitingPayload,
} from '../core/handover.js';
import { applicationName, idOfSession } from '../core/identity.js';
import { channelFor } from '../core/keys.js';
import type { SessionOptions } from './session-types.js';
import { priorityOf, QUEUED, SUCCESSOR } from './sql.js';

/** A handover's successor as the server sees it (sql.ts `SUCCESSOR`). */
export interface SuccessorState {
  readonly holds: boolean;
  readonly waits: boolean;
  /** It has a session at all (poll mode: idle between attempts). */
  readonly connected: boolean;
}

export class KeyChannel {
  private readonly name: string;
  /** Told each event, after it is recorded (onEvent). */
  private readonly listeners: ((event: HandoverEvent) => void)[] = [];

  constructor(
    private readonly conn: Connection,
    private readonly o: SessionOptions,
    /** The session's marker token: its events' `s`. */
    private readonly token: string,
    private readonly log: HandoverLog,
    /** The session's statement tag (sql.ts `StatementTag`): every statement shows this candidate's priority (and id), a leader's too. */
    private readonly tag: (sql: string) => string,
  ) {
    this.name = channelFor(o.key1, o.key2);
  }

  /**
   * LISTEN, and say this candidate joined, then run `then` (one round trip; its rows
   * returned). Recorded from here on: an event that arrives while the session is still
   * being opened (a leader's release right after this candidate said it joined) is part of
   * the proof. The LISTEN is committed before `then` runs (a transaction of its own: a
   * LISTEN takes effect at commit, and a notification committed before that is not
   * delivered), so whatever `then` reads is no older than the LISTEN: a change after it is heard.
   */
  async listen<R extends pg.QueryResultRow>(then: string): Promise<R[]> {
    this.conn.onNotification(this.name, (text) => {
      const event = parseEvent(text);
      if (!event) return;
      this.log.see(event);
      for (const fn of this.listeners) fn(event);
    });
    const joined = pg.escapeLiteral(waitingPayload(this.o.id, this.token, this.o.priority));
    return this.conn.simple<R>(
      `/* pgleaderlock:listen */ BEGIN; LISTEN ${this.name}; SELECT pg_notify('${this.name}', ${joined}); COMMIT;\n${then}`,
    );
  }

  /** Called with each event on the key's channel (after it is recorded for the handover proof). */
  onEvent(fn: (event: HandoverEvent) => void): void {
    this.listeners.push(fn);
  }

  /**
   * Proof of drain (handover.ts): after an unclean loss of `lost` (this candidate's earlier
   * session) and once its runs have returned, tell the next holder so.
   */
  async announceDrained(lost: SessionIdentity): Promise<void> {
    await this.notify('drained', drainedPayload(this.o.id, this.token, lost));
  }

  /** Say again that this candidate waits, with its priority (poll mode, to a new leader: requests.ts). */
  async announceWaiting(): Promise<void> {
    await this.notify('waiting', waitingPayload(this.o.id, this.token, this.o.priority));
  }

  /** A handover's successor `id`: does it hold the lock, wait for it, have a session at all? */
  async successor(id: string): Promise<SuccessorState> {
    const [row] = await this.conn.query<{ holds: boolean; waits: boolean; sessions: number }>(
      this.tag(SUCCESSOR),
      [this.o.key1, this.o.key2, applicationName(id)],
    );
    return { holds: row?.holds === true, waits: row?.waits === true, connected: (row?.sessions ?? 0) > 0 };
  }

  /**
   * Wait mode: the candidates queued for the lock, oldest first, with the priority their
   * waiting statement carries (its `acquired` payload, sql.ts `QUEUED`).
   */
  async queued(): Promise<{ id: string; priority: number }[]> {
    const rows = await this.conn.query<{ application_name: string | null; query: string | null }>(
      this.tag(QUEUED),
      [this.o.key1, this.o.key2],
    );
    return rows.flatMap((r) => {
      // the id its waiting statement carries when its application_name cannot (core/identity.ts)
      const id = idOfSession(r.application_name, r.query);
      return id === null ? [] : [{ id, priority: priorityOf(r.query) ?? 0 }];
    });
  }

  private async notify(what: string, text: string): Promise<void> {
    await this.conn.query(this.tag(`/* pgleaderlock:${what} */ SELECT pg_notify($1, $2)`), [this.name, text]);
  }
}
