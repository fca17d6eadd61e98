/**
 * Error classes. Every error has a stable `code` to branch on (never match message text);
 * causes are chained through the standard `cause` property.
 */

/** Stable codes carried by {@link PgLeaderLockError.code}. */
export type ErrorCode =
  | 'ERR_PGLEADERLOCK'
  | 'ERR_PGLEADERLOCK_CONNECTION'
  | 'ERR_PGLEADERLOCK_QUERY_TIMEOUT'
  | 'ERR_PGLEADERLOCK_CONNECT_TIMEOUT'
  | 'ERR_PGLEADERLOCK_LOCK'
  | 'ERR_PGLEADERLOCK_RELEASE'
  | 'ERR_PGLEADERLOCK_LOST'
  | 'ERR_PGLEADERLOCK_RETRY_EXHAUSTED'
  | 'ERR_PGLEADERLOCK_UNSAFE'
  | 'ERR_PGLEADERLOCK_NO_PRIMARY'
  | 'ERR_PGLEADERLOCK_SHUTDOWN'
  | 'ERR_PGLEADERLOCK_CALLBACK'
  | 'ERR_PGLEADERLOCK_CALLBACK_TIMEOUT'
  | 'ERR_PGLEADERLOCK_TERM_ENDED'
  | 'ERR_PGLEADERLOCK_RUN'
  | 'ERR_PGLEADERLOCK_FENCED'
  | 'ERR_PGLEADERLOCK_PARTITION_MISMATCH'
  | 'ERR_PGLEADERLOCK_LOCK_TABLE_FULL'
  | 'ERR_PGLEADERLOCK_HANDOVER';

/** Base class of every error this library produces. */
export class PgLeaderLockError extends Error {
  /** The class's name, e.g. `'LockError'`. */
  override name = 'PgLeaderLockError';
  /** What went wrong, stable across versions: branch on this, never on the message. */
  readonly code: ErrorCode;

  constructor(message: string, options?: { cause?: unknown; code?: ErrorCode }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = options?.code ?? 'ERR_PGLEADERLOCK';
  }

  /** SQLSTATE of the PostgreSQL error in the cause chain, if any (read from the driver error). */
  get sqlState(): string | undefined {
    return sqlStateOf(this.cause);
  }
}

/** Failed to establish or keep a database connection (also: a query that missed its deadline). */
export class ConnectionError extends PgLeaderLockError {
  override name = 'ConnectionError';
  /**
   * A connect that missed its deadline (`ERR_PGLEADERLOCK_CONNECT_TIMEOUT`, found in the cause
   * chain of the "could not connect" error that `onError` receives): true if the server (or a
   * proxy in front of it) had accepted the TCP connection, so the start-up or the first
   * statement was what did not finish: a busy server. False for every other error, and when
   * it cannot be known (a `connect` hook's connect that itself missed the deadline; a hook's
   * client whose first statement missed it counts as accepted).
   */
  readonly accepted: boolean;
  constructor(
    message: string,
    options?: {
      cause?: unknown;
      code?:
        | 'ERR_PGLEADERLOCK_CONNECTION'
        | 'ERR_PGLEADERLOCK_QUERY_TIMEOUT'
        | 'ERR_PGLEADERLOCK_CONNECT_TIMEOUT';
      /** See {@link ConnectionError.accepted}. */
      accepted?: boolean;
    },
  ) {
    super(message, { cause: options?.cause, code: options?.code ?? 'ERR_PGLEADERLOCK_CONNECTION' });
    this.accepted = options?.accepted ?? false;
  }
}

/** Failed to acquire, verify or release the advisory lock, or the lock was lost. */
export class LockError extends PgLeaderLockError {
  override name = 'LockError';
  constructor(
    message: string,
    options?: {
      cause?: unknown;
      code?:
        | 'ERR_PGLEADERLOCK_LOCK'
        | 'ERR_PGLEADERLOCK_RELEASE'
        | 'ERR_PGLEADERLOCK_LOST'
        | 'ERR_PGLEADERLOCK_RETRY_EXHAUSTED'
        | 'ERR_PGLEADERLOCK_UNSAFE'
        | 'ERR_PGLEADERLOCK_NO_PRIMARY'
        | 'ERR_PGLEADERLOCK_HANDOVER';
    },
  ) {
    super(message, { cause: options?.cause, code: options?.code ?? 'ERR_PGLEADERLOCK_LOCK' });
  }
}

/** Error during shutdown or step-down, e.g. its timeout elapsed and the session was closed by force. */
export class ShutdownError extends PgLeaderLockError {
  override name = 'ShutdownError';
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, { cause: options?.cause, code: 'ERR_PGLEADERLOCK_SHUTDOWN' });
  }
}

/**
 * A user callback threw or rejected (`cause` is what it threw; code
 * `ERR_PGLEADERLOCK_CALLBACK`), or did not settle within `callbackTimeoutMs` (code
 * `ERR_PGLEADERLOCK_CALLBACK_TIMEOUT`; the queue moved on without it). Passed to `onError`.
 */
export class CallbackError extends PgLeaderLockError {
  override name = 'CallbackError';
  /** The event whose callback failed, e.g. `'acquired'`. */
  readonly event: string;
  constructor(event: string, cause: unknown, timeoutMs?: number) {
    super(
      timeoutMs === undefined
        ? `${event} callback failed: ${describe(cause)}`
        : `${event} callback did not settle within ${timeoutMs} ms; later callbacks run without waiting for it`,
      {
        cause: timeoutMs === undefined ? cause : undefined,
        code: timeoutMs === undefined ? 'ERR_PGLEADERLOCK_CALLBACK' : 'ERR_PGLEADERLOCK_CALLBACK_TIMEOUT',
      },
    );
    this.event = event;
  }
}

