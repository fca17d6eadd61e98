// The runtime suite (test/harness/compat-runtimes.ts): the packed package, installed into a
// folder of its own and imported by name as a Bun or Deno user does, against a real server
// ($PG_URL). One line per case (`pass NAME (MS ms)` or `fail NAME: WHY`), then
// `RESULT {"passed":N,"total":M,"runtime":"..."}`. Plain JavaScript, run as it is by
// `bun run suite.mjs` and `deno run -A suite.mjs`.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { LeaderLock, LeaderWatch, PartitionedLeadership } from 'pgleaderlock';

const url = process.env.PG_URL;
if (!url) throw new Error('PG_URL is not set');
const runtime = globalThis.Bun
  ? `bun ${globalThis.Bun.version}`
  : globalThis.Deno
    ? `deno ${globalThis.Deno.version.deno}`
    : `node ${process.versions.node}`;
const here = (file) => fileURLToPath(new URL(file, import.meta.url));
/** This runtime running another script of this folder. */
const runArgs = (file) =>
  globalThis.Deno ? ['run', '-A', here(file)] : globalThis.Bun ? ['run', here(file)] : [here(file)];

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
let seq = 0;
const keys = () => {
  seq += 1;
  return { key1: 40_000 + (process.pid % 10_000), key2: seq * 1000 + Math.floor(Math.random() * 1000) };
};
const lockOf = (k, extra = {}) =>
  new LeaderLock({ connectionString: url, ...k, healthIntervalMs: 500, queryTimeoutMs: 1000, ...extra });

async function until(what, check, timeoutMs = 10_000) {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (await check()) return;
    await sleep(10);
  }
  throw new Error(`not within ${timeoutMs} ms: ${what}`);
}

async function admin(sql, values = []) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    return (await c.query(sql, values)).rows;
  } finally {
    await c.end();
  }
}

const holderPid = async ({ key1, key2 }) =>
  (
    await admin(
      "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = $1::int::oid AND objid = $2::int::oid AND objsubid = 2",
      [key1, key2],
    )
  )[0]?.pid ?? null;

const results = [];
async function test(name, body) {
  const t0 = performance.now();
  const cleanup = [];
  try {
    const extra = await Promise.race([
      body(cleanup),
      sleep(30_000).then(() => {
        throw new Error('took longer than 30 s');
      }),
    ]);
    results.push(true);
    console.log(`pass ${name} (${Math.round(performance.now() - t0)} ms)${extra ? `: ${extra}` : ''}`);
  } catch (err) {
    results.push(false);
    console.log(`fail ${name}: ${err?.stack ?? err}`);
  } finally {
    for (const c of cleanup.reverse()) await c().catch(() => {});
  }
}

const started = (cleanup, ...things) => {
  for (const t of things) cleanup.push(() => (t.shutdown ? t.shutdown({ timeoutMs: 5000 }) : t.close()));
  return Promise.all(things.map((t) => t.start()));
};

await test('pg internals the lock reads are there (processID, secretKey; connection.stream)', async () => {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const { rows } = await c.query('SELECT pg_backend_pid() AS pid');
    if (c.processID !== rows[0].pid) throw new Error(`processID ${c.processID}, backend pid ${rows[0].pid}`);
    if (typeof c.secretKey !== 'number') throw new Error(`secretKey is ${typeof c.secretKey}`);
    if (!c.connection?.stream?.remotePort) throw new Error('no connection.stream.remotePort');
  } finally {
    await c.end();
  }
});

await test('election: of two candidates exactly one leads, and keeps leading', async (cleanup) => {
  const k = keys();
  const a = lockOf(k);
  const b = lockOf(k);
  await started(cleanup, a, b);
  await until('one leader', () => a.isLeader || b.isLeader);
  for (let i = 0; i < 50; i++) {
    if (a.isLeader === b.isLeader) throw new Error(`a ${a.state}, b ${b.state}`);
    await sleep(10);
  }
});

await test('stepDown(): the follower leads next', async (cleanup) => {
  const k = keys();
  const a = lockOf(k);
  await started(cleanup, a);
  await until('a leads', () => a.isLeader);
  const b = lockOf(k);
  await started(cleanup, b);
  await until('b follows', () => b.state === 'follower' || b.state === 'acquiring');
  const t0 = performance.now();
  await a.stepDown({ timeoutMs: 5000 });
  await until('b leads', () => b.isLeader);
  if (a.isLeader) throw new Error('a still leads');
  return `b led ${Math.round(performance.now() - t0)} ms after stepDown() was called`;
});

for (const takeoverDelayMs of [0, 250]) {
  await test(`pg_terminate_backend of the leader's backend: the follower leads (takeoverDelayMs ${takeoverDelayMs})`, async (cleanup) => {
    const k = keys();
    const a = lockOf(k, { takeoverDelayMs, acquireMode: 'wait' });
    await started(cleanup, a);
    await until('a leads', () => a.isLeader);
    const b = lockOf(k, { takeoverDelayMs, acquireMode: 'wait' });
    await started(cleanup, b);
    await sleep(200);
    const pid = await holderPid(k);
    if (pid === null) throw new Error('no holder on the server');
    const t0 = performance.now();
    await admin('SELECT pg_terminate_backend($1)', [pid]);
    await until('b leads', () => b.isLeader);
    const ms = Math.round(performance.now() - t0);
    await until('a no longer leads', () => !a.isLeader);
    return `b led ${ms} ms after the terminate`;
  });
}

