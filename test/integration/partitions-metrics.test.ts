/**
 * `new LockMetrics(workers)` on partition workers against PostgreSQL: the owned and members
 * gauges, assignments and revocations by reason as a second worker joins and leaves, losses
 * after pg_terminate_backend, and the text format.
 */
import { describe, expect, expectTypeOf, it } from 'vitest';
import {
  LeaderLock,
  LockMetrics,
  type LockMetricsSnapshot,
  type PartitionMetricsSnapshot,
} from '../../src/index.js';
import { adminQuery, databaseUrl, eventually } from '../harness/db.js';
import { useWorkers } from '../harness/workers.js';

const workers = useWorkers({ healthIntervalMs: 200, takeoverDelayMs: 0 });
const worker = workers.worker;

/** The value of one sample, e.g. sample(text, 'pgleaderlock_partitions_owned'). */
function sample(text: string, name: string, labels = ''): number | undefined {
  const re = new RegExp(`^${name}\\{[^}]*${labels}[^}]*\\} (\\S+)$`, 'm');
  const m = re.exec(text);
  return m ? Number(m[1]) : undefined;
}

describe('LockMetrics on a PartitionedLeadership', () => {
  it('a never-started worker renders every family, labelled with its name (escaped)', () => {
    const w = worker({ name: `pm-${workers.tag()} "quoted" \\ back` });
    using metrics = new LockMetrics(w);
    const name = `name="pm-${workers.tag()} \\"quoted\\" \\\\ back"`;
    expect(metrics.prometheus()).toBe(
      [
        '# HELP pgleaderlock_partitions_owned Partitions this worker owns now (owned.size).',
        '# TYPE pgleaderlock_partitions_owned gauge',
        `pgleaderlock_partitions_owned{${name}} 0`,
        '# HELP pgleaderlock_partitions_members Members seen at the last reconcile, this worker included.',
        '# TYPE pgleaderlock_partitions_members gauge',
        `pgleaderlock_partitions_members{${name}} 0`,
        '# HELP pgleaderlock_live 1 while workers.health().live.',
        '# TYPE pgleaderlock_live gauge',
        `pgleaderlock_live{${name}} 1`,
        '# HELP pgleaderlock_ready 1 while workers.health().ready.',
        '# TYPE pgleaderlock_ready gauge',
        `pgleaderlock_ready{${name}} 0`,
        '# HELP pgleaderlock_partitions_assignments_total Partition terms opened on this worker.',
        '# TYPE pgleaderlock_partitions_assignments_total counter',
        `pgleaderlock_partitions_assignments_total{${name}} 0`,
        '# HELP pgleaderlock_partitions_revocations_total Partition terms ended on this worker, by reason (rebalance, lost, shutdown).',
        '# TYPE pgleaderlock_partitions_revocations_total counter',
        `pgleaderlock_partitions_revocations_total{${name},reason="rebalance"} 0`,
        `pgleaderlock_partitions_revocations_total{${name},reason="lost"} 0`,
        `pgleaderlock_partitions_revocations_total{${name},reason="shutdown"} 0`,
        '# HELP pgleaderlock_partitions_losses_total Partition terms lost (revocations with reason lost).',
        '# TYPE pgleaderlock_partitions_losses_total counter',
        `pgleaderlock_partitions_losses_total{${name}} 0`,
        '',
      ].join('\n'),
    );
  });

  it('owned equals owned.size and members the member count; a join moves assignments and rebalance revocations, a leave shutdown revocations', async () => {
    const name = `pm-${workers.tag()}`;
    const a = worker({ name });
    using am = new LockMetrics(a);
    await a.start();
    expect(await a.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    expect(am.snapshot()).toEqual({
      live: true,
      ready: true,
      owned: 4,
      members: 1,
      assignments: 4,
      revocations: { rebalance: 0, lost: 0, shutdown: 0 },
      losses: 0,
    });
    const text = am.prometheus();
    expect(sample(text, 'pgleaderlock_partitions_owned')).toBe(a.owned.size);
    expect(sample(text, 'pgleaderlock_partitions_members')).toBe(1);
    expect(sample(text, 'pgleaderlock_ready')).toBe(1);

    // b joins: a hands two partitions over, b opens them
    const b = worker({ name });
    using bm = new LockMetrics(b);
    await b.start();
    await eventually(() => a.owned.size === 2 && b.owned.size === 2, { what: 'a 2/2 split' });
    expect(am.snapshot()).toMatchObject({
      owned: a.owned.size,
      members: 2,
      assignments: 4,
      revocations: { rebalance: 2, lost: 0, shutdown: 0 },
      losses: 0,
    });
    expect(bm.snapshot()).toMatchObject({ owned: b.owned.size, members: 2, assignments: 2 });
    expect(sample(am.prometheus(), 'pgleaderlock_partitions_revocations_total', 'reason="rebalance"')).toBe(
      2,
    );
    expect(sample(bm.prometheus(), 'pgleaderlock_partitions_assignments_total')).toBe(2);

    // b leaves: its two are handed back at shutdown, and a opens them again
    await b.shutdown();
    expect(bm.snapshot()).toMatchObject({
      owned: 0,
      assignments: 2,
      revocations: { rebalance: 0, lost: 0, shutdown: 2 },
      ready: false,
    });
    await eventually(() => a.owned.size === 4, { what: 'a to own all four again' });
    expect(am.snapshot()).toMatchObject({ owned: 4, members: 1, assignments: 6 });
    expect(sample(am.prometheus(), 'pgleaderlock_partitions_owned')).toBe(a.owned.size);
  });

  it('pg_terminate_backend on the ownership session: losses and lost revocations count the partitions it owned', async () => {
    const w = worker({ name: `pm-${workers.tag()}` });
    using metrics = new LockMetrics(w);
    await w.start();
    expect(await w.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    await adminQuery(
      databaseUrl(),
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
      [`pgleaderlock:${w.id}#p4`],
    );
    await eventually(() => metrics.snapshot().losses === 4, { what: 'four losses' });
    expect(metrics.snapshot().revocations).toEqual({ rebalance: 0, lost: 4, shutdown: 0 });
    expect(sample(metrics.prometheus(), 'pgleaderlock_partitions_losses_total')).toBe(4);
    // it reads the worker's counters when asked: attached later, it reports the same
    using late = new LockMetrics(w);
    expect(late.snapshot()).toMatchObject({ losses: 4, revocations: { rebalance: 0, lost: 4, shutdown: 0 } });
    expect(sample(metrics.prometheus(), 'pgleaderlock_partitions_revocations_total', 'reason="lost"')).toBe(
      4,
    );
    // it reconnects and takes them again
    await eventually(() => metrics.snapshot().owned === 4, {
      what: 'all four owned again',
      timeoutMs: 10_000,
    });
    expect(metrics.snapshot()).toMatchObject({ assignments: 8, losses: 4 });
  });

  it('snapshot() is typed by its target: a partition snapshot for a worker, the lock snapshot for a lock', () => {
    const w = worker({ name: `pm-${workers.tag()}` });
    using wm = new LockMetrics(w);
    expectTypeOf(wm.snapshot()).toEqualTypeOf<PartitionMetricsSnapshot>();
    using lm = new LockMetrics(new LeaderLock({ key1: 1, key2: 2, connectionString: databaseUrl() }));
    expectTypeOf(lm.snapshot()).toEqualTypeOf<LockMetricsSnapshot>();
    expect(Object.keys(wm.snapshot()).sort()).toEqual(
      ['assignments', 'live', 'losses', 'members', 'owned', 'ready', 'revocations'].sort(),
    );
    expect(lm.snapshot()).toHaveProperty('isLeader', false);
  });

  it('refuses anything but a LeaderLock or a PartitionedLeadership, naming what it got', () => {
    expect(() => new LockMetrics({} as unknown as LeaderLock)).toThrow(
      new TypeError('LockMetrics needs a LeaderLock or a PartitionedLeadership, received {}'),
    );
  });
});
