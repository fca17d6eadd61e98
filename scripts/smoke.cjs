// The built CommonJS entry loads and exports the public API.
const m = require('../dist/index.cjs');
for (const name of [
  'LeaderLock',
  'LockState',
  'ExponentialBackoff',
  'FixedInterval',
  'DecorrelatedJitter',
  'PgLeaderLockError',
  'ConnectionError',
  'LockError',
  'ShutdownError',
]) {
  if (!m[name]) throw new Error(`dist/index.cjs does not export ${name}`);
}
console.log('smoke (cjs): ok');
