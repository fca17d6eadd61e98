/**
 * A wait-mode follower (default options) after a server restart, on a real server: a plain
 * client holds the lock, the follower queues behind it for WAIT_MS, the server stops (fast)
 * and starts again; measured from the moment `start()` saw it accept connections to the
 * follower's grant (`onTakeoverFence`'s moment: a grant after a restart has no proof of
 * drain, so its term opens after the 250 ms takeover delay) and to its term opening.
 * `npx tsx bench/restart-follow.ts [trials] [waitMs]` (docs/safety.md).
 */
import pg from 'pg';
import { startPgServer } from '../src/cli/embedded-pg.js';
import { LeaderLock } from '../src/index.js';

const TRIALS = Number(process.argv[2] ?? 5);
const WAIT_MS = Number(process.argv[3] ?? 3000);
const server = await startPgServer();
const grants: number[] = [];
const terms: number[] = [];
try {
  for (let trial = 0; trial < TRIALS; trial++) {
    const key1 = 4242;
    const key2 = trial;
    const holder = new pg.Client({ connectionString: server.url });
    holder.on('error', () => {});
    await holder.connect();
    await holder.query('SELECT pg_advisory_lock($1, $2)', [key1, key2]);
    const lock = new LeaderLock({ connectionString: server.url, key1, key2 });
    lock.onError(() => {});
    let grantedAt = 0;
    let acquiredAt = 0;
    lock.onTakeoverFence(() => {
      grantedAt = performance.now();
    });
    lock.onAcquired(() => {
      acquiredAt = performance.now();
    });
    await lock.start();
    await new Promise((r) => setTimeout(r, WAIT_MS));
    await server.stop('fast');
    await server.start();
    const upAt = performance.now();
    const deadline = upAt + 60_000;
    while (acquiredAt === 0 && performance.now() < deadline) await new Promise((r) => setTimeout(r, 1));
    grants.push((grantedAt || acquiredAt) - upAt);
    terms.push(acquiredAt - upAt);
    await lock.shutdown();
    await holder.end().catch(() => {});
  }
} finally {
  await server.dispose();
}
const fmt = (xs: number[]): string => {
  const s = [...xs].sort((a, b) => a - b);
  return `p50 ${s[Math.floor(s.length / 2)]?.toFixed(0)} ms (${s.map((x) => x.toFixed(0)).join(', ')})`;
};
console.log(`trials ${TRIALS}, waited ${WAIT_MS} ms before the restart`);
console.log(`server accepting -> grant: ${fmt(grants)}`);
console.log(`server accepting -> term open: ${fmt(terms)}`);
