// The built package loads through both entry points and exports the public API.
import { createRequire } from 'node:module';

const names = [
  'LeaderLock',
  'LockState',
  'ExponentialBackoff',
  'FixedInterval',
  'DecorrelatedJitter',
  'PgLeaderLockError',
  'ConnectionError',
  'LockError',
  'ShutdownError',
];
const entries = {
  'dist/index.js (ESM)': Object.fromEntries(Object.entries(await import('../dist/index.js'))),
  'dist/index.cjs (CommonJS)': createRequire(import.meta.url)('../dist/index.cjs'),
};
for (const [entry, mod] of Object.entries(entries)) {
  for (const name of names) {
    if (!mod[name]) throw new Error(`${entry} does not export ${name}`);
  }
  console.log(`smoke: ${entry} ok`);
}

// pgleaderlock/testing, by the package's name (its `exports` map), through both conditions;
// the fakes share the main entry's classes (one chunk), so `instanceof` holds across them
const require = createRequire(import.meta.url);
const testing = {
  'pgleaderlock/testing (import)': [await import('pgleaderlock/testing'), await import('pgleaderlock')],
  'pgleaderlock/testing (require)': [require('pgleaderlock/testing'), require('pgleaderlock')],
};
for (const [entry, [mod, main]] of Object.entries(testing)) {
  const lock = new mod.FakeLeaderLock();
  await lock.start();
  const term = await lock.elect();
  await lock.lose();
  await lock.shutdown();
  if (!(term.signal.reason instanceof main.TermEndedError))
    throw new Error(`${entry}: a fake term's abort reason is not the main entry's TermEndedError`);
  const workers = new mod.FakePartitionedLeadership({ partitions: 2 });
  await workers.start();
  await workers.assign([0, 1]);
  if (workers.owned.size !== 2) throw new Error(`${entry}: FakePartitionedLeadership did not assign`);
  await workers.shutdown();
  console.log(`smoke: ${entry} ok`);
}

// pgleaderlock/node-cron, by the package's name, through both conditions; it never loads
// node-cron (an optional peer dependency), and takes the main entry's classes at run time
for (const [entry, [mod, main]] of Object.entries({
  'pgleaderlock/node-cron (import)': [await import('pgleaderlock/node-cron'), await import('pgleaderlock')],
  'pgleaderlock/node-cron (require)': [require('pgleaderlock/node-cron'), require('pgleaderlock')],
})) {
  for (const name of ['leaderCoordinator', 'parseFireKey', 'fireKey']) {
    if (typeof mod[name] !== 'function') throw new Error(`${entry} does not export ${name}`);
  }
  const lock = new main.LeaderLock({
    name: 'smoke',
    connectionString: 'postgres://localhost/x',
    fencing: true,
  });
  const coordinator = mod.leaderCoordinator(lock, { pool: { query: async () => ({ rows: [] }) } });
  if ((await coordinator.shouldRun('smoke:2026-01-01T00:00:00.000Z', 30_000)) !== false)
    throw new Error(`${entry}: a lock that was never started may not run a fire`);
  console.log(`smoke: ${entry} ok`);
}
