/**
 * A worker's member session: the core lock session (core/lock-session.ts: the connection,
 * its marker and preparation, the backend checks, the pooler guard, freeing what was left
 * on another backend) on the primary, holding the worker's member lock and its partitions'
 * locks, listening for membership news, every statement bounded by `queryTimeoutMs`. The
 * server releases everything the session holds the moment it ends; the lease behind
 * `owned` comes from what the server applied (docs/safety.md).
 */
import type pg from 'pg';
import type { Clock } from '../core/clock.js';
import type { Endpoint } from '../core/endpoints.js';
import { ConnectionError, LockError, ShutdownError } from '../core/errors.js';
import { ensureFencingTable } from '../core/fencing.js';
import { type BackendRow, LockSession } from '../core/lock-session.js';
import { PeerWatch } from '../core/peers.js';
import type { PgpoolFront } from '../core/pgpool.js';
import { SHARED_BACKEND } from '../core/pooler.js';
import { unsafe } from '../core/prepare.js';
import { connectFound, type Found, findPrimaryOnly, type Surveyed, settingUp } from '../core/primary.js';
import { type Safety, safetyFor } from '../core/safety.js';
import { refusesToJoin } from './errors.js';
import { MEMBER_LOCK } from './sql.js';

export interface MemberSessionOptions {
  endpoints: readonly Endpoint[];
  membersKey: number;
  slot: number;
  channel: string;
  /** application_name: how other workers read this one's id and partition count. */
  appName: string;
  clock: Clock;
  serverReleaseMs: number;
  healthIntervalMs: number;
  queryTimeoutMs: number;
  /** The connect's deadline (core/retry.ts `RetryCycle.connectTimeoutMs`). */
  connectTimeoutMs: number;
  closeTimeoutMs: number;
  unref: boolean;
  /** With fencing: the epoch table, created at connect if missing. */
  fencingTable: string | null;
  onStatement: () => void;
  /**
   * Proof of drain (handovers.ts): the `drained` notices to send on the server at `host`,
   * as the first statements of the connection (before anything is taken).
   */
  drained?: (host: string) => readonly string[];
  /** `shutdown()` was called: do not join (checked before the member lock is taken). */
  stopping?: () => boolean;
  /** Aborted by `shutdown()`: a connection under way is abandoned at once. */
  signal?: AbortSignal;
  /** Told of a pgpool-II front (prepare.ts). */
  onPgpool?: (front: PgpoolFront) => void;
  /** The source of the session marker token (null: crypto). */
  random?: (() => number) | null;
}

export class MemberSession {
  private constructor(
    private readonly lock: LockSession,
    private readonly o: MemberSessionOptions,
    readonly safety: Safety,
    /** The primary this session is on; the ring watch connects there too. */
    readonly endpoint: Endpoint,
    /** The server's timeline (0: unknown): the floor of fencing epochs, and what peers are compared with. */
    readonly timeline: number,
    /** What the other configured hosts said when this session connected (the peers to watch). */
    readonly others: readonly Surveyed[],
  ) {}

  /**
   * Connect to the primary, prepare the session, listen, take the member lock. A shutdown
   * meanwhile (`signal`) abandons it at once: a ShutdownError.
   */
  static async open(o: MemberSessionOptions): Promise<MemberSession> {
    const { clock, queryTimeoutMs, connectTimeoutMs, signal } = o;
    try {
      const found = await findPrimaryOnly(o.endpoints, { clock, queryTimeoutMs, connectTimeoutMs, signal });
      return await settingUp(found, signal, (f) => MemberSession.openOn(o, f));
    } catch (err) {
      // a refusal stays one (start() rejects with it), even with a shutdown under way
      if (!signal?.aborted || err instanceof ShutdownError || refusesToJoin(err)) throw err;
      throw new ShutdownError('shutdown() was called before the worker joined', { cause: err });
    }
  }

