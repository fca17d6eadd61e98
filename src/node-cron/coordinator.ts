/**
 * A node-cron v4 run coordinator backed by a `LeaderLock` with fencing: a fire runs only on
 * the leader, and at most once across every replica that shares the lock and the database,
 * through a claim row written under the term's fencing epoch (docs/node-cron.md).
 */
import type pg from 'pg';
import { ConnectionError, type LeaderLock, PgLeaderLockError, type Term } from 'pgleaderlock';
import { type Clock, isClock, sleep, systemClock } from '../core/clock.js';
import { checkDuration, show } from '../core/validate.js';
import { type Fire, parseFireKey } from './key.js';
import {
  claimSql,
  cleanupSql,
  createClaimsSql,
  DEFAULT_CLAIMS_TABLE,
  finishSql,
  isQuotedName,
  quoteClaimsTable,
  withdrawSql,
} from './sql.js';

/** What the claims are written through: a `pg.Pool` (recommended), or a `pg.Client` of yours. */
export interface Queryable {
  /** Run one statement with parameters (`pg.Pool.query`). */
  query<R extends pg.QueryResultRow = pg.QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<pg.QueryResult<R>>;
}

/** Options of {@link leaderCoordinator}. Durations are milliseconds. */
export interface LeaderCoordinatorOptions {
  /**
   * A connection pool on the database that holds the lock's epoch table (the server the
   * lock leads on). Claims are written through it; the coordinator never ends it.
   */
  pool: Queryable;
  /**
   * The scope of the claims: coordinators with the same name share them (a fire of a task
   * runs once across all of them). Default: the lock's keys, `"<key1>:<key2>"`.
   */
  name?: string;
  /** The claims table, created if missing. Default `pgleaderlock_cron_claims`. */
  table?: string;
  /** How long claiming a fire may take before the fire is skipped. Default 5000. */
  timeoutMs?: number;
  /**
   * How long a claim is kept after its fire time (at least node-cron's `ttlMs`, the task's
   * `distributedLease`). Longer than any clock skew between replicas: a replica whose clock
   * is behind fires the same key later, and must still find the claim. Default 24 h.
   */
  retainMs?: number;
  /**
   * A fire that comes while this process is not leading waits this long for a term to open
   * (a handover in progress) before it is skipped. Default 0: skipped at once.
   */
  leaderWaitMs?: number;
  /** Time source (tests; default `performance.now()` and the global timers, unref'd). */
  clock?: Clock;
}

/** A node-cron v4 `RunCoordinator`: pass it as a task's `runCoordinator`, or to `setRunCoordinator`. */
export interface LeaderCoordinator {
  /**
   * True if this process may run the fire `key` (`"<task>:<ISO time>"`): it leads, and its
   * claim of the fire succeeded under its term's epoch. False when it does not lead, or the
   * fire was claimed already, or the term changed. Rejects (node-cron then skips the fire)
   * when the database does not answer within `timeoutMs`, or fails.
   */
  shouldRun(key: string, ttlMs?: number): Promise<boolean>;
  /** Marks a fire this process ran as finished (`finished_at` of its claim). */
  onComplete(key: string): Promise<void>;
}

const KNOWN = new Set(['pool', 'name', 'table', 'timeoutMs', 'retainMs', 'leaderWaitMs', 'clock']);
const DAY_MS = 86_400_000;
/** Old claims are swept after a successful claim, at most this often per coordinator. */
const CLEANUP_EVERY_MS = 600_000;
/** A claim held by a previous term's unfinished claim is asked again this often, within `leaderWaitMs`. */
const RECLAIM_MS = 20;

/**
 * A run coordinator for node-cron v4 tasks (`distributed: true`) that runs each fire only on
 * the leader of `lock`, and at most once across replicas. `lock` must have `fencing` on.
 *
 * ```ts
 * cron.schedule('0 3 * * *', report, {
 *   name: 'nightly-report', distributed: true, runCoordinator: leaderCoordinator(lock, { pool }),
 * });
 * ```
 */
export function leaderCoordinator(lock: LeaderLock, options: LeaderCoordinatorOptions): LeaderCoordinator {
  return new FencedCoordinator(lock, options);
}

