// A PartitionedLeadership worker in a process of its own (suite.mjs kills it): prints
// `ready` once it owns a partition, then runs until killed.
import { PartitionedLeadership } from 'pgleaderlock';

const w = new PartitionedLeadership({
  connectionString: process.env.PG_URL,
  name: process.env.PARTS_NAME,
  partitions: 4,
  healthIntervalMs: 500,
  queryTimeoutMs: 1000,
});
await w.start();
const ready = setInterval(() => {
  if (w.owned.size > 0) {
    clearInterval(ready);
    console.log('ready');
  }
}, 20);
