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
