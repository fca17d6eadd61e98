// The built ESM entry loads and exports the public API.
import * as m from '../dist/index.js';

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
  if (!m[name]) throw new Error(`dist/index.js does not export ${name}`);
}
console.log('smoke (esm): ok');