/** `$1 fire_at, $2 scope, $3 task, $4 epoch` of finishSql and withdrawSql. */
function fireParams(fire: Fire, scope: string, epoch: string): unknown[] {
  return [fire.fireAt.toISOString(), scope, fire.task, epoch];
}

interface Claimed {
  fire: Fire;
  epoch: string;
}

class FencedCoordinator implements LeaderCoordinator {
  private readonly pool: Queryable;
  private readonly scope: string;
  private readonly claims: string;
  private readonly epochs: string;
  private readonly timeoutMs: number;
  private readonly leaderWaitMs: number;
  private readonly clock: Clock;
  private retainMs: number;
  private table: Promise<void> | null = null;
  private readonly claimed = new Map<string, Claimed>();
  private lastCleanup = Number.NEGATIVE_INFINITY;
  private cleaning = false;

  constructor(
    private readonly lock: LeaderLock,
    options: LeaderCoordinatorOptions,
  ) {
    if (typeof options !== 'object' || options === null) {
      throw new TypeError(`leaderCoordinator options must be an object, received ${show(options)}`);
    }
    for (const key of Object.keys(options)) {
      if (!KNOWN.has(key)) throw new TypeError(`unknown leaderCoordinator option ${JSON.stringify(key)}`);
    }
    const epochs = lock?.fencingTable;
    if (epochs === null || epochs === undefined) {
      throw new TypeError(
        'leaderCoordinator needs a LeaderLock with fencing on (fencing: true): each fire is claimed under the term’s epoch',
      );
    }
    if (!isQuotedName(epochs)) throw new TypeError(`lock.fencingTable is not a quoted name: ${show(epochs)}`);
    const pool = options.pool;
    if (typeof pool !== 'object' || pool === null || typeof pool.query !== 'function') {
      throw new TypeError(`pool must be a pg.Pool (or anything with query()), received ${show(pool)}`);
    }
    const scope = options.name ?? `${lock.key1}:${lock.key2}`;
    if (typeof scope !== 'string' || scope.length === 0) {
      throw new TypeError(`name must be a non-empty string, received ${show(options.name)}`);
    }
    this.pool = pool;
    this.scope = scope;
    this.epochs = epochs;
    this.claims = quoteClaimsTable(options.table ?? DEFAULT_CLAIMS_TABLE);
    this.timeoutMs = checkDuration('timeoutMs', options.timeoutMs ?? 5000);
    if (this.timeoutMs === 0)
      throw new RangeError('timeoutMs must be greater than 0 (milliseconds), received 0');
    this.retainMs = checkDuration('retainMs', options.retainMs ?? DAY_MS);
    this.leaderWaitMs = checkDuration('leaderWaitMs', options.leaderWaitMs ?? 0);
    if (options.clock !== undefined && !isClock(options.clock)) {
      throw new TypeError(
        `clock must have now, setTimeout and clearTimeout methods, received ${show(options.clock)}`,
      );
    }
    this.clock = options.clock ?? systemClock;
  }

  async shouldRun(key: string, ttlMs = 0): Promise<boolean> {
    const fire = parseFireKey(key);
    const until = this.clock.now() + this.leaderWaitMs;
    if (typeof ttlMs === 'number' && Number.isFinite(ttlMs) && ttlMs > this.retainMs) this.retainMs = ttlMs;
    const term = await this.leading();
    if (term === null) return false;
    if (term.epoch === null) throw new PgLeaderLockError('the lock’s term has no fencing epoch');
    const epoch = term.epoch.toString();
    const inTerm = () => this.lock.term?.id === term.id && this.lock.isLeader;
    for (;;) {
      const rows = await this.query<{ outcome: 'claimed' | 'pending' }>(
        `claiming the fire ${show(key)}`,
        claimSql(this.claims, this.epochs),
        [
          fire.fireAt.toISOString(),
          this.scope,
          fire.task,
          this.lock.id,
          this.lock.key1,
          this.lock.key2,
          epoch,
        ],
      );
      const outcome = rows[0]?.outcome;
      if (outcome === 'claimed') break;
      // held by a previous term's claim that is not finished: its term may have ended while
      // it was in flight, and its withdrawal not be in yet (a handover at the fire's second);
      // within leaderWaitMs, ask again
      if (outcome !== 'pending' || this.clock.now() + RECLAIM_MS > until || !inTerm()) return false;
      await sleep(this.clock, RECLAIM_MS);
      if (!inTerm()) return false;
    }
    if (!inTerm()) {
      // the term ended while the claim was in flight (a stepDown at the fire's second): never
      // run outside a term; withdraw the claim so that the next leader can still take the fire
      await this.query(
        'withdrawing a claim',
        withdrawSql(this.claims),
        fireParams(fire, this.scope, epoch),
      ).catch(
        () => {}, // then the fire stays claimed and is skipped: at most once either way
      );
      return false;
    }
    this.claimed.set(key, { fire, epoch });
    this.sweep();
    return true;
  }

