/**
 * Partition workers for a test file: each test's workers carry ids under a fresh tag, and
 * after each test they are shut down and no session of theirs may be left on the server.
 */
import { afterEach } from 'vitest';
import { PartitionedLeadership, type PartitionedLeadershipOptions } from '../../src/index.js';
import { assertNoSessions, databaseUrl, testTag } from './db.js';

export function useWorkers(defaults: Partial<PartitionedLeadershipOptions> = {}): {
  worker(extra: Partial<PartitionedLeadershipOptions> & { name: string }): PartitionedLeadership;
  tag(): string;
} {
  let tag = testTag();
  let made: PartitionedLeadership[] = [];
  let n = 0;
  afterEach(async () => {
    await Promise.all(made.map((w) => w.shutdown({ timeoutMs: 5000 })));
    made = [];
    await assertNoSessions(tag);
    tag = testTag();
    n = 0;
  });
  return {
    worker(extra) {
      const w = new PartitionedLeadership({
        partitions: 4,
        connectionString: databaseUrl(),
        id: `${tag}-${n++}`,
        healthIntervalMs: 200,
        queryTimeoutMs: 1000,
        takeoverDelayMs: 0,
        ...defaults,
        ...extra,
      });
      made.push(w);
      return w;
    },
    tag: () => tag,
  };
}
