/**
 * Detecting a connection pooler that shares backends between clients (PgBouncer, and
 * others, in transaction or statement mode). Session advisory locks belong to a backend,
 * so behind such a pooler two clients can both "hold" one lock, and a lock can stay
 * behind on a pooled backend after its client has gone (docs/safety.md, "Poolers").
 *
 * What the protocol and the server show, and what this module does with it:
 *  - the pid announced at connect (BackendKeyData, `client.processID`) is the backend's
 *    own pid on a direct connection. A pooler answers the startup itself and announces a
 *    number of its own (PgBouncer does in every mode): a pooler is in the path when the
 *    two differ. A direct connection needs nothing more.
 *  - behind a pooler, a second connection (the probe) is opened through the same path. A
 *    pooler that shares backends hands it an idle backend, the most recently used first
 *    (PgBouncer's default), which is the lock session's own: the probe then finds the
 *    lock session's marker there, or the lock held there. In session mode the lock
 *    session's backend is pinned to it, and a backend handed to a new client has been
 *    reset (DISCARD ALL), so the probe finds neither. The probe runs at connect (fresh
 *    connection, closed after), after every grant and with every ownership check while
 *    leader (on one probe connection kept while the lock is held). A probe that cannot
 *    get an answer is a refusal, never a pass.
 *  - a pooler that hands out its backends in turn (PgBouncer's `server_round_robin`) may
 *    hand the probe another backend; it also hands two statements in a row of the lock
 *    session two backends. So while the lock is held, each probe follows a second
 *    statement on the lock session, which must run on the same backend as the one before.
 *  - every statement of the lock session itself checks its marker, and an acquisition
 *    checks that the backend did not hold the key already (sql.ts).
 */
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import type { Clock } from './clock.js';
import { destroyClient } from './connect.js';
import type { EndpointConnect } from './endpoints.js';
import { ConnectionError, describe, LockError, pathRefusal, undecidedRefusal } from './errors.js';
import { PINNED, PROBE } from './statements.js';

const ADVICE = 'connect directly to PostgreSQL, or through the pooler in session mode';

export const SHARED_BACKEND =
  'a connection pooler in transaction or statement mode is in the path: session advisory locks ' +
  `would not exclude other clients sharing the backend; ${ADVICE}`;

export interface GuardOptions {
  key1: number;
  key2: number;
  /** The lock session's marker token (sql.ts). */
  token: string;
  /** Opens another connection through the same path (given a signal that abandons it). */
  connect: EndpointConnect;
  /** Runs a statement on the lock session itself. */
  session: (text: string, values: unknown[]) => Promise<PinnedRow[]>;
  clock: Clock;
  /** Deadline for each probe (connecting included). */
  timeoutMs: number;
}

export interface PinnedRow {
  pid: number;
  same: boolean;
  held: boolean;
}

interface ProbeRow {
  pid: number;
  marker: string | null;
  held: boolean;
}

function unsafe(why: string, cause?: unknown): LockError {
  return pathRefusal(new LockError(`${SHARED_BACKEND} (${why})`, { code: 'ERR_PGLEADERLOCK_UNSAFE', cause }));
}

/**
 * Watches one lock session that runs behind a pooler. `PoolerGuard.open` returns null for
 * a direct connection.
 */
export class PoolerGuard {
  /** The probe connection kept while the lock is held. */
  private held: pg.Client | null = null;
  /** Aborted by close(): a probe connection still being opened is abandoned, never kept. */
  private readonly closing = new AbortController();

  private constructor(
    private readonly o: GuardOptions,
    /** The lock session's backend. */
    private readonly backendPid: number,
  ) {}

  /**
   * At connect: null when the connection is direct; otherwise probe once on a fresh
   * connection and refuse (throw) if backends are shared. A shutdown (`signal`) abandons
   * the probe: a `ConnectionError`, not a refusal.
   */
  static async open(
    o: GuardOptions,
    backendPid: number,
    announcedPid: number | null,
    /** A shutdown: abandons this first probe at once. */
    signal?: AbortSignal,
  ): Promise<PoolerGuard | null> {
    if (announcedPid === backendPid) return null;
    const guard = new PoolerGuard(o, backendPid);
    await guard.probeOnce(signal);
    return guard;
  }

