/**
 * The numbers operators alert on, from one lock or one partition worker, with no
 * dependency: `LockMetrics` listens to the target's public events and `stats()`, and renders
 * the Prometheus text format (`probes()` and `pgleaderlock run --http` serve it).
 * docs/observability.md wires the same snapshot into prom-client and OpenTelemetry. The
 * partition worker's part is metrics-partitions.ts.
 */

import { LockState } from '../core/state.js';
import { show } from '../core/validate.js';
import type { LeaderLock } from '../leader/leader-lock.js';
import type { PartitionedLeadership } from '../partitions/partitioned.js';
import { type MetricsSource, type MetricWriter, quoted } from './metric-source.js';
import { type PartitionMetricsSnapshot, PartitionSource } from './metrics-partitions.js';

export type { PartitionMetricsSnapshot } from './metrics-partitions.js';

/** A snapshot of one lock's metrics (`LockMetrics.snapshot()`). */
export interface LockMetricsSnapshot {
  /** `lock.isLeader`. */
  readonly isLeader: boolean;
  /** `lock.state`. */
  readonly state: LockState;
  /** Whether `lock.health()` says live and ready. */
  readonly live: boolean;
  /** `lock.health().ready`. */
  readonly ready: boolean;
  /** State changes, by the state entered, since the metrics were attached. */
  readonly transitions: Readonly<Record<LockState, number>>;
  /** Times leadership was acquired (`lock.stats()`, as the rest). */
  readonly acquisitions: number;
  /** Involuntary losses (`onLost`). */
  readonly losses: number;
  /** Voluntary releases (`onReleased`: `stepDown()`, `shutdown()`). */
  readonly releases: number;
  /** Attempts that found the lock held elsewhere (`onAcquireFailed`). */
  readonly failedAttempts: number;
  /** Acquisitions that held the lock for the takeover delay before their term opened. */
  readonly takeoverFences: number;
  /** Total time as LEADER, the current stretch included. */
  readonly leaderMs: number;
  /**
   * The last failover this candidate ended by becoming leader: from the last moment it knew
   * another candidate held the lock (poll mode: its last refused attempt, so within one
   * retry delay of the real gap; wait mode: the grant, which the server gives a queued
   * waiter the moment the holder's session ends) to its own term opening, the takeover
   * fence included. Not included: how long the server took to end a dead leader's session
   * (bounded by `safety.serverReleaseMs`, docs/safety.md). Null until this candidate has
   * taken over from another.
   */
  readonly lastFailoverMs: number | null;
  /** `leaseExpiresAt - now` while leader (may be negative when lapsed); null otherwise. */
  readonly leaseRemainingMs: number | null;
}

const STATES = Object.values(LockState) as LockState[];

/** Which of the two a target looks like, by the methods `LockMetrics` reads. */
function shapeOf(target: unknown): 'lock' | 'partitioned' | null {
  const t = target as Record<string, unknown> | null;
  if (
    typeof t !== 'object' ||
    t === null ||
    typeof t.stats !== 'function' ||
    typeof t.health !== 'function'
  ) {
    return null;
  }
  if (typeof t.runForEach === 'function' && typeof t.name === 'string') return 'partitioned';
  if (typeof t.onStateChange === 'function' && typeof t.key1 === 'number') return 'lock';
  return null;
}

/** What `LockMetrics` reads: a lock, or a partition worker. */
export type MetricsTarget = LeaderLock | PartitionedLeadership;

/** `LockMetrics.snapshot()` of a lock, or of a partition worker. */
export type MetricsSnapshotOf<T extends MetricsTarget> = T extends PartitionedLeadership
  ? PartitionMetricsSnapshot
  : LockMetricsSnapshot;

/** The Prometheus text exposition format (version 0.0.4) of what `render` writes. */
function exposition(render: (metric: MetricWriter) => void): string {
  const out: string[] = [];
  render((name, type, help, samples) => {
    out.push(`# HELP pgleaderlock_${name} ${help}`, `# TYPE pgleaderlock_${name} ${type}`);
    for (const [labels, value] of samples) out.push(`pgleaderlock_${name}{${labels}} ${value}`);
  });
  return `${out.join('\n')}\n`;
}

const seconds = (ms: number): number => Math.round(ms) / 1000;

/**
 * Metrics for one lock or one partition worker. Attach before `start()` to count every
 * transition; `close()` (or `using`) removes its listeners.
 *
 * @example
 * ```ts
 * const metrics = new LockMetrics(lock); // or new LockMetrics(workers)
 * http.createServer((req, res) => res.end(metrics.prometheus())).listen(9464);
 * ```
 */
export class LockMetrics<T extends MetricsTarget = LeaderLock> implements Disposable {
  private readonly source: MetricsSource<MetricsSnapshotOf<T>>;

  constructor(
    target: T,
    /** The clock `leaseExpiresAt` is on: `performance.now()` unless the lock was given a clock. */
    now: () => number = () => performance.now(),
  ) {
    let source: MetricsSource<LockMetricsSnapshot> | MetricsSource<PartitionMetricsSnapshot>;
    // the public shape, not `instanceof`: a lock made by the other build (ESM and CommonJS
    // both loaded) is a lock all the same
    const kind = shapeOf(target);
    if (kind === 'partitioned') source = new PartitionSource(target as PartitionedLeadership);
    else if (kind === 'lock') source = new LockSource(target as LeaderLock, now);
    else {
      throw new TypeError(
        `LockMetrics needs a LeaderLock or a PartitionedLeadership, received ${show(target)}`,
      );
    }
    this.source = source as MetricsSource<MetricsSnapshotOf<T>>;
  }

  /** The current numbers as an object, for any other metrics library. */
  snapshot(): MetricsSnapshotOf<T> {
    return this.source.snapshot();
  }

