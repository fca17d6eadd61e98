/**
 * The two elections behind one face, for the contract suite (contract.test.ts): each
 * adapter builds its class from the same options and exposes what the shared behaviours
 * need (start, shutdown, "in charge", the gained and lost events, onError, health()).
 * No vitest import here: the child-process fixture (test/fixtures/contract-subject.fixture.ts)
 * uses it too.
 */
import { FixedInterval, LeaderLock, type Logger, PartitionedLeadership } from '../../src/index.js';
import { keysOf } from '../../src/partitions/sql.js';

/** The options every behaviour passes, with the same meaning for both classes. */
export interface SubjectOptions {
  name: string;
  id: string;
  connectionString: string;
  healthIntervalMs?: number;
  queryTimeoutMs?: number;
  takeoverDelayMs?: number;
  callbackTimeoutMs?: number;
  closeTimeoutMs?: number;
  unref?: boolean;
  logger?: Logger;
}

/** What the behaviours read of `health()`: the probe fields both classes document. */
export interface SubjectHealth {
  readonly live: boolean;
  readonly ready: boolean;
  readonly reasons: readonly string[];
}

type Off = { signal?: AbortSignal };

export interface Subject {
  readonly id: string;
  start(): Promise<void>;
  shutdown(): Promise<void>;
  /** LeaderLock: `isLeader`; PartitionedLeadership: `owned.size > 0`. */
  readonly inCharge: boolean;
  /** LeaderLock: `onAcquired`; PartitionedLeadership: `onAssigned` (once per partition). */
  onGained(fn: () => unknown, options?: Off): void;
  /** LeaderLock: `onLost`; PartitionedLeadership: `onRevoked` with reason `'lost'` (once per partition). */
  onLost(fn: () => unknown, options?: Off): void;
  onError(fn: (error: Error) => unknown, options?: Off): void;
  health(): SubjectHealth;
  /** The object itself (for `new LockMetrics(target)`). */
  readonly target: LeaderLock | PartitionedLeadership;
  /** Its losses counter in `LockMetrics`' output. */
  readonly lossesMetric: string;
  /** Its state in one line, for failure messages. */
  readonly description: string;
}

export type SubjectKind = 'LeaderLock' | 'PartitionedLeadership';

export interface Adapter {
  readonly kind: SubjectKind;
  /** The registration names of the gained and lost events, for test titles. */
  readonly gained: string;
  readonly lost: string;
  /** `new <class>(options)` with the class's required options added (no connection is made). */
  construct(extra: Record<string, unknown>): unknown;
  make(options: SubjectOptions): Subject;
  /** key1 (`pg_locks.classid`) of every advisory lock this name takes or waits for. */
  classids(name: string): number[];
}

/** Partitions per worker in the suite: small, so that one worker owns them all at once. */
export const PARTITIONS = 4;

/** A connection string nothing listens on: constructing never connects. */
const NOWHERE = 'postgres://nobody@127.0.0.1:1/none';

const leaderLock: Adapter = {
  kind: 'LeaderLock',
  gained: 'onAcquired',
  lost: 'onLost',
  construct: (extra) =>
    new LeaderLock({ name: 'contract-validation', connectionString: NOWHERE, ...extra } as never),
  make(o) {
    const lock = new LeaderLock({
      // harness pacing, not under test: a quick retry after a loss (the default's first delay is 1 s)
      retryStrategy: new FixedInterval({ intervalMs: 25 }),
      ...o,
    });
    return {
      id: lock.id,
      target: lock,
      lossesMetric: 'pgleaderlock_losses_total',
      start: () => lock.start(),
      shutdown: () => lock.shutdown(),
      get inCharge() {
        return lock.isLeader;
      },
      onGained: (fn, options) => {
        lock.onAcquired(async () => {
          await fn();
        }, options);
      },
      onLost: (fn, options) => {
        lock.onLost(async () => {
          await fn();
        }, options);
      },
      onError: (fn, options) => {
        lock.onError(async (e) => {
          await fn(e);
        }, options);
      },
      health: () => lock.health(),
      get description() {
        return `state ${lock.state}, isLeader ${lock.isLeader}`;
      },
    };
  },
  classids: (name) => [LeaderLock.keysFromName(name)[0]],
};

const partitioned: Adapter = {
  kind: 'PartitionedLeadership',
  gained: 'onAssigned',
  lost: "onRevoked(reason 'lost')",
  construct: (extra) =>
    new PartitionedLeadership({
      name: 'contract-validation',
      partitions: PARTITIONS,
      connectionString: NOWHERE,
      ...extra,
    } as never),
  make(o) {
    const w = new PartitionedLeadership({ partitions: PARTITIONS, ...o });
    return {
      id: w.id,
      target: w,
      lossesMetric: 'pgleaderlock_partitions_losses_total',
      start: () => w.start(),
      shutdown: () => w.shutdown(),
      get inCharge() {
        return w.owned.size > 0;
      },
      onGained: (fn, options) => {
        w.onAssigned(async () => {
          await fn();
        }, options);
      },
      onLost: (fn, options) => {
        w.onRevoked(async (_partition, reason) => {
          if (reason === 'lost') await fn();
        }, options);
      },
      onError: (fn, options) => {
        w.onError(async (e) => {
          await fn(e);
        }, options);
      },
      health: () => w.health(),
      get description() {
        return `owned [${[...w.owned].join(', ')}], members [${w.memberIds.join(', ')}]`;
      },
    };
  },
  classids: (name) => {
    const k = keysOf(name);
    return [k.members, k.partitions];
  },
};

export const ADAPTERS: readonly Adapter[] = [leaderLock, partitioned];

/** Whether a backend's application_name is one of the sessions of the subject with this id. */
export function isSessionOf(app: string, id: string): boolean {
  const own = `pgleaderlock:${id}`;
  return app === own || app.startsWith(`${own}#`); // a partition worker's are `…#p<P>` and `…#watch`
}

export function adapterOf(kind: string): Adapter {
  const a = ADAPTERS.find((x) => x.kind === kind);
  if (!a)
    throw new Error(`no adapter ${JSON.stringify(kind)}; known: ${ADAPTERS.map((x) => x.kind).join(', ')}`);
  return a;
}

/**
 * Rows of `pg_locks` for this name's advisory locks, held or waited for, with the
 * application_name of the backend (run on a direct connection).
 */
export const LOCK_ROWS = `SELECT l.pid, l.granted, l.classid::text AS classid, l.objid::text AS objid,
       coalesce(a.application_name, '') AS app
  FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.objsubid = 2
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid = ANY($1::int4[]::oid[])`;
