// Leads, watches and owns partitions, shuts everything down, prints `shut down`, and must then
// exit by itself (suite.mjs): no timer, socket or listener left behind.
import { LeaderLock, LeaderWatch, PartitionedLeadership } from 'pgleaderlock';

const url = process.env.PG_URL;
const key = { key1: 41_000, key2: process.pid };
const lock = new LeaderLock({ connectionString: url, ...key, healthIntervalMs: 500 });
const follower = new LeaderLock({ connectionString: url, ...key, acquireMode: 'wait' });
const watch = new LeaderWatch({ connectionString: url, ...key });
const parts = new PartitionedLeadership({
  connectionString: url,
  name: `rt-exit-${process.pid}`,
  partitions: 2,
});
await Promise.all([lock.start(), watch.start(), parts.start()]);
if (!(await lock.waitForLeadership({ timeoutMs: 10_000 }))) throw new Error('did not lead');
await follower.start();
await parts.waitForBalance({ timeoutMs: 10_000 });
await new Promise((resolve) => setTimeout(resolve, 300));
await follower.shutdown();
await lock.shutdown();
await watch.close();
await parts.shutdown();
console.log('shut down');
