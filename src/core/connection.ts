/**
 * One `pg.Client` owned by the lock, for one connection attempt (a client is never
 * reused). Every query runs under a deadline; a query that misses it destroys the
 * client (its socket may be dead, and later queries would queue behind it). The client's
 * `'error'` and `'end'` events, and the notices PostgreSQL sends on an immediate
 * shutdown or a crash, mark the connection dead at once, exactly once.
 */
import type pg from 'pg';
import { sendCancel } from './cancel.js';
import type { Clock } from './clock.js';
import { type ConnectFn, destroyClient, unrefClient } from './connect.js';
import { ConnectionError, describe, LockError, sqlStateOf, toError } from './errors.js';
import { MAX_TIMER_MS, show } from './validate.js';

/** SQLSTATEs that mean "this session is going away" when they arrive as notices. */
const DYING_NOTICES = new Set(['57P01', '57P02', '57P03']);

/** SQLSTATEs after which the session is gone: the dying notices and class 08 (connection exception). */
function endsSession(code: string | undefined): boolean {
  return code !== undefined && (DYING_NOTICES.has(code) || code.startsWith('08'));
}

export interface ConnectionOptions {
  clock: Clock;
  /** Deadline for connecting and for each query. */
  queryTimeoutMs: number;
  /** Deadline for a graceful `end()` before the socket is destroyed. */
  closeTimeoutMs: number;
  /** Let the socket not keep the process alive (the lock's `unref` option). */
  unref: boolean;
}

interface PgInternals {
  processID?: number | null;
  connection?: { stream?: { unref?(): void; remoteAddress?: string; remotePort?: number } };
  _ending?: boolean;
  _queryable?: boolean;
}

/** Something with a client's `query`, `on` and `end`. */
export function isClient(value: unknown): value is pg.Client {
  if (typeof value !== 'object' || value === null) return false;
  const c = value as Record<string, unknown>;
  return typeof c.query === 'function' && typeof c.on === 'function' && typeof c.end === 'function';
}

export class Connection {
  private deathCause: Error | null = null;
  private readonly deathListeners = new Set<(err: Error) => void>();
  private closing: Promise<void> | null = null;
  /** The statement sent last: the next waits for it to settle (one statement at a time). */
  private busy: Promise<unknown> = Promise.resolve();

  private constructor(
    readonly client: pg.Client,
    private readonly o: ConnectionOptions,
  ) {}

  /**
   * Open with `connect`, bounded by `queryTimeoutMs` and by `signal` (a shutdown: the
   * attempt is given up at once). A client that connects after the deadline or the abort
   * is closed, never leaked. A `connect` hook that throws, or resolves to something that is
   * not a client, gives a `ConnectionError`.
   */
  static async open(connect: ConnectFn, o: ConnectionOptions, signal?: AbortSignal): Promise<Connection> {
    let timer: unknown;
    let givenUp = false;
    let abandon = (): void => {};
    let attempt: Promise<pg.Client>;
    try {
      attempt = Promise.resolve(connect());
    } catch (err) {
      attempt = Promise.reject(err);
    }
    const timeout = new Promise<never>((_, reject) => {
      timer = o.clock.setTimeout(() => {
        givenUp = true;
        reject(new ConnectionError(`connecting did not complete within ${o.queryTimeoutMs} ms`));
      }, o.queryTimeoutMs);
      abandon = () => {
        givenUp = true;
        reject(new ConnectionError('connecting was abandoned: shutting down'));
      };
      if (signal?.aborted) abandon();
      signal?.addEventListener('abort', abandon, { once: true });
    });
    let client: unknown;
    try {
      client = await Promise.race([attempt, timeout]);
    } catch (err) {
      if (givenUp) {
        attempt.then(
          (late) => {
            if (isClient(late)) destroyClient(late);
          },
          () => {},
        );
        throw err;
      }
      throw new ConnectionError(`could not connect: ${describe(err)}`, { cause: err });
    } finally {
      o.clock.clearTimeout(timer);
      signal?.removeEventListener('abort', abandon);
    }
    if (!isClient(client)) {
      throw new ConnectionError(`connect must resolve to a connected pg.Client, received ${show(client)}`);
    }
    const connection = new Connection(client, o);
    connection.attach();
    return connection;
  }