  /**
   * For a session that takes no lock and carries no marker (`LeaderWatch`, the CLI's
   * `resign` and `handover`): refuse (throw `ERR_PGLEADERLOCK_UNSAFE`, the lock's message and
   * advice) a pooler that shares backends, before anything is set on the session or sent
   * on its behalf (a name, a LISTEN, a NOTIFY would stay on a pooled backend for the pool's
   * other clients). The lock's two looks: a second connection through the same path must
   * not be served by this session's backend (a pooler that reuses the most recent backend
   * first), and this session's next statement must run on the same backend as the one
   * before (a pooler that hands its backends out in turn). A direct connection needs neither.
   */
  static async refuse(
    o: GuardOptions,
    backendPid: number,
    announcedPid: number | null,
    signal?: AbortSignal,
  ): Promise<void> {
    if (announcedPid === backendPid) return;
    const guard = new PoolerGuard(o, backendPid);
    try {
      await guard.probeOnce(signal);
      await guard.verifyPinned(false);
    } finally {
      guard.close();
    }
  }

  /** Probe once on a fresh connection, closed after; a shutdown (`signal`) abandons it. */
  private async probeOnce(signal: AbortSignal | undefined): Promise<void> {
    const abandon = (): void => this.close();
    signal?.addEventListener('abort', abandon, { once: true });
    if (signal?.aborted) abandon();
    try {
      const client = await this.connectProbe();
      try {
        await this.verify(client, false);
      } finally {
        destroyClient(client);
      }
    } finally {
      signal?.removeEventListener('abort', abandon);
    }
  }

  /**
   * While the lock is held, right after a statement of the lock session that ran on its
   * backend (the grant, each ownership check): run one more statement on the lock session,
   * then probe on the connection kept for that (opened the first time). Throws if the
   * session's next statement ran on another backend, or if the probe shows the lock
   * session's backend, its marker or the lock from another connection. With no other
   * client between them, a pooler that reuses the most recent backend first hands the
   * probe the session's backend, and one that hands its backends out in turn
   * (`server_round_robin`) hands the session's next statement another backend: either way
   * the sharing shows within one check.
   */
  async verifyHolding(): Promise<void> {
    try {
      await this.verifyPinned();
      this.held ??= await this.connectProbe();
      await this.verify(this.held);
    } catch (err) {
      this.dropHeld(); // the guard itself stays usable: close() is its owner's, and final
      throw err;
    }
  }

  /** Close the probe connection kept while leading, if any, and abandon one being opened. Final. */
  close(): void {
    this.closing.abort();
    this.dropHeld();
  }

  private dropHeld(): void {
    if (this.held) destroyClient(this.held);
    this.held = null;
  }

  /** The session's next statement ran on its backend (and, `marked`, still carries its marker). */
  private async verifyPinned(marked = true): Promise<void> {
    // on the lock session: its own query timeout bounds it
    const [row] = await this.o.session(PINNED, [this.o.key1, this.o.key2, this.o.token]);
    if (!row) throw new LockError('the second statement of the lock session returned no row');
    if (row.pid !== this.backendPid) {
      throw unsafe(
        `two statements of this session in a row ran on backends ${this.backendPid} and ${row.pid}`,
      );
    }
    if (marked && !row.same) throw unsafe(`backend ${row.pid} no longer carries this session's marker`);
  }

  private async verify(client: pg.Client, marked = true): Promise<void> {
    const row = await this.bounded('probe', async () => {
      const { rows } = await client.query<ProbeRow>(PROBE, [this.o.key1, this.o.key2]);
      if (!rows[0]) throw new Error('the probe returned no row');
      return rows[0];
    });
    if (row.pid === this.backendPid || row.marker === this.o.token) {
      // a session pooler frees a backend when its client is gone: the probe may get this
      // session's backend because this session is dead (cut since its last statement, not yet
      // noticed). Asked once more, a dead session fails as a lost connection, not a refusal
      await this.verifyPinned(marked);
      throw unsafe(`a second connection was served by this session's backend, pid ${this.backendPid}`);
    }
    if (row.held) {
      throw unsafe(`a second connection was served by backend ${row.pid}, which holds the lock`);
    }
    if (row.marker !== null) {
      throw unsafe(
        `a second connection was served by backend ${row.pid}, which carries another lock session's state: ` +
          'the pooler shares backends, or does not reset them between clients (server_reset_query)',
      );
    }
  }

