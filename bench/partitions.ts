/**
 * Partitioned leadership benchmark: npm run bench:partitions (also run by npm run bench).
 * Workers are processes of their own on one embedded server. For PartitionedLeadership and,
 * as the peer, one LeaderLock per partition per worker (what users do without it), prints a
 * markdown table: connections and statements per second per worker at rest, how long a
 * SIGKILLed worker's partitions are ownerless (p50 / p99 / max over 5 kills), and, for a
 * rolling restart of every worker, the partition moves and the longest ownerless gap.
 * Statements per second come from the server (pg_stat_statements calls over 20 s at rest;
 * a wait counts when it ends).
 */
import { type ChildProcess, fork } from 'node:child_process';
import os from 'node:os';
import pg from 'pg';
import { runningFrom } from '../test/harness/partition-runs.js';
import { startPgServer, stopServersOnSignals } from '../test/harness/pg-server.js';

interface Msg {
  id: string;
  at: number;
  ev: string;
  p?: number;
}
interface Scenario {
  kind: 'partitioned' | 'per-partition';
  partitions: number;
  workers: number;
}
const quick = process.argv.includes('--quick');
const ROUNDS = quick ? 3 : 5;
const HEALTH_MS = 5000; // the default before 1500: docs/benchmarks.md's figures were run with it
const now = (): number => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (xs: number[], q: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)] ?? Number.NaN;
};
async function until(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 60_000,
): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

stopServersOnSignals();
const server = await startPgServer({
  settings: { max_connections: 600, shared_preload_libraries: 'pg_stat_statements' },
});
const admin = new pg.Client({ connectionString: server.url });
await admin.connect();
await admin.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');

async function run(s: Scenario): Promise<string> {
  const name = `bench-${s.kind}-${Date.now()}`;
  const msgs: Msg[] = [];
  const procs = new Map<string, ChildProcess>();
  const killed = new Set<string>();
  let n = 0;
  const spawn = (): void => {
    const id = `b${n++}`;
    const cfg = {
      url: server.url,
      name,
      partitions: s.partitions,
      id,
      kind: s.kind,
      healthIntervalMs: HEALTH_MS,
    };
    const proc = fork(new URL('./partition-worker.ts', import.meta.url).pathname, [JSON.stringify(cfg)], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    proc.on('message', (m: Msg) => msgs.push(m));
    proc.on('error', () => {});
    procs.set(id, proc);
  };
  const running = (): Map<number, string> => runningFrom(msgs, killed);
  const settled = async (what: string): Promise<void> => {
    await until(() => {
      if (running().size !== s.partitions) return false;
      if (s.kind === 'per-partition') return true;
      const per = new Map<string, number>();
      for (const id of running().values()) per.set(id, (per.get(id) ?? 0) + 1);
      return (
        per.size === s.workers && [...per.values()].every((k) => Math.abs(k - s.partitions / s.workers) < 1)
      );
    }, what);
    await sleep(300);
  };
  try {
    for (let i = 0; i < s.workers; i++) spawn();
    await until(
      () => msgs.filter((m) => m.ev === 'ready').length === s.workers,
      'every worker ready',
      120_000,
    );
    await settled('the first settle');

    const [conns] = (
      await admin.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name LIKE 'pgleaderlock:b%'",
      )
    ).rows;
    await admin.query('SELECT pg_stat_statements_reset()');
    const t0 = now();
    await sleep(quick ? 10_000 : 20_000); // at rest, on purpose: the figure is what idle costs
    const [calls] = (
      await admin.query<{ n: string }>(
        "SELECT coalesce(sum(calls), 0) AS n FROM pg_stat_statements WHERE query NOT LIKE '%pg_stat_statements%'",
      )
    ).rows;
    const perSecond = Number(calls?.n ?? 0) / ((now() - t0) / 1000) / s.workers;

    const gaps: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      const r = running();
      // the worker that runs the most partitions
      const counts = new Map<string, number>();
      for (const id of r.values()) counts.set(id, (counts.get(id) ?? 0) + 1);
      const victim = [...counts].sort((a, b) => b[1] - a[1])[0]?.[0] as string;
      const theirs = [...r].filter(([, id]) => id === victim).map(([p]) => p);
      const t = now();
      procs.get(victim)?.kill('SIGKILL');
      killed.add(victim);
      procs.delete(victim);
      await until(() => theirs.every((p) => running().has(p)), 'the victim\u2019s partitions to run again');
      for (const p of theirs) {
        const first = msgs.find((m) => m.ev === 'start' && m.p === p && m.at >= t);
        if (first) gaps.push(first.at - t);
      }
      spawn();
      await settled(`settle after kill ${round + 1}`);
    }

    const before = msgs.length;
    for (const id of [...procs.keys()]) {
      const proc = procs.get(id) as ChildProcess;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.send('shutdown');
      await exited;
      procs.delete(id);
      spawn();
      await settled(`settle after restarting ${id}`);
    }
    const rolled = msgs.slice(before).sort((a, b) => a.at - b.at);
    const moves = rolled.filter((m) => m.ev === 'start').length;
    const lastEnd = new Map<number, number>();
    let longest = 0;
    for (const m of rolled) {
      if (m.p === undefined) continue;
      if (m.ev === 'end') lastEnd.set(m.p, m.at);
      else if (m.ev === 'start' && lastEnd.has(m.p))
        longest = Math.max(longest, m.at - (lastEnd.get(m.p) as number));
    }
    const label =
      s.kind === 'partitioned' ? 'PartitionedLeadership' : 'one LeaderLock per partition (wait mode)';
    return `| ${label} | ${s.partitions} | ${s.workers} | ${((conns?.n ?? 0) / s.workers).toFixed(1)} | ${perSecond.toFixed(1)} | ${pct(gaps, 0.5).toFixed(1)} / ${pct(gaps, 0.99).toFixed(1)} / ${Math.max(...gaps).toFixed(1)} (n=${gaps.length}) | ${moves} (${(moves / s.partitions).toFixed(2)} × P) | ${longest.toFixed(0)} |`;
  } finally {
    for (const p of procs.values()) p.kill('SIGKILL');
  }
}

const scenarios: Scenario[] = [
  { kind: 'partitioned', partitions: 1024, workers: 8 },
  { kind: 'partitioned', partitions: 64, workers: 4 },
  { kind: 'per-partition', partitions: 64, workers: 4 },
];
const rows: string[] = [];
try {
  for (const s of scenarios) {
    console.error(`[bench:partitions] ${s.kind} P=${s.partitions} N=${s.workers} …`);
    rows.push(await run(s));
  }
} finally {
  await admin.end();
  await server.dispose();
}
console.log(
  [
    `## Partitioned leadership (${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, node ${process.version}, PostgreSQL on loopback, healthIntervalMs ${HEALTH_MS}, no takeover delay, ${ROUNDS} kills)`,
    '',
    '| workers run | P | N | connections / worker | statements / s / worker at rest | SIGKILL → its partitions run again, ms (p50 / p99 / max) | moves in a rolling restart | longest ownerless gap in it, ms |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
    ...rows,
    '',
    'A rolling restart here: each worker in turn leaves cleanly and a new one joins; the minimum is 2 × P moves (each share out, then a share back in).',
  ].join('\n'),
);
