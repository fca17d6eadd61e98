/**
 * A graceful handoff in the production layout: the leader in a process of its own
 * (bench/handoff-leader.ts), the waiting follower here. Interleaved trials of three kinds,
 * each timed from the leader side's call to the follower side's grant on the machine's
 * monotonic clock (`process.hrtime`, the same in both processes):
 * - the limit: a bare holder unlocks, a bare waiter's `pg_advisory_lock` returns;
 * - the proof-carrying pair: the holder commits a `released` event before its unlock and
 *   the waiter commits an `acquired` event with its grant (what a handoff that proves drain
 *   must commit, docs/safety.md);
 * - the lock: `stepDown()` to the follower's `onAcquired` (default options but
 *   `healthIntervalMs`/`queryTimeoutMs` 1000, as bench/failover.ts).
 * `npx tsx bench/handoff-processes.ts [trials]` (docs/benchmarks.md).
 */
import { fork } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { LeaderLock } from '../src/index.js';
import { randomKeys } from '../test/harness/db.js';
import { startPgServer } from '../test/harness/pg-server.js';
import type { LeaderCommand, LeaderReport } from './handoff-leader.js';

const TRIALS = Number(process.argv[2] ?? 30);
const now = (): number => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const server = await startPgServer();
const admin = new pg.Client({ connectionString: server.url });
admin.on('error', () => {});
await admin.connect();
const child = fork(path.join(import.meta.dirname, 'handoff-leader.ts'), [], {
  execArgv: ['--import', 'tsx'],
  stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
});
const next = (type: LeaderReport['type']): Promise<LeaderReport> =>
  new Promise((resolve) => {
    const on = (m: LeaderReport) => {
      if (m.type !== type) return;
      child.off('message', on);
      resolve(m);
    };
    child.on('message', on);
  });
const tell = (m: LeaderCommand): void => {
  child.send(m);
};

async function queued(keys: { key1: number; key2: number }): Promise<void> {
  const q = `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2`;
  while (((await admin.query<{ n: number }>(q, [keys.key1, keys.key2])).rows[0]?.n ?? 0) < 2) await sleep(2);
  await sleep(5);
}

/** One trial: the leader side in the child leads, this side waits, then the child goes. */
async function trial(mode: 'bare' | 'pair' | 'lock'): Promise<number> {
  const keys = randomKeys();
  const leading = next('leading');
  tell({ type: 'lead', url: server.url, ...keys, mode });
  await leading;
  let grantedAt: Promise<number>;
  let cleanup: () => Promise<void>;
  if (mode === 'lock') {
    const follower = new LeaderLock({
      connectionString: server.url,
      ...keys,
      healthIntervalMs: 1000,
      queryTimeoutMs: 1000,
    });
    follower.onError(() => {});
    grantedAt = new Promise((resolve) => follower.onAcquired(() => resolve(now())));
    await follower.start();
    cleanup = () => follower.shutdown();
  } else {
    const waiter = new pg.Client({ connectionString: server.url });
    waiter.on('error', () => {});
    await waiter.connect();
    if (mode === 'pair') await waiter.query('LISTEN pgleaderlock_bench');
    const wait =
      mode === 'pair'
        ? `SELECT (SELECT true FROM pg_advisory_lock(${keys.key1}, ${keys.key2}) w), (SELECT count(*) FROM pg_notify('pgleaderlock_bench', 'acquired'))`
        : `SELECT pg_advisory_lock(${keys.key1}, ${keys.key2})`;
    grantedAt = waiter.query(wait).then(() => now());
    cleanup = () => waiter.end();
  }
  await queued(keys);
  const went = next('went') as Promise<{ type: 'went'; at: number }>;
  const done = next('done');
  tell({ type: 'go' });
  const took = (await grantedAt) - (await went).at;
  await done;
  await cleanup();
  return took;
}

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? Number.NaN;
};
const fine = (xs: number[]) =>
  `${pct(xs, 50).toFixed(2)} / ${pct(xs, 95).toFixed(2)} / ${pct(xs, 99).toFixed(2)}`;
const out = { bare: [] as number[], pair: [] as number[], lock: [] as number[] };
try {
  for (let i = 0; i < 3; i++) await trial('lock'); // warm up both processes
  for (let i = 0; i < TRIALS; i++) {
    out.bare.push(await trial('bare'));
    out.pair.push(await trial('pair'));
    out.lock.push(await trial('lock'));
  }
} finally {
  tell({ type: 'exit' });
  await admin.end().catch(() => {});
  await server.dispose();
}
const base = pct(out.pair, 50);
console.log(
  `Graceful handoff, leader and follower in separate processes (ms, p50 / p95 / p99; ${TRIALS} interleaved trials each; ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, Node ${process.version}, load average ${os.loadavg()[0]?.toFixed(1)})`,
);
console.log();
console.log('| what | ms | ÷ pair (p50) | ÷ limit (p50) |');
console.log('|---|---|---|---|');
const limit = pct(out.bare, 50);
for (const [name, xs] of [
  ['physical limit: bare unlock → bare waiter granted', out.bare],
  ['proof-carrying pair: released committed, unlock → grant with acquired committed', out.pair],
  ['LeaderLock: stepDown() → follower onAcquired', out.lock],
] as const) {
  console.log(
    `| ${name} | ${fine(xs)} | ${(pct(xs, 50) / base).toFixed(2)} | ${(pct(xs, 50) / limit).toFixed(2)} |`,
  );
}