  private static async openOn(o: MemberSessionOptions, found: Found): Promise<MemberSession> {
    const lock = await LockSession.open(connectFound(found), {
      ...o,
      key1: o.membersKey,
      key2: o.slot,
      freeAll: true,
      onStatement: o.onStatement,
    });
    try {
      for (const notice of o.drained?.(found.endpoint.label) ?? []) {
        o.onStatement();
        await lock.conn.query('/* pgleaderlock:drained */ SELECT pg_notify($1, $2)', [o.channel, notice]);
      }
      const prepared = await lock.prepare({
        applicationName: o.appName,
        serverReleaseMs: o.serverReleaseMs,
        probe: { connect: found.endpoint.connect, key1: o.membersKey, key2: o.slot },
        signal: o.signal,
        extra: (version) =>
          version >= 140000 ? [['idle_session_timeout', String(Math.ceil(o.serverReleaseMs))]] : [],
        ...(o.onPgpool ? { onPgpool: o.onPgpool } : {}),
      });
      const safety = safetyFor(prepared.settings, o.healthIntervalMs, o.queryTimeoutMs);
      if (o.fencingTable !== null) await ensureFencingTable(lock.conn, o.fencingTable, o.queryTimeoutMs);
      await lock.conn.query(`/* pgleaderlock:listen */ LISTEN ${o.channel}`, []);
      // a worker shut down while it reconnected joins no more (a join would move partitions twice)
      if (o.stopping?.()) throw new ShutdownError('shutdown() was called before the worker joined');
      const [member] = await lock.conn.query<{ got: boolean } & BackendRow>(MEMBER_LOCK, [
        o.membersKey,
        o.slot,
        lock.token,
      ]);
      if (!member || !lock.ranHere(member)) {
        const err = unsafe(
          `the member lock was asked for on backend ${member?.pid ?? 'unknown'}, not the session's own (${prepared.pid}): ${SHARED_BACKEND}`,
        );
        await lock.free(err);
        throw err;
      }
      if (!member.got) {
        throw new LockError(
          `member slot ${o.slot} is taken: a worker with this id is already running (or its session has not ended yet)`,
        );
      }
      return new MemberSession(lock, o, safety, found.endpoint, found.timeline, found.others);
    } catch (err) {
      lock.destroy();
      throw err;
    }
  }

  /** The session marker (statements.ts): each reconcile and take checks it. */
  get token(): string {
    return this.lock.token;
  }

  /** The backend this session was prepared on: each reconcile and take checks it. */
  get pid(): number {
    return this.lock.pid;
  }

  /**
   * Several hosts: a watch of the others for a promotion beside this (old) primary
   * (peers.ts), every `intervalMs`. A promotion closes this session: every term ends at
   * once; the worker's loop reports the error, and its next session finds the new primary.
   * Null with one host, or when this server hides its timeline.
   */
  watchPeers(intervalMs: number): PeerWatch | null {
    if (this.others.length === 0 || this.timeline === 0) return null;
    return new PeerWatch(
      this.others.map((o) => o.endpoint),
      { label: this.endpoint.label, timeline: this.timeline },
      this.o.clock,
      (error) => this.destroy(error),
      intervalMs,
      this.others.filter((o) => o.state.kind === 'primary').map((o) => o.endpoint),
    );
  }

  /** Why the session ended, once it has. */
  get dead(): Error | null {
    return this.lock.cause;
  }

  onDeath(fn: (err: Error) => void): () => void {
    return this.lock.onDeath(fn);
  }

  onNotify(fn: (payload: string) => void): void {
    this.lock.conn.onNotification(this.o.channel, fn);
  }

  /** One statement, bounded by queryTimeoutMs: past it the session is destroyed (a death). */
  query<R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<R[]> {
    this.o.onStatement();
    return this.lock.conn.query<R>(text, values);
  }

  /** Several statements in one round trip (no parameters), bounded as `query`. */
  async script(text: string): Promise<void> {
    this.o.onStatement();
    await this.lock.conn.simple(text);
  }

  notify(payload: string): Promise<unknown> {
    return this.query('SELECT pg_notify($1, $2)', [this.o.channel, payload]);
  }

  /**
   * A statement of this session's reported the backend that ran it (`pid`) and whether it
   * carried the session marker (`same`). Another backend, or no marker, means a pooler
   * moved the session: free what the session's own backend holds (terminate it), close
   * the session, and refuse. Behind a pooler, also probe that no other connection reaches
   * the session's backend (pooler.ts).
   */
  async verify(row: BackendRow | undefined): Promise<void> {
    if (!this.lock.ranHere(row)) {
      const err = unsafe(
        `a statement of the member session ran on backend ${row?.pid ?? 'unknown'}, not its own (${this.pid}): ${SHARED_BACKEND}`,
      );
      await this.lock.free(err);
      this.destroy(err);
      throw err;
    }
    try {
      await this.lock.guardPooler();
    } catch (err) {
      this.destroy(err as Error);
      throw err;
    }
  }

  destroy(err: Error = new ConnectionError('member session closed')): void {
    this.lock.destroy(err);
  }

  /** A clean end within `closeTimeoutMs`: the server frees whatever is still held. */
  end(): Promise<void> {
    return this.lock.close();
  }
}