await test('await using: the block end shuts the lock down and releases', async () => {
  const k = keys();
  let lock;
  {
    await using l = lockOf(k);
    lock = l;
    await l.start();
    await until('leads', () => l.isLeader);
  }
  if (lock.state !== 'stopped') throw new Error(`state ${lock.state} after the block`);
  if ((await holderPid(k)) !== null) throw new Error('the lock is still held on the server');
});

await test('LeaderWatch: sees the leader, and the next one after a shutdown', async (cleanup) => {
  const k = keys();
  const watch = new LeaderWatch({ connectionString: url, ...k, healthIntervalMs: 500 });
  const seen = [];
  watch.onChange((leader) => {
    seen.push(leader?.id ?? null);
  });
  await started(cleanup, watch);
  const a = lockOf(k, { id: `rt-a-${seq}` });
  await started(cleanup, a);
  await until('the watch names a', () => watch.leader?.id === a.id);
  const b = lockOf(k, { id: `rt-b-${seq}` });
  await started(cleanup, b);
  await a.shutdown({ timeoutMs: 5000 });
  await until('the watch names b', () => watch.leader?.id === b.id);
  return `changes: ${seen.map(String).join(' → ')}`;
});

await test('a waiting follower (wait mode) shut down: its server-side wait is cancelled at once (closeTimeoutMs 5 s)', async (cleanup) => {
  const k = keys();
  const a = lockOf(k, { acquireMode: 'wait' });
  await started(cleanup, a);
  await until('a leads', () => a.isLeader);
  const b = lockOf(k, { acquireMode: 'wait', id: `rt-wait-${seq}`, closeTimeoutMs: 5000 });
  await b.start();
  cleanup.push(() => b.shutdown({ timeoutMs: 5000 }));
  const waiting = () =>
    admin("SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 AND wait_event_type = 'Lock'", [
      `%rt-wait-${seq}%`,
    ]);
  await until('b waits in pg_advisory_lock', async () => (await waiting()).length === 1);
  const t0 = performance.now();
  await b.shutdown({ timeoutMs: 10_000 });
  const ms = Math.round(performance.now() - t0);
  // a cancel not obeyed would be given closeTimeoutMs (5 s) before the connection is closed
  if (ms > 1500) throw new Error(`shutdown took ${ms} ms`);
  if ((await waiting()).length !== 0) throw new Error('its wait is still on the server');
  if (!a.isLeader) throw new Error('a stopped leading');
  return `shutdown() resolved in ${ms} ms`;
});

await test('PartitionedLeadership: a worker in another process killed (SIGKILL), the other takes its partitions', async (cleanup) => {
  const name = `rt-parts-${process.pid}-${seq++}`;
  const child = spawn(process.execPath, runArgs('./worker.mjs'), {
    env: { ...process.env, PARTS_NAME: name },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  cleanup.push(async () => child.kill('SIGKILL'));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  await new Promise((resolve, reject) => {
    child.stdout.on('data', (d) => {
      if (String(d).includes('ready')) resolve();
    });
    child.once('exit', (code) => reject(new Error(`the worker exited (${code}) before it was ready`)));
  });
  const w = new PartitionedLeadership({
    connectionString: url,
    name,
    partitions: 4,
    healthIntervalMs: 500,
    queryTimeoutMs: 1000,
  });
  await started(cleanup, w);
  await until('balanced: 2 of 4 partitions here', () => w.owned.size === 2, 15_000);
  const t0 = performance.now();
  child.kill('SIGKILL');
  await exited;
  await until('all 4 partitions here', () => w.owned.size === 4, 15_000);
  return `all 4 owned ${Math.round(performance.now() - t0)} ms after the kill`;
});

await test('shutdown() leaves no handle: a process that led, watched and owned partitions exits by itself', async () => {
  const child = spawn(process.execPath, runArgs('./exits.mjs'), {
    env: process.env,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  let doneAt = 0;
  child.stdout.on('data', (d) => {
    out += String(d);
    if (!doneAt && out.includes('shut down')) doneAt = performance.now();
  });
  const code = await Promise.race([
    new Promise((resolve) => child.once('exit', (c) => resolve(c))),
    sleep(20_000).then(() => 'still running 20 s later'),
  ]);
  if (code !== 0) {
    child.kill('SIGKILL');
    throw new Error(`exit: ${code}; output: ${out.trim()}`);
  }
  return `exited ${Math.round(performance.now() - doneAt)} ms after its last shutdown() resolved`;
});

const passed = results.filter(Boolean).length;
console.log(`RESULT ${JSON.stringify({ passed, total: results.length, runtime })}`);
process.exitCode = passed === results.length ? 0 : 1;
