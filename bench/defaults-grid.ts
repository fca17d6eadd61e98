/**
 * Defaults from measurement (docs/safety.md, docs/benchmarks.md): for a grid of
 * (`healthIntervalMs`, `queryTimeoutMs`), every other option at its default (so
 * `serverReleaseMs` = 2 × (health + deadline)), on a real embedded PostgreSQL, with each
 * candidate in a process of its own (bench/defaults-grid-worker.ts):
 *
 *  - false losses: `onLost` (or `isLeader` false while the state is LEADER) in a process
 *    that was never stopped, against a server that was never stopped, per cell and load;
 *  - the takeover of a frozen leader: SIGSTOP the leading process, time until the other
 *    candidate's term opens (its `onAcquired`), a few trials per cell and load.
 *
 * Loads (one at a time; `a+b` combines them): `none`; `cpu` (2 × cores busy processes
 * beside the server and the candidates); `server` (a server at high CPU with lock
 * contention: 12 sessions hammering pg_try_advisory_lock/unlock on 20 other keys, 4 running
 * CPU-heavy queries without pause); `block200`, `block1000` (every candidate blocks its own
 * event loop for 200 ms / 1 s every 1–4 s). All cells of one load run at once, each with its
 * own key and processes (`--replicas` pairs per cell).
 *
 * `npx tsx bench/defaults-grid.ts [--cells 5000x5000,2000x2000] [--loads cpu,server]
 *  [--minutes 2] [--trials 3] [--replicas 1] [--out results.json]`
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import pg from 'pg';
import { startPgServer } from '../src/cli/embedded-pg.js';

const now = (): number => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

if (process.argv[2] === '--server-load') await serverLoad(process.argv[3] ?? '');
else await main();

/** The `server` load: runs until its parent disconnects. */
async function serverLoad(url: string): Promise<void> {
  let running = true;
  process.on('disconnect', () => {
    running = false;
    setTimeout(() => process.exit(0), 500).unref();
  });
  const loop = async (body: (c: pg.Client) => Promise<void>): Promise<void> => {
    while (running) {
      const c = new pg.Client({ connectionString: url });
      c.on('error', () => {});
      try {
        await c.connect();
        while (running) await body(c);
      } catch {
        await sleep(100);
      } finally {
        await c.end().catch(() => {});
      }
    }
  };
  const loops: Promise<void>[] = [];
  for (let i = 0; i < 12; i++) {
    loops.push(
      loop(async (c) => {
        const k = Math.floor(Math.random() * 20);
        const r = await c.query('SELECT pg_try_advisory_lock(777, $1) AS ok', [k]);
        if (r.rows[0].ok) await c.query('SELECT pg_advisory_unlock(777, $1)', [k]);
      }),
    );
  }
  for (let i = 0; i < 4; i++) {
    loops.push(
      loop(async (c) => {
        await c.query('SELECT sum(i::numeric * i) FROM generate_series(1, 2000000) i');
      }),
    );
  }
  await Promise.all(loops);
}

interface Cell {
  healthIntervalMs: number;
  queryTimeoutMs: number;
}
interface Msg {
  ev: string;
  id: string;
  at: number;
  lastError?: string;
  error?: string;
  leaseMs?: number;
}
interface Candidate {
  id: string;
  proc: ChildProcess;
  msgs: Msg[];
  frozen: boolean;
}
interface Group {
  cell: Cell;
  key2: number;
  candidates: Candidate[];
  losses: Msg[];
  gaps: Msg[];
  takeovers: number[];
  leaseMs: number | null;
}
interface CellResult {
  cell: string;
  serverReleaseMs: number;
  leaseMs: number | null;
  losses: number;
  gaps: number;
  lossDetails: string[];
  observedMin: number;
  takeovers: number[];
}
interface LoadResult {
  load: string;
  uptimeBefore: string;
  uptimeAfter: string;
  minutes: number;
  cells: CellResult[];
}

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? (process.argv[i + 1] ?? fallback) : fallback;
}

