/**
 * A crowd of candidates starting at once on one key (docs/benchmarks.md, "A crowd of
 * candidates starting at once"): N `LeaderLock`s (wait mode) started together against a fresh
 * embedded server, and how many of them are in `pg_locks` (holding or queued) every 3 s, up
 * to LIMIT_S. Then the floor: N bare `pg` clients connecting at once with no deadline, and
 * how long until all are connected. The machine's load average is printed with each line.
 * `npx tsx bench/crowd.ts [candidates=500] [queryTimeoutMs=1000|default] [limitS=90]`
 */
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { startPgServer } from '../src/cli/embedded-pg.js';
import { LeaderLock, type LeaderLockOptions } from '../src/index.js';

const N = Number(process.argv[2] ?? 500);
const timing: Partial<LeaderLockOptions> =
  process.argv[3] === 'default'
    ? {}
    : { healthIntervalMs: 1000, queryTimeoutMs: Number(process.argv[3] ?? 1000) };
const LIMIT_S = Number(process.argv[4] ?? 90);
const load = (): string => os.loadavg()[0]?.toFixed(1) ?? '?';

const server = await startPgServer({ settings: { max_connections: N + 100 } });
const admin = new pg.Client({ connectionString: server.url });
await admin.connect();
try {
  console.log(
    `${N} candidates, ${JSON.stringify(timing)}, ${os.cpus().length} cores, Node ${process.version}`,
  );
  const errors = new Map<string, number>();
  const locks = Array.from({ length: N }, () => {
    const lock = new LeaderLock({
      connectionString: server.url,
      key1: 11,
      key2: 22,
      ...timing,
    } as LeaderLockOptions);
    lock.onError((e) => {
      const kind = e.message.replace(/[0-9]+/g, '#').slice(0, 100);
      errors.set(kind, (errors.get(kind) ?? 0) + 1);
    });
    return lock;
  });
  const t0 = performance.now();
  await Promise.all(locks.map((l) => l.start()));
  let first: number | null = null;
  for (;;) {
    const { rows } = await admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = 11 AND objid = 22`,
    );
    const n = rows[0]?.n ?? 0;
    const s = (performance.now() - t0) / 1000;
    if (n > 0 && first === null) first = s;
    console.log(`${s.toFixed(1)} s: ${n} of ${N} in pg_locks (load ${load()})`);
    if (n >= N || s > LIMIT_S) break;
    await new Promise((r) => setTimeout(r, 3000));
  }
  console.log(`first in pg_locks after ${first === null ? 'never' : `${first.toFixed(1)} s`}`);
  console.log('errors (onError, by kind):');
  for (const [kind, n] of [...errors].sort((a, b) => b[1] - a[1]).slice(0, 6))
    console.log(`  ${n} × ${kind}`);
  await Promise.all(locks.map((l) => l.shutdown()));

  // the floor: bare clients, no deadline
  const f0 = performance.now();
  const bare = Array.from({ length: N }, () => new pg.Client({ connectionString: server.url }));
  for (const c of bare) c.on('error', () => {});
  const done = await Promise.allSettled(bare.map((c) => c.connect()));
  const ok = done.filter((d) => d.status === 'fulfilled').length;
  console.log(
    `floor: ${ok} of ${N} bare pg clients connected at once in ${((performance.now() - f0) / 1000).toFixed(1)} s (load ${load()})`,
  );
  await Promise.all(bare.map((c) => c.end().catch(() => {})));
} finally {
  await admin.end();
  await server.dispose();
}