  /** True once the connection has failed or been closed. */
  get dead(): boolean {
    return this.deathCause !== null;
  }

  /** Why it died, if it did. */
  get cause(): Error | null {
    return this.deathCause;
  }

  /** The pid announced at connect (BackendKeyData): the backend's, or a pooler's own number. */
  get announcedPid(): number | null {
    const pid = (this.client as unknown as PgInternals).processID;
    return typeof pid === 'number' ? pid : null;
  }

  /** The address and port this connection's socket reached (null on a Unix socket). */
  get remote(): { address: string; port: number } | null {
    const stream = (this.client as unknown as PgInternals).connection?.stream;
    if (!stream?.remoteAddress || !stream.remotePort) return null;
    return { address: stream.remoteAddress.replace(/^::ffff:/, ''), port: stream.remotePort };
  }

  /** Call `fn` once when the connection dies (at once if it already has). Returns an unsubscribe. */
  onDeath(fn: (err: Error) => void): () => void {
    if (this.deathCause) {
      fn(this.deathCause);
      return () => {};
    }
    this.deathListeners.add(fn);
    return () => this.deathListeners.delete(fn);
  }

  /**
   * Run one statement under the deadline (`queryTimeoutMs + extraMs`); destroys the
   * client if the deadline passes. Errors: a `ConnectionError` when the connection is or
   * went dead (or timed out), else a `LockError` carrying the driver error as `cause`.
   */
  async query<R extends pg.QueryResultRow>(text: string, values: unknown[], extraMs = 0): Promise<R[]> {
    return this.run<R>(() => this.client.query<R>(text, values), extraMs);
  }

  /**
   * Several statements in one simple-protocol message (no parameters: literals only),
   * under one deadline (`extraMs` added, as for {@link query}). Returns the rows of the last statement.
   */
  simple<R extends pg.QueryResultRow>(text: string, extraMs = 0): Promise<R[]> {
    return this.run<R>(async () => {
      const results = (await this.client.query(text)) as unknown as pg.QueryResult<R> | pg.QueryResult<R>[];
      const last = Array.isArray(results) ? results.at(-1) : results;
      return { rows: last?.rows ?? [] };
    }, extraMs);
  }

  /** As {@link simple}, but the rows of every statement, in order (one round trip). */
  async batch(text: string): Promise<pg.QueryResultRow[][]> {
    const results = await this.run<{ rows: pg.QueryResultRow[] }>(async () => {
      const r = (await this.client.query(text)) as unknown as pg.QueryResult | pg.QueryResult[];
      return { rows: (Array.isArray(r) ? r : [r]).map((each) => ({ rows: each?.rows ?? [] })) };
    }, 0);
    return results.map((r) => r.rows);
  }

  /**
   * One statement at a time: a statement asked for while another runs is sent once that one
   * has settled (pg would queue it too, but warns that this is deprecated). Its deadline
   * starts when it is sent.
   */
  private run<R extends pg.QueryResultRow>(
    send: () => Promise<{ rows: R[] }>,
    extraMs: number,
  ): Promise<R[]> {
    const next = this.busy.then(() => this.send(send, extraMs));
    this.busy = next.catch(() => {});
    return next;
  }

  private async send<R extends pg.QueryResultRow>(
    send: () => Promise<{ rows: R[] }>,
    extraMs: number,
  ): Promise<R[]> {
    if (this.deathCause) {
      throw new ConnectionError(`connection is closed: ${this.deathCause.message}`, {
        cause: this.deathCause,
      });
    }
    const { clock } = this.o;
    const deadlineMs = Math.min(MAX_TIMER_MS, this.o.queryTimeoutMs + extraMs); // beyond it timers fire at once
    let timer: unknown;
    const timeout = new Promise<never>((_, reject) => {
      timer = clock.setTimeout(() => {
        const err = new ConnectionError(`query did not complete within ${deadlineMs} ms`, {
          code: 'ERR_PGLEADERLOCK_QUERY_TIMEOUT',
        });
        this.destroy(err);
        reject(err);
      }, deadlineMs);
    });
    try {
      const result = await Promise.race([send(), timeout]);
      return result.rows;
    } catch (err) {
      if (err instanceof ConnectionError) throw err;
      // a statement ended by its session's end (terminated, server shutting down or crashed,
      // a connection exception) rejects before the client's 'error'/'end' mark it dead
      if (!this.deathCause && endsSession(sqlStateOf(err))) this.destroy(toError(err));
      if (this.deathCause) throw new ConnectionError(`connection lost: ${describe(err)}`, { cause: err });
      throw new LockError(`query failed: ${describe(err)}`, { cause: err });
    } finally {
      clock.clearTimeout(timer);
    }
  }