async function main(): Promise<void> {
  const cells: Cell[] = arg('cells', '5000x5000,2000x2500,2000x2000,1500x2000,1500x1500,1000x1500,1000x1000')
    .split(',')
    .map((s) => {
      const [h, q] = s.split('x').map(Number);
      return { healthIntervalMs: h ?? 0, queryTimeoutMs: q ?? 0 };
    });
  const loads = arg('loads', 'cpu,server,block200,block1000').split(',');
  const minutes = Number(arg('minutes', '2'));
  const trials = Number(arg('trials', '3'));
  const replicas = Number(arg('replicas', '1'));
  const out = arg('out', '');
  const cpus = os.cpus();
  console.log(
    `machine: ${cpus.length} × ${cpus[0]?.model ?? '?'}, ${Math.round(os.totalmem() / 2 ** 30)} GiB, Node ${process.version}; ` +
      `${minutes} min per load, ${trials} takeover trials, ${replicas} pair(s) per cell`,
  );
  const server = await startPgServer({ settings: { max_connections: 300 } });
  const results: LoadResult[] = [];
  let nextKey = 1;
  try {
    for (const load of loads) {
      const r = await runLoad(server.url, load, cells, minutes, trials, replicas, () => nextKey++);
      results.push(r);
      printTable(results);
      if (out) fs.writeFileSync(out, JSON.stringify(results, null, 2));
    }
  } finally {
    await server.dispose();
  }
}

function uptime(): string {
  const [a, b, c] = os.loadavg();
  return `load average ${a?.toFixed(2)}, ${b?.toFixed(2)}, ${c?.toFixed(2)}`;
}

