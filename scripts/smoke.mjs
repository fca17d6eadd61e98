// The built ESM entry loads and exports the public API.
const m = Object.fromEntries(Object.entries(await import('../dist/index.js')));

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
