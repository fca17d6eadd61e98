/**
 * Cost of the health probe (one round trip: pid + ownership in pg_locks) against SELECT 1,
 * with 0, 1000 and 5000 other advisory locks held on the server. Own embedded server.
 * Run: npm run bench:probe
 */
import pg from 'pg';
import { startPgServer, stopServersOnSignals } from '../test/harness/pg-server.js';

stopServersOnSignals();

import { CHECK } from '../src/leader/sql.js';

async function time(client: pg.Client, text: string, values: unknown[], n: number): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await client.query(text, values);
    out.push(performance.now() - t0);
  }
  return out.sort((a, b) => a - b);
}

const pct = (xs: number[], p: number) =>
  xs[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))] ?? Number.NaN;

const server = await startPgServer({ settings: { max_locks_per_transaction: 256 } });
try {
  const client = new pg.Client({ connectionString: server.url });
  const holder = new pg.Client({ connectionString: server.url });
  await client.connect();
  await holder.connect();
  await client.query('SELECT pg_advisory_lock(1, 2)');
  const rows: string[] = [];
  let held = 0;
  for (const others of [0, 1000, 5000]) {
    await holder.query('SELECT pg_advisory_lock(7, g) FROM generate_series($1::int, $2::int - 1) g', [
      held,
      others,
    ]);
    held = others;
    await time(client, CHECK, [1, 2, 'probe'], 50); // warm up
    const probe = await time(client, CHECK, [1, 2, 'probe'], 500);
    const one = await time(client, 'SELECT 1', [], 500);
    rows.push(
      `| ${others} | ${pct(probe, 50).toFixed(3)} | ${pct(probe, 99).toFixed(3)} | ${pct(one, 50).toFixed(3)} | ${pct(one, 99).toFixed(3)} |`,
    );
  }
  console.log('Health probe vs SELECT 1, round trip on loopback (ms), 500 samples each\n');
  console.log('| other advisory locks held | probe p50 | probe p99 | SELECT 1 p50 | SELECT 1 p99 |');
  console.log('|---|---|---|---|---|');
  for (const r of rows) console.log(r);
  await client.end();
  await holder.end();
} finally {
  await server.dispose();
}