function spawnCandidate(url: string, g: Group, blockMs: number, n: number): Candidate {
  const id = `h${g.cell.healthIntervalMs}q${g.cell.queryTimeoutMs}k${g.key2}c${n}`;
  const proc = fork(
    new URL('./defaults-grid-worker.ts', import.meta.url).pathname,
    [JSON.stringify({ url, key1: 4343, key2: g.key2, id, ...g.cell, blockMs })],
    { execArgv: ['--import', 'tsx'], stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
  );
  const c: Candidate = { id, proc, msgs: [], frozen: false };
  proc.on('message', (m: Msg) => {
    c.msgs.push(m);
    if (m.ev === 'acquired' && m.leaseMs) g.leaseMs = m.leaseMs;
    if (c.frozen) return;
    if (m.ev === 'lost') g.losses.push(m);
    if (m.ev === 'gap') g.gaps.push(m);
  });
  proc.on('error', () => {});
  return c;
}

/** The candidate whose term is open now (its last acquired after its last lost), if any. */
function leaderOf(g: Group): Candidate | undefined {
  return g.candidates.find((c) => {
    if (c.frozen) return false;
    const last = c.msgs.filter((m) => m.ev === 'acquired' || m.ev === 'lost').at(-1);
    return last?.ev === 'acquired';
  });
}

async function until(cond: () => boolean, timeoutMs: number): Promise<boolean> {
  const end = now() + timeoutMs;
  while (now() < end) {
    if (cond()) return true;
    await sleep(10);
  }
  return cond();
}

async function runLoad(
  url: string,
  load: string,
  cells: Cell[],
  minutes: number,
  trials: number,
  replicas: number,
  key: () => number,
): Promise<LoadResult> {
  const parts = new Set(load.split('+'));
  const blockMs = parts.has('block1000') ? 1000 : parts.has('block200') ? 200 : 0;
  const uptimeBefore = uptime();
  const loadProcs: ChildProcess[] = [];
  if (parts.has('cpu')) {
    for (let i = 0; i < 2 * os.cpus().length; i++)
      loadProcs.push(spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
  }
  if (parts.has('server')) {
    loadProcs.push(
      fork(new URL(import.meta.url).pathname, ['--server-load', url], {
        execArgv: ['--import', 'tsx'],
        stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
      }),
    );
  }
  const groups: Group[] = [];
  for (const cell of cells) {
    for (let r = 0; r < replicas; r++) {
      const g: Group = {
        cell,
        key2: key(),
        candidates: [],
        losses: [],
        gaps: [],
        takeovers: [],
        leaseMs: null,
      };
      g.candidates.push(spawnCandidate(url, g, blockMs, 0), spawnCandidate(url, g, blockMs, 1));
      groups.push(g);
    }
  }
  let spawned = 2;
  const ready = await until(
    () => groups.every((g) => leaderOf(g) && g.candidates.every((c) => c.msgs.some((m) => m.ev === 'ready'))),
    120_000,
  );
  if (!ready) console.log(`[${load}] not every cell had a leader and a ready follower after 120 s`);
  await sleep(2000); // the followers queue
  const startedAt = now();
  console.log(`[${load}] running ${minutes} min (${uptimeBefore})`);
  await sleep(minutes * 60_000);
  console.log(`[${load}] takeover trials (${uptime()})`);
  for (let t = 0; t < trials; t++) {
    await Promise.all(
      groups.map(async (g) => {
        const leader = leaderOf(g);
        if (!leader) return;
        const others = g.candidates.filter((c) => c !== leader && !c.frozen);
        leader.frozen = true;
        const frozenAt = now();
        leader.proc.kill('SIGSTOP');
        const release = 2 * (g.cell.healthIntervalMs + g.cell.queryTimeoutMs);
        let openedAt = 0;
        await until(() => {
          for (const c of others) {
            const m = c.msgs.find((x) => x.ev === 'acquired' && x.at > frozenAt);
            if (m) openedAt = m.at;
          }
          return openedAt > 0;
        }, release + 30_000);
        g.takeovers.push(openedAt ? openedAt - frozenAt : Number.POSITIVE_INFINITY);
        leader.proc.kill('SIGKILL');
        g.candidates = g.candidates.filter((c) => c !== leader);
        const fresh = spawnCandidate(url, g, blockMs, spawned++);
        g.candidates.push(fresh);
        await until(() => fresh.msgs.some((m) => m.ev === 'ready'), 60_000);
        await sleep(2000); // queued behind the new leader
      }),
    );
  }
  const observedMin = (now() - startedAt) / 60_000;
  const uptimeAfter = uptime();
  for (const g of groups) for (const c of g.candidates) if (c.proc.connected) c.proc.disconnect();
  for (const p of loadProcs) {
    if ('disconnect' in p && p.connected) p.disconnect();
    else p.kill('SIGKILL');
  }
  await sleep(3000);
  for (const g of groups) for (const c of g.candidates) c.proc.kill('SIGKILL');
  for (const p of loadProcs) p.kill('SIGKILL');
  const byCell = new Map<string, CellResult>();
  for (const g of groups) {
    const name = `${g.cell.healthIntervalMs}/${g.cell.queryTimeoutMs}`;
    const r = byCell.get(name) ?? {
      cell: name,
      serverReleaseMs: 2 * (g.cell.healthIntervalMs + g.cell.queryTimeoutMs),
      leaseMs: g.leaseMs,
      losses: 0,
      gaps: 0,
      lossDetails: [],
      observedMin: 0,
      takeovers: [],
    };
    r.losses += g.losses.length;
    r.gaps += g.gaps.length;
    r.lossDetails.push(...[...g.losses, ...g.gaps].map((m) => `${m.ev} ${m.id}: ${m.lastError ?? ''}`));
    r.observedMin += observedMin;
    r.takeovers.push(...g.takeovers);
    byCell.set(name, r);
  }
  console.log(`[${load}] done (${uptimeAfter})`);
  return { load, uptimeBefore, uptimeAfter, minutes: observedMin, cells: [...byCell.values()] };
}

function fmtTakeover(xs: number[]): string {
  if (!xs.length) return 'n/a';
  const s = [...xs].sort((a, b) => a - b);
  const p50 = s[Math.floor((s.length - 1) / 2)] ?? 0;
  const max = s.at(-1) ?? 0;
  return `${(p50 / 1000).toFixed(2)} / ${(max / 1000).toFixed(2)} s`;
}

function printTable(results: LoadResult[]): void {
  const loads = results.map((r) => r.load);
  const lines = [
    `| health / deadline (ms) | serverReleaseMs | ${loads.map((l) => `${l}: false losses (leader-min)`).join(' | ')} | ${loads.map((l) => `${l}: takeover p50 / max`).join(' | ')} |`,
    `|---|---:|${loads.map(() => '---:|').join('')}${loads.map(() => '---:|').join('')}`,
  ];
  const first = results[0];
  for (const c of first?.cells ?? []) {
    const row = results.map((r) => r.cells.find((x) => x.cell === c.cell));
    lines.push(
      `| ${c.cell} | ${c.serverReleaseMs} | ${row
        .map((x) => (x ? `${x.losses}${x.gaps ? ` + ${x.gaps} gap` : ''} (${x.observedMin.toFixed(1)})` : ''))
        .join(' | ')} | ${row.map((x) => (x ? fmtTakeover(x.takeovers) : '')).join(' | ')} |`,
    );
  }
  console.log(lines.join('\n'));
  for (const r of results) {
    console.log(`${r.load}: ${r.minutes.toFixed(1)} min; before ${r.uptimeBefore}; after ${r.uptimeAfter}`);
    for (const c of r.cells) for (const d of c.lossDetails) console.log(`  ${r.load} ${c.cell}: ${d}`);
  }
}