  /** Subscribe to notifications on `channel` (payloads only). */
  onNotification(channel: string, fn: (payload: string) => void): void {
    this.client.on('notification', (msg: { channel: string; payload?: string }) => {
      if (msg.channel === channel && msg.payload) fn(msg.payload);
    });
  }

  /**
   * Send one CancelRequest for the running statement, on a socket of its own given up after
   * `timeoutMs`; true once written. Nothing more: a cancel that reaches the server before
   * the statement does is lost, and a caller that must see the statement end sends again
   * (or uses {@link cancel}). Never rejects.
   */
  sendCancel(timeoutMs: number): Promise<boolean> {
    return sendCancel(this.client, this.o.clock, timeoutMs);
  }

  /**
   * End the running statement: a CancelRequest, or if it cannot be sent, or the statement
   * has not ended `closeTimeoutMs` after it was sent, destroying the socket.
   */
  async cancel(): Promise<void> {
    const running = this.busy; // settles when the statement sent last has
    const sent = await this.sendCancel(this.o.closeTimeoutMs);
    if (!sent) {
      this.destroy(new ConnectionError('statement cancelled by closing the connection'));
      return;
    }
    // a CancelRequest written is not one obeyed (a proxy may drop it): if the statement has
    // not ended within closeTimeoutMs, close the connection
    const { clock, closeTimeoutMs } = this.o;
    let timer: unknown;
    const ended = await Promise.race([
      running.then(() => true),
      new Promise<boolean>((resolve) => {
        timer = clock.setTimeout(() => resolve(false), closeTimeoutMs);
      }),
    ]);
    clock.clearTimeout(timer);
    if (!ended) {
      this.destroy(
        new ConnectionError(
          `the cancelled statement did not end within closeTimeoutMs (${closeTimeoutMs} ms)`,
        ),
      );
    }
  }

  /** Close at once: destroy the socket (the server releases a session lock when it sees EOF). */
  destroy(reason: Error = new ConnectionError('connection destroyed')): void {
    this.die(reason);
    destroyClient(this.client);
  }

  /**
   * Close gracefully (Terminate message), never waiting longer than `closeTimeoutMs`: on a
   * blackholed socket `end()` waits for a FIN that never comes. Idempotent.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      this.die(new ConnectionError('connection closed'));
      const { clock, closeTimeoutMs } = this.o;
      let timer: unknown;
      const givenUp = new Promise<boolean>((resolve) => {
        timer = clock.setTimeout(() => resolve(true), closeTimeoutMs);
      });
      const ended = this.client.end().then(
        () => false,
        () => false,
      );
      const late = await Promise.race([ended, givenUp]);
      clock.clearTimeout(timer);
      if (late) destroyClient(this.client);
    })();
    return this.closing;
  }

  private attach(): void {
    const client = this.client;
    client.on('error', (err: Error) => this.die(err));
    client.on('end', () => this.die(new ConnectionError('connection ended')));
    client.on('notice', (msg: { code?: string; message?: string }) => {
      if (msg.code && DYING_NOTICES.has(msg.code)) {
        this.destroy(
          new ConnectionError(`server is shutting down (${msg.code}): ${msg.message ?? ''}`, { cause: msg }),
        );
      }
    });
    const internals = client as unknown as PgInternals;
    if (this.o.unref) unrefClient(client);
    // a client that died between connect() and now
    if (internals._ending || internals._queryable === false)
      this.die(new ConnectionError('connection ended'));
  }

  private die(err: unknown): void {
    if (this.deathCause) return; // one disconnect can emit 'error' twice, then 'end'
    this.deathCause = toError(err);
    const listeners = [...this.deathListeners];
    this.deathListeners.clear();
    for (const fn of listeners) fn(this.deathCause);
  }
}