// refusals whose check could not be completed (a pooler probe failed or unanswered): both
// elections retry them as a failed connection; a worker's start() rejects only on a definite one
const undecided = new WeakSet<object>();

export function undecidedRefusal<E extends PgLeaderLockError>(err: E): E {
  undecided.add(err);
  return err;
}

// refusals of the path itself (a pooler that shares backends, a hot standby: `unsafe()` in
// prepare.ts and pooler.ts). Met at a LeaderLock's first acquisition they end the run as at
// connect; a grant's other refusals (settings the server did not apply, a newer primary
// elsewhere) are retried, since an operator's fix or a failover ends them
const pathRefusals = new WeakSet<object>();

export function pathRefusal<E extends PgLeaderLockError>(err: E): E {
  pathRefusals.add(err);
  return err;
}

/** A definite refusal of the path itself ({@link pathRefusal}). */
export function isPathRefusal(err: unknown): boolean {
  return isDefiniteRefusal(err) && pathRefusals.has(err as object);
}

/** `ERR_PGLEADERLOCK_UNSAFE` from a check that completed (not a probe that could not be). */
export function isDefiniteRefusal(err: unknown): boolean {
  return (
    typeof err === 'object' &&
    err !== null &&
    (err as { code?: unknown }).code === 'ERR_PGLEADERLOCK_UNSAFE' &&
    !undecided.has(err)
  );
}

/**
 * The one policy of both elections for a definite refusal (a pooler in transaction or
 * statement mode, found by a check that completed): met before the run's first session
 * serves (`served` false: for a LeaderLock, before an acquisition attempt ran to the end on
 * the session's own backend), it ends the run: such a path never works, and retrying it only
 * hides the mistake (a partition worker's `start()` rejects with it; a `LeaderLock` reports
 * it to `onError` and stops). Met later (a pooler put in front of a running election), it is
 * retried like a failed connection.
 */
export function endsTheRun(err: unknown, served: boolean): boolean {
  return !served && isDefiniteRefusal(err);
}

/** SQLSTATE of the first PostgreSQL error in a cause chain (driver errors carry it in `code`). */
export function sqlStateOf(err: unknown): string | undefined {
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 10; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return code;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Whether a cause chain holds a refused connection (`ECONNREFUSED`: no server listens there). */
export function isRefused(err: unknown): boolean {
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 10; depth++) {
    if ((e as { code?: unknown }).code === 'ECONNREFUSED') return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

// what a server that is down, restarting or out of reach answers a connection (or a session) with
const AWAY_SOCKET = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
]);
const AWAY_SQLSTATE = new Set(['57P01', '57P02', '57P03']); // shutting down (admin, crash), starting up
// class 08 but an answer about what the client sent: a protocol violation (PgBouncer's refusal
// of a startup parameter such as `options`) and a rejected connection
const REJECTED = new Set(['08P01', '08004']);
// the library's own: a connection that failed, ended or timed out without the server saying why
const UNEXPLAINED = new Set([
  'ERR_PGLEADERLOCK_CONNECTION',
  'ERR_PGLEADERLOCK_QUERY_TIMEOUT',
  'ERR_PGLEADERLOCK_CONNECT_TIMEOUT',
]);

/** The connect that missed its deadline in a cause chain (core/primary.ts), or null. */
export function connectTimeoutIn(err: unknown): ConnectionError | null {
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 10; depth++) {
    if (e instanceof ConnectionError && e.code === 'ERR_PGLEADERLOCK_CONNECT_TIMEOUT') return e;
    e = (e as { cause?: unknown }).cause;
  }
  return null;
}

/**
 * Whether a cause chain says the server is away: refused, reset or unreachable, shutting
 * down or starting up (SQLSTATE 57P01–57P03, class 08 but 08P01 and 08004), or a connection that failed, ended or
 * timed out with no code but the library's own (a server too busy to answer in time, a socket
 * closed during a restart). Not an answer about the client: a password, a database, too many
 * clients, a pooler's refusal, a certificate (any other code in the chain).
 */
export function isServerAway(err: unknown): boolean {
  let unexplained = false;
  for (let e = err, depth = 0; e && typeof e === 'object' && depth < 10; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string') {
      if (
        AWAY_SOCKET.has(code) ||
        AWAY_SQLSTATE.has(code) ||
        (/^08[0-9A-Z]{3}$/.test(code) && !REJECTED.has(code))
      )
        return true;
      if (!UNEXPLAINED.has(code)) return false;
      unexplained = true;
    }
    e = (e as { cause?: unknown }).cause;
  }
  return unexplained;
}

/** A short one-line description of anything thrown. */
export function describe(err: unknown): string {
  if (err instanceof AggregateError && !err.message && err.errors.length > 0) {
    return err.errors.map(describe).join('; '); // net's connect to every address of a name
  }
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/**
 * An error and its causes on one line, each with its code when it has one:
 * `connection failed [ERR_PGLEADERLOCK_CONNECTION] <- password authentication failed [28P01]`.
 */
export function describeChain(err: unknown): string {
  const parts: string[] = [];
  for (let e = err, depth = 0; e !== undefined && e !== null && depth < 10; depth++) {
    const code = typeof e === 'object' ? (e as { code?: unknown }).code : undefined;
    const text = describe(e);
    parts.push(typeof code === 'string' || typeof code === 'number' ? `${text} [${code}]` : text);
    e = typeof e === 'object' ? (e as { cause?: unknown }).cause : undefined;
  }
  return parts.join(' <- ');
}

/** Normalise anything thrown into an Error. */
export function toError(err: unknown): Error {
  return err instanceof Error ? err : new Error(describe(err), { cause: err });
}
