/**
 * Followers after a server restart, on a real server: a plain client holds the lock, F
 * followers (default options, wait or poll mode) queue behind it for WAIT_MS, the server
 * stops (fast) and starts again. Measured from the moment `start()` saw it accept
 * connections: the first follower's grant (`onTakeoverFence`'s moment: a grant after a
 * restart has no proof of drain, so its term opens after the 250 ms takeover delay), its
 * term opening, and every follower's first successful connection after the restart (their
 * spread: no lockstep herd), each recorded through the `connect` hook.
 * `npx tsx bench/restart-follow.ts [trials] [waitMs] [followers] [wait|poll]` (docs/safety.md).
 */
import pg from 'pg';
import { startPgServer } from '../src/cli/embedded-pg.js';
import { LeaderLock } from '../src/index.js';

const TRIALS = Number(process.argv[2] ?? 5);
const WAIT_MS = Number(process.argv[3] ?? 3000);
const FOLLOWERS = Number(process.argv[4] ?? 1);
const MODE = (process.argv[5] ?? 'wait') as 'wait' | 'poll';
const server = await startPgServer();
const grants: number[] = [];
const terms: number[] = [];
const reconnects: number[][] = [];
const downtimes: number[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
try {
  for (let trial = 0; trial < TRIALS; trial++) {
    const key1 = 4242;
    const key2 = trial;
    const holder = new pg.Client({ connectionString: server.url });
    holder.on('error', () => {});
    await holder.connect();
    await holder.query('SELECT pg_advisory_lock($1, $2)', [key1, key2]);
    let grantedAt = 0;
    let acquiredAt = 0;
    let upAt = Number.POSITIVE_INFINITY;
    const firstAfterUp: number[] = Array.from({ length: FOLLOWERS }, () => Number.NaN);
    const locks = Array.from({ length: FOLLOWERS }, (_, i) => {
      const lock = new LeaderLock({
        key1,
        key2,
        acquireMode: MODE,
        connect: async () => {
          const client = new pg.Client({ connectionString: server.url });
          client.on('error', () => {});
          await client.connect();
          const at = performance.now();
          if (at >= upAt && Number.isNaN(firstAfterUp[i] as number)) firstAfterUp[i] = at - upAt;
          return client;
        },
      });
      lock.onError(() => {});
      lock.onTakeoverFence(() => {
        if (grantedAt === 0) grantedAt = performance.now();
      });
      lock.onAcquired(() => {
        if (acquiredAt === 0) acquiredAt = performance.now();
      });
      return lock;
    });
    await Promise.all(locks.map((l) => l.start()));
    await sleep(WAIT_MS);
    const stopAt = performance.now();
    await server.stop('fast');
    await server.start();
    upAt = performance.now();
    downtimes.push(upAt - stopAt);
    const deadline = upAt + 60_000;
    while ((acquiredAt === 0 || firstAfterUp.some(Number.isNaN)) && performance.now() < deadline)
      await sleep(1);
    grants.push((grantedAt || acquiredAt) - upAt);
    terms.push(acquiredAt - upAt);
    reconnects.push(firstAfterUp);
    await Promise.all(locks.map((l) => l.shutdown()));
    await holder.end().catch(() => {});
  }
} finally {
  await server.dispose();
}
const sorted = (xs: number[]) => [...xs].sort((a, b) => a - b);
const at = (s: number[], q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? Number.NaN;
const fmt = (xs: number[]): string => {
  const s = sorted(xs);
  return `p50 ${at(s, 0.5).toFixed(0)} ms (${s.map((x) => x.toFixed(0)).join(', ')})`;
};
console.log(
  `${MODE} mode, ${FOLLOWERS} follower(s), trials ${TRIALS}, waited ${WAIT_MS} ms before the restart, node ${process.version}`,
);
console.log(`stop -> accepting again (the restart itself): ${fmt(downtimes)}`);
console.log(`server accepting -> first grant: ${fmt(grants)}`);
console.log(`server accepting -> term open: ${fmt(terms)}`);
if (FOLLOWERS > 1) {
  for (const [i, r] of reconnects.entries()) {
    const s = sorted(r);
    // distinct 10 ms slots among the reconnects, and the busiest slot: a herd shows as few slots, one of them crowded
    const slots = new Map<number, number>();
    for (const x of s) slots.set(Math.floor(x / 10), (slots.get(Math.floor(x / 10)) ?? 0) + 1);
    console.log(
      `trial ${i + 1}: reconnects after accepting: first ${at(s, 0).toFixed(0)}, p50 ${at(s, 0.5).toFixed(0)}, p90 ${at(s, 0.9).toFixed(0)}, last ${at(s, 1).toFixed(0)} ms; ${slots.size} distinct 10 ms slots, busiest ${Math.max(...slots.values())}`,
    );
  }
}