  /**
   * The Prometheus text exposition format (version 0.0.4): a lock's metrics labelled with
   * its name when it has one and its keys (`name="jobs",lock="key1,key2"`), a partition
   * worker's with its name (`name="…"`).
   */
  prometheus(): string {
    const s = this.source.snapshot();
    return exposition((metric) => this.source.render(s, metric));
  }

  /** Remove the listeners from the target; the numbers stop changing. */
  close(): void {
    this.source.close();
  }

  /** `close()`, for `using`. */
  [Symbol.dispose](): void {
    this.close();
  }
}

/** A lock's metrics: its events (transitions, failover) and `stats()`. */
class LockSource implements MetricsSource<LockMetricsSnapshot> {
  private readonly listening = new AbortController();
  private readonly transitions = Object.fromEntries(STATES.map((s) => [s, 0])) as Record<LockState, number>;
  /** Since this candidate's own last term: it saw another hold the lock (a refusal, a new leader). */
  private sawHolder = false;
  /** Poll mode: its last refused attempt. */
  private lastRefused: number | null = null;
  /** Granted under the takeover delay: the previous holder's session had just ended. */
  private grantedAt: number | null = null;
  private lastFailoverMs: number | null = null;

  constructor(
    private readonly lock: LeaderLock,
    private readonly now: () => number,
  ) {
    const options = { signal: this.listening.signal };
    lock.onStateChange((_from, to) => {
      this.transitions[to as LockState] = (this.transitions[to as LockState] ?? 0) + 1;
    }, options);
    lock.onAcquireFailed(() => {
      this.sawHolder = true;
      this.lastRefused = this.now();
    }, options);
    lock.onNewLeader(() => {
      this.sawHolder = true;
    }, options);
    lock.onTakeoverFence(({ since }) => {
      this.grantedAt = since; // the lock's moment: the callback can run later
    }, options);
    lock.onAcquired(() => {
      const now = this.now();
      if (this.sawHolder || this.grantedAt !== null) {
        // poll mode: the holder left after our last refusal; wait mode: the server granted
        // the lock the moment the holder's session ended (now, or when the fence began)
        const from =
          this.lock.acquireMode === 'poll'
            ? (this.lastRefused ?? this.grantedAt ?? now)
            : (this.grantedAt ?? now);
        this.lastFailoverMs = now - from;
      }
      this.sawHolder = false;
      this.lastRefused = null;
      this.grantedAt = null;
    }, options);
  }

  snapshot(): LockMetricsSnapshot {
    const stats = this.lock.stats();
    const health = this.lock.health();
    const lease = this.lock.leaseExpiresAt;
    return {
      isLeader: this.lock.isLeader,
      state: stats.state,
      live: health.live,
      ready: health.ready,
      transitions: { ...this.transitions },
      acquisitions: stats.acquisitions,
      losses: stats.losses,
      releases: stats.releases,
      failedAttempts: stats.failedAttempts,
      takeoverFences: stats.takeoverFences,
      leaderMs: stats.leaderMs,
      lastFailoverMs: this.lastFailoverMs,
      leaseRemainingMs: stats.state === LockState.LEADER && lease !== null ? lease - this.now() : null,
    };
  }

  render(s: LockMetricsSnapshot, metric: MetricWriter): void {
    // its name when it has one (dashboards read names, not hashed keys), and its keys always
    const keys = `lock="${this.lock.key1},${this.lock.key2}"`;
    const name: unknown = this.lock.name; // undefined on a lock of an older build
    const lock = typeof name === 'string' ? `name=${quoted(name)},${keys}` : keys;
    metric('is_leader', 'gauge', '1 while this process may act as leader (lock.isLeader), else 0.', [
      [lock, s.isLeader ? 1 : 0],
    ]);
    metric(
      'state',
      'gauge',
      'The lock state: 1 for the current one.',
      STATES.map((st) => [`${lock},state="${st}"`, st === s.state ? 1 : 0]),
    );
    metric('live', 'gauge', '1 while lock.health().live.', [[lock, s.live ? 1 : 0]]);
    metric('ready', 'gauge', '1 while lock.health().ready.', [[lock, s.ready ? 1 : 0]]);
    metric(
      'transitions_total',
      'counter',
      'State changes, by the state entered.',
      STATES.map((st) => [`${lock},to="${st}"`, s.transitions[st]]),
    );
    metric('acquisitions_total', 'counter', 'Times leadership was acquired.', [[lock, s.acquisitions]]);
    metric('losses_total', 'counter', 'Involuntary losses of leadership.', [[lock, s.losses]]);
    metric('releases_total', 'counter', 'Voluntary releases (stepDown, shutdown).', [[lock, s.releases]]);
    metric('failed_attempts_total', 'counter', 'Attempts that found the lock held by another.', [
      [lock, s.failedAttempts],
    ]);
    metric('takeover_delays_total', 'counter', 'Acquisitions that waited out the takeover delay.', [
      [lock, s.takeoverFences],
    ]);
    metric('leader_seconds_total', 'counter', 'Time spent as leader.', [[lock, seconds(s.leaderMs)]]);
    if (s.lastFailoverMs !== null) {
      metric(
        'last_failover_seconds',
        'gauge',
        'The last takeover by this process: from when it last knew another held the lock to its term opening.',
        [[lock, seconds(s.lastFailoverMs)]],
      );
    }
    if (s.leaseRemainingMs !== null) {
      metric('lease_remaining_seconds', 'gauge', 'Time left on the lease behind isLeader.', [
        [lock, seconds(s.leaseRemainingMs)],
      ]);
    }
  }

  close(): void {
    this.listening.abort();
  }
}
