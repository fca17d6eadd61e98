/**
 * `new LockMetrics(workers)`: a partition worker's metrics, from its `stats()` and
 * `health()`, labelled with its name. metrics.ts renders them; docs/observability.md lists
 * them.
 */

import type { PartitionedLeadership, RevokeReason } from '../partitions/partitioned.js';
import { type MetricsSource, type MetricWriter, quoted } from './metric-source.js';

/** A snapshot of one partition worker's metrics (`new LockMetrics(workers).snapshot()`). */
export interface PartitionMetricsSnapshot {
  /** Whether `workers.health()` says live and ready. */
  readonly live: boolean;
  /** `workers.health().ready`. */
  readonly ready: boolean;
  /** The partitions this worker owns now (`owned.size`). */
  readonly owned: number;
  /** The members seen at the last reconcile, this worker included. */
  readonly members: number;
  /** Terms opened on this worker (a partition assigned), since it was created. */
  readonly assignments: number;
  /** Terms ended, by reason: handed to another member, lost, or handed back at shutdown. */
  readonly revocations: Readonly<Record<RevokeReason, number>>;
  /** Terms lost (the same as `revocations.lost`): the session ended, or a partition was found no longer held. */
  readonly losses: number;
}

const REASONS: readonly RevokeReason[] = ['rebalance', 'lost', 'shutdown'];

export class PartitionSource implements MetricsSource<PartitionMetricsSnapshot> {
  constructor(private readonly workers: PartitionedLeadership) {}

  snapshot(): PartitionMetricsSnapshot {
    const stats = this.workers.stats();
    const health = this.workers.health();
    return {
      live: health.live,
      ready: health.ready,
      owned: stats.owned,
      members: stats.members,
      assignments: stats.acquisitions,
      revocations: { ...stats.revocationsByReason },
      losses: stats.losses,
    };
  }

  render(s: PartitionMetricsSnapshot, metric: MetricWriter): void {
    const name = `name=${quoted(this.workers.name)}`;
    metric('partitions_owned', 'gauge', 'Partitions this worker owns now (owned.size).', [[name, s.owned]]);
    metric('partitions_members', 'gauge', 'Members seen at the last reconcile, this worker included.', [
      [name, s.members],
    ]);
    metric('live', 'gauge', '1 while workers.health().live.', [[name, s.live ? 1 : 0]]);
    metric('ready', 'gauge', '1 while workers.health().ready.', [[name, s.ready ? 1 : 0]]);
    metric('partitions_assignments_total', 'counter', 'Partition terms opened on this worker.', [
      [name, s.assignments],
    ]);
    metric(
      'partitions_revocations_total',
      'counter',
      'Partition terms ended on this worker, by reason (rebalance, lost, shutdown).',
      REASONS.map((reason) => [`${name},reason="${reason}"`, s.revocations[reason]]),
    );
    metric('partitions_losses_total', 'counter', 'Partition terms lost (revocations with reason lost).', [
      [name, s.losses],
    ]);
  }

  close(): void {
    // it reads stats() and health() when asked: nothing to detach
  }
}