  async onComplete(key: string): Promise<void> {
    const claim = this.claimed.get(key);
    if (claim === undefined) return;
    this.claimed.delete(key);
    await this.query(
      `finishing the fire ${show(key)}`,
      finishSql(this.claims),
      fireParams(claim.fire, this.scope, claim.epoch),
    );
  }

  /** The current term if this process leads, after waiting up to `leaderWaitMs` for one. */
  private async leading(): Promise<Term | null> {
    const now = this.lock.term;
    if (now !== null && this.lock.isLeader) return now;
    if (this.leaderWaitMs === 0) return null;
    if (!(await this.lock.waitForLeadership({ timeoutMs: this.leaderWaitMs }))) return null;
    const term = this.lock.term;
    return term !== null && this.lock.isLeader ? term : null;
  }

  private async query<R extends pg.QueryResultRow>(
    what: string,
    text: string,
    values: unknown[],
  ): Promise<R[]> {
    await this.ensureTable();
    return (await this.bounded(what, this.pool.query<R>(text, values))).rows;
  }

  private ensureTable(): Promise<void> {
    this.table ??= this.bounded(
      'creating the claims table',
      this.pool.query(createClaimsSql(this.claims)),
    ).then(
      () => {},
      (err: unknown) => {
        this.table = null; // try again at the next fire
        // two replicas creating it at once: one wins, the other sees a duplicate
        const code = (err as { cause?: { code?: unknown } }).cause?.code;
        if (code === '42P07' || code === '23505') return;
        throw err;
      },
    );
    return this.table;
  }

  /** `promise`, or a rejection after `timeoutMs`; database errors wrapped with what was being done. */
  private async bounded<T>(what: string, promise: Promise<T>): Promise<T> {
    let timer: unknown;
    const late = new Promise<never>((_, reject) => {
      timer = this.clock.setTimeout(() => {
        reject(
          new ConnectionError(
            `pgleaderlock/node-cron: ${what} took longer than ${this.timeoutMs} ms; the fire is skipped`,
            {
              code: 'ERR_PGLEADERLOCK_QUERY_TIMEOUT',
            },
          ),
        );
      }, this.timeoutMs);
    });
    promise.catch(() => {}); // a late failure after the timeout is not unhandled
    try {
      return await Promise.race([promise, late]);
    } catch (err) {
      if (err instanceof PgLeaderLockError) throw err;
      const message = err instanceof Error ? err.message : String(err);
      throw new PgLeaderLockError(`pgleaderlock/node-cron: ${what} failed: ${message}`, { cause: err });
    } finally {
      this.clock.clearTimeout(timer);
    }
  }

  /** Delete this scope's claims older than `retainMs`, in the background, at most every 10 minutes. */
  private sweep(): void {
    const now = this.clock.now();
    if (this.cleaning || now - this.lastCleanup < CLEANUP_EVERY_MS) return;
    this.cleaning = true;
    this.lastCleanup = now;
    this.bounded('deleting old claims', this.pool.query(cleanupSql(this.claims), [this.scope, this.retainMs]))
      .catch(() => {
        this.lastCleanup = Number.NEGATIVE_INFINITY; // try again after the next claim
      })
      .finally(() => {
        this.cleaning = false;
      });
  }
}