  private async connectProbe(): Promise<pg.Client> {
    const { signal } = this.closing;
    let attempt: Promise<pg.Client>;
    try {
      signal.throwIfAborted(); // closed already: no connection opened just to be closed
      attempt = Promise.resolve(this.o.connect(undefined, signal));
    } catch (err) {
      attempt = Promise.reject(err);
    }
    try {
      const client = await this.bounded('connecting the probe', () => attempt);
      // closed meanwhile (the session ended while it connected): never kept
      if (signal.aborted) throw closedWhileProbing();
      // kept between checks while holding: a network error there must never be unhandled
      if (client.listenerCount('error') === 0) client.on('error', () => {});
      return client;
    } catch (err) {
      attempt.then(destroyClient, () => {}); // connected after the deadline
      throw err;
    }
  }

  /** Run `work` within the probe deadline; a miss (or any failure) is a refusal. */
  private async bounded<T>(what: string, work: () => Promise<T>): Promise<T> {
    const { clock, timeoutMs } = this.o;
    const { signal } = this.closing;
    let timer: unknown;
    let onClose = (): void => {};
    const deadline = new Promise<never>((_, reject) => {
      timer = clock.setTimeout(
        () => reject(new Error(`no answer within ${timeoutMs} ms (is the pool full?)`)),
        timeoutMs,
      );
      onClose = () => reject(closedWhileProbing());
      if (signal.aborted) onClose();
      signal.addEventListener('abort', onClose, { once: true });
    });
    try {
      return await Promise.race([work(), deadline]);
    } catch (err) {
      if (signal.aborted) throw closedWhileProbing(err);
      // a refusal, never a pass; but not a definite one: retried as a failed connection
      throw undecidedRefusal(
        new LockError(
          'a connection pooler is in the path (the backend pid differs from the pid its connection announced) ' +
            `and whether it shares backends could not be checked: ${what} failed: ${describe(err)}; ${ADVICE}`,
          { code: 'ERR_PGLEADERLOCK_UNSAFE', cause: err },
        ),
      );
    } finally {
      clock.clearTimeout(timer);
      signal.removeEventListener('abort', onClose);
    }
  }
}

/** The guard was closed (its session ended) while a probe ran: not a refusal. */
function closedWhileProbing(cause?: unknown): ConnectionError {
  return new ConnectionError(
    'the lock session was closed while the pooler probe ran',
    cause ? { cause } : {},
  );
}

/** What `refuseSharedBackends` needs of a session that takes no lock. */
export interface UnlockedSession {
  /** Runs a statement on the session. */
  query: (text: string, values: unknown[]) => Promise<PinnedRow[]>;
  /** The pid its connection announced (`client.processID`). */
  announcedPid: number | null;
  /** Opens another connection through the same path. */
  connect: EndpointConnect;
  /** The key it concerns (the probe also asks whether its backend holds it). */
  key1: number;
  key2: number;
  clock: Clock;
  timeoutMs: number;
  signal?: AbortSignal;
}

/**
 * Refuse a pooler that shares backends (`PoolerGuard.refuse`) for a session that takes no
 * lock, before it sets or sends anything: its backend's pid, then the lock's two looks.
 */
export async function refuseSharedBackends(s: UnlockedSession): Promise<void> {
  const token = randomBytes(8).toString('hex'); // never set anywhere: only a probe's marker could match it
  const [first] = await s.query(PINNED, [s.key1, s.key2, token]);
  if (!first) throw new LockError('the session returned no row for its backend pid');
  await PoolerGuard.refuse(
    {
      key1: s.key1,
      key2: s.key2,
      token,
      connect: s.connect,
      session: s.query,
      clock: s.clock,
      timeoutMs: s.timeoutMs,
    },
    first.pid,
    s.announcedPid,
    s.signal,
  );
}
