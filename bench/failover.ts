/**
 * Failover benchmark: npm run bench [-- --quick] [-- --trials N] [-- --only latency|breakdown|load|scale|partitions].
 * Own embedded server; prints markdown
 * tables (with the machine) and writes them to docs/benchmarks.run.md, or to $BENCH_OUT.
 * docs/benchmarks.md shows the latest full run.
 * Not part of npm test.
 *
 * Times are from the event (the call, the kill, the terminate, the stop signal) to the new
 * leader's onAcquired, on one machine over loopback, candidates in this process except for
 * the SIGKILL case (leader in a child process).
 */
import { fork, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import advisoryLock from 'advisory-lock';
import pg from 'pg';
import { DEFAULT_TAKEOVER_DELAY_MS } from '../src/core/shared-options.js';
import { ExponentialBackoff, FixedInterval, LeaderLock, type LeaderLockOptions } from '../src/index.js';
import type { CandidateConfig, CandidateMessage, ParentCommand } from '../test/chaos/candidate.js';
import { randomKeys } from '../test/harness/db.js';
import { interceptingConnect } from '../test/harness/intercept.js';
import { type PgServer, startPgServer, stopServersOnSignals } from '../test/harness/pg-server.js';
import { type LatencyFigures, latencyChecks } from './checks.js';
import { handoffBreakdown, PHASES } from './handoff-breakdown.js';

const quick = process.argv.includes('--quick');
/** `--only load` (or latency, breakdown, scale, partitions): that section alone. */
const only = process.argv[process.argv.indexOf('--only') + 1];
const runs = (section: string): boolean => !process.argv.includes('--only') || only === section;
/** `--trials N`: N trials per cell (CI: a few, to show that every row still runs). */
const trialsArg = process.argv.includes('--trials')
  ? Number(process.argv[process.argv.indexOf('--trials') + 1])
  : null;
if (trialsArg !== null && (!Number.isInteger(trialsArg) || trialsArg < 1)) {
  throw new RangeError(
    `--trials must be a whole number of at least 1, got ${process.argv[process.argv.indexOf('--trials') + 1]}`,
  );
}
const TRIALS = trialsArg ?? (quick ? 10 : 50);
/** `--check`: the headline figures checked (bench/checks.ts); exit 1 if one fails. */
const check = process.argv.includes('--check');
/** The in-process rows cost milliseconds a trial: at least 20 when checked, so a p50 or mean is not one trial's luck. */
const CHEAP_TRIALS = check ? Math.max(TRIALS, 20) : TRIALS;
const root = path.resolve(import.meta.dirname, '..');

interface Config {
  name: string;
  options: Partial<LeaderLockOptions>;
  /** Poll phase: how long a follower may be into its back-off when the event comes. */
  phaseMs: number;
}

const WAIT: Config = { name: 'wait (default)', options: { acquireMode: 'wait' }, phaseMs: 200 };
/** Wait mode with the takeover delay off: the bare failover, for comparison. */
const WAIT_NO_DELAY: Config = {
  name: 'wait, takeoverDelayMs 0',
  options: { acquireMode: 'wait', takeoverDelayMs: 0 },
  phaseMs: 200,
};
const POLL_SPEC: Config = {
  name: 'poll, spec defaults (exp. 1–30 s)',
  options: { acquireMode: 'poll', retryStrategy: new ExponentialBackoff({ baseMs: 1000 }) },
  phaseMs: 5000,
};
const POLL_100: Config = {
  name: 'poll, fixed 100 ms',
  options: { acquireMode: 'poll', retryStrategy: new FixedInterval({ intervalMs: 100 }) },
  phaseMs: 200,
};

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)] ?? Number.NaN;
};
const fmt = (xs: number[], digits = 1) =>
  xs.length
    ? `${pct(xs, 50).toFixed(digits)} / ${pct(xs, 95).toFixed(digits)} / ${pct(xs, 99).toFixed(digits)}`
    : '–';
/** Sub-millisecond figures (the limit, handoffs, the breakdown): to the hundredth. */
const fine = (xs: number[]) => fmt(xs, 2);

let server: PgServer;
let adminClient: pg.Client | undefined;
/** The bench's own connection for terminate and statistics (reconnected after server restarts). */
const admin = {
  query<R extends pg.QueryResultRow>(text: string, values?: unknown[]) {
    if (!adminClient) throw new Error('admin not connected');
    return adminClient.query<R>(text, values);
  },
  end: () => adminClient?.end() ?? Promise.resolve(),
};

function lock(
  cfg: Config,
  keys: { key1: number; key2: number },
  extra: Partial<LeaderLockOptions> = {},
): LeaderLock {
  return new LeaderLock({
    ...(extra.connect ? {} : { connectionString: server.url }),
    ...keys,
    healthIntervalMs: 1000,
    queryTimeoutMs: 1000,
    ...cfg.options,
    ...extra,
  } as LeaderLockOptions);
}

function nextAcquired(l: LeaderLock): Promise<number> {
  return new Promise((resolve) => {
    const off = l.onAcquired(() => {
      resolve(performance.now());
      void off;
    });
  });
}

async function holderPid(keys: { key1: number; key2: number }): Promise<number | undefined> {
  const { rows } = await admin.query<{ pid: number }>(
    `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int4::oid AND objid = $2::int4::oid
       AND objsubid = 2 AND granted`,
    [keys.key1, keys.key2],
  );
  return rows[0]?.pid;
}

async function lockRows(keys: { key1: number; key2: number }): Promise<number> {
  const { rows } = await admin.query(
    `SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2`,
    [keys.key1, keys.key2],
  );
  return rows.length;
}

type InProcessEvent = 'stepDown' | 'shutdown' | 'terminate';

/** One trial: leader + follower in this process; returns [failover, detection] (ms). */
async function inProcessOnce(cfg: Config, event: InProcessEvent): Promise<[number, number | null]> {
  const keys = randomKeys();
  // after a step-down or a shutdown the old leader stays out. After a terminate in wait mode
  // it keeps the default (autoReacquire): it reconnects, announces its drain (docs/safety.md)
  // and queues behind the follower; in poll mode it could take the lock straight back. With
  // the takeover delay off there is nothing to prove: it stays out (its reconnection, in this
  // process, would only compete with the follower for the event loop)
  const rejoin =
    event === 'terminate' && cfg.options.acquireMode === 'wait' && cfg.options.takeoverDelayMs === undefined;
  const leader = lock(cfg, keys, rejoin ? {} : { autoReacquire: false });
  await leader.start();
  await leader.waitForLeadership();
  const follower = lock(cfg, keys);
  const acquired = nextAcquired(follower);
  await follower.start();
  if (cfg.options.acquireMode === 'wait') {
    while ((await lockRows(keys)) < 2) await sleep(2);
  } else {
    await sleep(Math.random() * cfg.phaseMs); // a random point of the follower's back-off
  }
  const pid = await holderPid(keys);
  const lost = new Promise<number>((resolve) => leader.onLost(() => resolve(performance.now())));
  const t0 = performance.now();
  if (event === 'stepDown') void leader.stepDown();
  else if (event === 'shutdown') void leader.shutdown();
  else await admin.query('SELECT pg_terminate_backend($1)', [pid]);
  const failover = (await acquired) - t0;
  const detection = event === 'terminate' ? (await lost) - t0 : null;
  await Promise.all([leader.shutdown(), follower.shutdown()]);
  return [failover, detection];
}

/** Leader + follower in this process, `trials` times. */
async function inProcess(
  cfg: Config,
  event: InProcessEvent,
  trials: number,
): Promise<{ failover: number[]; detection: number[] }> {
  const failover: number[] = [];
  const detection: number[] = [];
  for (let i = 0; i < trials; i++) {
    const [f, d] = await inProcessOnce(cfg, event);
    failover.push(f);
    if (d !== null) detection.push(d);
  }
  return { failover, detection };
}

async function bareClient(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: server.url });
  c.on('error', () => {});
  await c.connect();
  return c;
}

/**
 * The physical limit: two bare pg clients, the waiter in `pg_advisory_lock`; from the
 * holder sending `pg_advisory_unlock` (or the admin sending `pg_terminate_backend` of the
 * holder) to the waiter's statement returning. No checks, no lease, no callbacks.
 */
async function bareOnce(event: 'unlock' | 'terminate'): Promise<number> {
  const keys = randomKeys();
  const holder = await bareClient();
  const waiter = await bareClient();
  await holder.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
  const pid = (await holder.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]?.pid;
  const granted = waiter
    .query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2])
    .then(() => performance.now());
  while ((await lockRows(keys)) < 2) await sleep(2);
  const t0 = performance.now();
  if (event === 'unlock') await holder.query('SELECT pg_advisory_unlock($1, $2)', [keys.key1, keys.key2]);
  else await admin.query('SELECT pg_terminate_backend($1)', [pid]);
  const took = (await granted) - t0;
  await Promise.all([holder.end().catch(() => {}), waiter.end()]);
  return took;
}

/** Wait-mode trials interleaved with bare-client trials of the same kind, on the same server. */
async function versusLimit(
  event: InProcessEvent,
  trials: number,
): Promise<{ limit: number[]; wait: number[]; off: number[]; detection: number[] }> {
  const limit: number[] = [];
  const wait: number[] = [];
  const off: number[] = [];
  const detection: number[] = [];
  for (let i = 0; i < trials; i++) {
    limit.push(await bareOnce(event === 'terminate' ? 'terminate' : 'unlock'));
    const [f, d] = await inProcessOnce(WAIT, event);
    wait.push(f);
    if (d !== null) detection.push(d);
    // the takeover delay off: a graceful handoff takes the same path (never delayed)
    if (event === 'terminate') off.push((await inProcessOnce(WAIT_NO_DELAY, event))[0]);
  }
  return { limit, wait, off, detection };
}

/**
 * Leader in a child process, killed with SIGKILL or frozen with SIGSTOP (then killed once
 * the follower leads: a frozen leader's session ends when the server's idle_session_timeout
 * or keepalives end it); follower here.
 */
async function killed(
  cfg: Config,
  trials: number,
  signal: 'SIGKILL' | 'SIGSTOP' = 'SIGKILL',
): Promise<number[]> {
  const out: number[] = [];
  for (let i = 0; i < trials; i++) {
    const keys = randomKeys();
    const child = fork(path.join(root, 'test/chaos/candidate.ts'), [], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    const cfgOfChild: CandidateConfig = {
      url: server.url,
      ...keys,
      healthIntervalMs: 1000,
      queryTimeoutMs: 1000,
      pollMs: 100,
      acquireMode: cfg.options.acquireMode ?? 'wait',
      workStopMs: 0,
      takeoverDelayMs: cfg.options.takeoverDelayMs ?? 0,
    };
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('bench child did not lead within 15 s')), 15_000);
      child.on('message', (m: CandidateMessage) => {
        // the child boots, then takes its configuration (test/chaos/candidate.ts)
        if (m.type === 'booted') {
          const start: ParentCommand = { type: 'start', cfg: cfgOfChild, id: `bench-${i}`, priority: 0 };
          child.send(start);
        } else if (m.type === 'start') {
          clearTimeout(timer);
          resolve();
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`bench child exited (${code}) before leading`));
      });
    });
    const follower = lock(cfg, keys);
    const acquired = nextAcquired(follower);
    await follower.start();
    if (cfg.options.acquireMode === 'wait') while ((await lockRows(keys)) < 2) await sleep(2);
    else await sleep(Math.random() * cfg.phaseMs);
    const exited = new Promise((r) => child.once('exit', r));
    const t0 = performance.now();
    child.kill(signal);
    out.push((await acquired) - t0);
    if (signal !== 'SIGKILL') child.kill('SIGKILL');
    await exited;
    await follower.shutdown();
  }
  return out;
}

/**
 * Two candidates; fast server restart; time from the stop signal to the next leader. At
 * least two restarts whatever `--trials` says: the same two locks live through every restart
 * of a row, so only the second shows a lock that cannot recover twice (CI runs one trial).
 */
async function restarted(cfg: Config, asked: number): Promise<number[]> {
  const trials = Math.max(asked, 2);
  const out: number[] = [];
  const keys = randomKeys();
  const a = lock(cfg, keys);
  const b = lock(cfg, keys);
  await Promise.all([a.start(), b.start()]);
  await Promise.race([a.waitForLeadership(), b.waitForLeadership()]);
  for (let i = 0; i < trials; i++) {
    await sleep(50);
    const next = Promise.race([nextAcquired(a), nextAcquired(b)]);
    const t0 = performance.now();
    await server.restart('fast');
    out.push((await next) - t0);
  }
  await Promise.all([a.shutdown(), b.shutdown()]);
  return out;
}

async function connectAdmin(): Promise<void> {
  await adminClient?.end().catch(() => {});
  adminClient = new pg.Client({ connectionString: server.url });
  adminClient.on('error', () => {});
  await adminClient.connect();
}

/**
 * Statements per second that n idle followers send while a leader lives (the leader's own
 * health checks excluded). Counted exactly on the followers' clients (through `connect`):
 * pg_stat_database flushes backend statistics too lazily for windows this short. A wait
 * in progress counts as one statement, when it is sent.
 */
async function load(cfg: Config, n: number, windowMs: number): Promise<number> {
  const keys = randomKeys();
  const leader = lock(cfg, keys);
  await leader.start();
  await leader.waitForLeadership();
  let sent = 0;
  let counting = false;
  const connect = interceptingConnect(server.url, (args, send) => {
    if (counting) sent += 1;
    return send(...args);
  });
  const followers = Array.from({ length: n }, () => lock(cfg, keys, { connect }));
  // past every follower's set-up (connect, prepare, listen: a few statements each; with 100
  // followers on a slow machine that takes longer than a second): queued in wait mode, one
  // attempt failed in poll mode
  let failed = 0;
  for (const f of followers) {
    f.onStateChange((from) => {
      if (from === 'acquiring') failed += 1;
    });
  }
  await Promise.all(followers.map((f) => f.start()));
  if (cfg.options.acquireMode === 'wait') while ((await lockRows(keys)) < n + 1) await sleep(20);
  else while (failed < n) await sleep(20);
  await sleep(500);
  counting = true;
  await sleep(windowMs);
  counting = false;
  await Promise.all([leader, ...followers].map((l) => l.shutdown()));
  return (sent * 1000) / windowMs;
}

/** n waiting followers; terminate the leader `trials` times; failover p99 and client memory per lock. */
async function scale(cfg: Config, n: number, trials: number) {
  const keys = randomKeys();
  global.gc?.();
  const m0 = process.memoryUsage();
  const all = Array.from({ length: n + 1 }, () => lock(cfg, keys));
  await Promise.all(all.map((l) => l.start()));
  // a crowd that cannot all connect on this machine fails the row, not the whole bench for ever
  const queuedBy = performance.now() + 180_000;
  for (let rows = await lockRows(keys); rows < n + 1; rows = await lockRows(keys)) {
    if (performance.now() > queuedBy) {
      await Promise.all(all.map((l) => l.shutdown()));
      throw new Error(
        `scale: ${rows} of ${n + 1} locks queued after 180 s (docs/benchmarks.md, "A crowd of candidates")`,
      );
    }
    await sleep(20);
  }
  // let the queue settle: every waiter runs PostgreSQL's deadlock check once, deadlock_timeout
  // (1 s) after it started waiting; hundreds queued at once make a burst that stalls grants
  await sleep(2500);
  global.gc?.();
  const m1 = process.memoryUsage();
  const times: number[] = [];
  for (let i = 0; i < trials; i++) {
    const next = Promise.race(all.map((l) => nextAcquired(l)));
    await sleep(20);
    const t0 = performance.now();
    await admin.query('SELECT pg_terminate_backend($1)', [await holderPid(keys)]);
    times.push((await next) - t0);
    while ((await lockRows(keys)) < n + 1) await sleep(10); // the old leader re-queued
  }
  await Promise.all(all.map((l) => l.shutdown()));
  return {
    times,
    heapPerLockKb: (m1.heapUsed - m0.heapUsed) / (n + 1) / 1024,
    rssPerLockKb: (m1.rss - m0.rss) / (n + 1) / 1024,
  };
}

async function advisoryLockGraceful(trials: number): Promise<number[]> {
  const out: number[] = [];
  // a CommonJS module whose `exports.default` is the factory
  const mutexOf = advisoryLock.default(server.url);
  for (let i = 0; i < trials; i++) {
    const name = `bench-${randomBytes(6).toString('hex')}`;
    const release = await mutexOf(name).lock();
    const waiting = mutexOf(name)
      .lock()
      .then((unlock: () => Promise<void>) => ({ at: performance.now(), unlock }));
    while (
      (await admin.query("SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")).rows.length <
      1
    ) {
      await sleep(2);
    }
    const t0 = performance.now();
    await release();
    const got = await waiting;
    out.push(got.at - t0);
    await got.unlock();
  }
  return out;
}

let checksFailed = 0;

async function main(): Promise<void> {
  server = await startPgServer({ settings: { max_connections: 700 } });
  await connectAdmin();
  const lines: string[] = [];
  const log = (s = '') => {
    lines.push(s);
    console.log(s);
  };
  const started = new Date();
  try {
    log(
      `Run at ${started.toISOString()}: ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'cpu'}, ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB, Node ${process.version}, PostgreSQL ${(await admin.query('SHOW server_version')).rows[0]?.server_version}, ${TRIALS} trials per cell unless noted.`,
    );
    log();
    const detection: Record<string, number[]> = {};
    if (runs('latency')) {
      log("### Failover latency (ms, p50 / p95 / p99): event → new leader's onAcquired");
      log();
      log(
        "The physical limit is two bare `pg` clients: the holder sends `pg_advisory_unlock` (or the leader backend is terminated) and the waiter's `pg_advisory_lock` returns; its trials alternate with the wait-mode trials in the same run.",
      );
      log();
      log(
        '| event | physical limit (bare pg client) | wait (default: takeover delay 250 ms) | wait ÷ limit (p50) | wait, takeoverDelayMs 0 (÷ limit) | poll, fixed 100 ms | poll, spec defaults (exp. 1–30 s) | advisory-lock 2.0.0 |',
      );
      log('|---|---|---|---|---|---|---|---|');
      const ratio = (a: number[], b: number[]): string => (pct(a, 50) / pct(b, 50)).toFixed(2);
      const figures: Partial<LatencyFigures> = { takeoverDelayMs: DEFAULT_TAKEOVER_DELAY_MS };
      for (const event of ['stepDown', 'shutdown'] as const) {
        const v = await versusLimit(event, CHEAP_TRIALS);
        const p = await inProcess(POLL_100, event, CHEAP_TRIALS);
        figures[event] = v;
        if (event === 'stepDown') figures.pollStepDown = p.failover;
        const s = await inProcess(POLL_SPEC, event, Math.min(TRIALS, 10));
        const a = event === 'shutdown' ? await advisoryLockGraceful(TRIALS) : null;
        log(
          `| graceful ${event} | ${fine(v.limit)} | ${fine(v.wait)} | ${ratio(v.wait, v.limit)} | same path (a clean handover is never delayed) | ${fmt(p.failover)} | ${fmt(s.failover)} (${Math.min(TRIALS, 10)} trials) | ${a ? `${fine(a)} (release)` : 'n/a'} |`,
        );
      }
      {
        const v = await versusLimit('terminate', CHEAP_TRIALS);
        const p = await inProcess(POLL_100, 'terminate', TRIALS);
        figures.terminate = v;
        detection.wait = v.detection;
        detection.poll = p.detection;
        log(
          `| leader backend terminated (its process lives: proof of drain) | ${fine(v.limit)} | ${fmt(v.wait)} | ${ratio(v.wait, v.limit)} | ${fine(v.off)} (${ratio(v.off, v.limit)}) | ${fmt(p.failover)} | not run | n/a |`,
        );
      }
      figures.kill = { wait: await killed(WAIT, TRIALS), off: await killed(WAIT_NO_DELAY, TRIALS) };
      log(
        `| leader process SIGKILL | | ${fmt(figures.kill.wait)} | | ${fmt(figures.kill.off)} | ${fmt(await killed(POLL_100, TRIALS))} | not run | n/a |`,
      );
      const frozen = Math.min(TRIALS, 5);
      log(
        `| leader process frozen (SIGSTOP; ${frozen} trials) | | ${fmt(await killed(WAIT, frozen, 'SIGSTOP'))} | | ${fmt(await killed(WAIT_NO_DELAY, frozen, 'SIGSTOP'))} | ${fmt(await killed(POLL_100, frozen, 'SIGSTOP'))} | not run | n/a |`,
      );
      log(
        `| server restart (fast) | | ${fmt(await restarted(WAIT, TRIALS))} | | ${fmt(await restarted(WAIT_NO_DELAY, TRIALS))} | ${fmt(await restarted(POLL_100, TRIALS))} | not run | n/a |`,
      );
      const waitFastRetry: Config = {
        ...WAIT,
        name: 'wait + 100 ms retry',
        options: { ...WAIT.options, retryStrategy: new FixedInterval({ intervalMs: 100 }) },
      };
      log(
        `| server restart (fast), wait mode with retryStrategy FixedInterval(100) | | ${fmt(await restarted(waitFastRetry, TRIALS))} | | | | | |`,
      );
      await connectAdmin(); // the restarts ended the admin session
      log();
      if (check) {
        const result = latencyChecks(figures as LatencyFigures);
        log(
          `### Checks (\`--check\`, bench/checks.ts): ${result.failed ? `${result.failed} FAILED` : 'all hold'}`,
        );
        log();
        for (const line of result.lines) log(line);
        log();
        checksFailed = result.failed;
      }
    }
    if (runs('breakdown')) {
      const b = await handoffBreakdown(server.url, TRIALS);
      const limit = pct(b.limit, 50);
      log('### Graceful handoff: where the time goes (ms, p50 / p95 / p99; stepDown, wait mode)');
      log();
      log(
        "Each phase from the lock's own `diagnostics_channel` state events and its clients' statements; the follower's grant overlaps the leader's release round trip. Two bare `pg` references alternate with the trials: the physical limit, and the same two statements committing the events a handoff must commit (the holder's `released` before its unlock, the waiter's `acquired` with its grant).",
      );
      log();
      log('| phase | ms | ÷ limit (p50) |');
      log('|---|---|---|');
      log(`| physical limit: bare unlock → bare waiter granted | ${fine(b.limit)} | 1.00 |`);
      log(
        `| bare, with both events committed | ${fine(b.withEvents)} | ${(pct(b.withEvents, 50) / limit).toFixed(2)} |`,
      );
      PHASES.forEach(([name], j) => {
        const xs = b.phases[j] ?? [];
        log(`| ${name} | ${fine(xs)} | ${(pct(xs, 50) / limit).toFixed(2)} |`);
      });
      log();
    }
    if (runs('latency')) {
      log(
        '### Loss detection on the old leader after pg_terminate_backend (ms, p50 / p95 / p99), healthIntervalMs 1000',
      );
      log();
      log('| wait | poll |');
      log('|---|---|');
      log(`| ${fmt(detection.wait ?? [])} | ${fmt(detection.poll ?? [])} |`);
      log();
    }
    if (runs('load')) {
      log(
        '### Database load of idle followers (statements per second sent by the followers while the leader lives)',
      );
      log();
      log('| followers | wait (default, 30 s slices) | poll, fixed 100 ms | poll, spec defaults |');
      log('|---|---|---|---|');
      for (const n of [1, 10, 100]) {
        const w = await load(WAIT, n, quick ? 3000 : 6000);
        const p = await load(POLL_100, n, quick ? 3000 : 6000);
        const s = await load(POLL_SPEC, n, quick ? 3000 : 6000);
        log(`| ${n} | ${w.toFixed(1)} | ${p.toFixed(1)} | ${s.toFixed(1)} |`);
      }
      log();
    }
    if (runs('scale')) {
      log(
        '### Scale: followers waiting on one key, leader backend terminated (wait mode, after a 2.5 s settle, 10 trials)',
      );
      log();
      log(
        '| followers | failover p50 (ms) | p99 (ms) | client heap per lock (KiB) | client RSS per lock (KiB) |',
      );
      log('|---|---|---|---|---|');
      for (const n of [10, 100, 500]) {
        const r = await scale(WAIT, n, Math.min(TRIALS, 10)).catch((err: Error) => err);
        if (r instanceof Error) {
          log(`| ${n} | not run: ${r.message} | | | |`);
          continue;
        }
        log(
          `| ${n} | ${pct(r.times, 50).toFixed(1)} | ${pct(r.times, 99).toFixed(1)} | ${r.heapPerLockKb.toFixed(0)} | ${r.rssPerLockKb.toFixed(0)} |`,
        );
      }
    }
  } finally {
    await admin.end().catch(() => {});
    await server.dispose();
  }
  // the partitions section: its own process and server (bench/partitions.ts)
  if (runs('partitions')) {
    const partitions = spawnSync(
      process.execPath,
      ['--import', 'tsx', path.join(root, 'bench/partitions.ts'), ...(quick ? ['--quick'] : [])],
      { cwd: root, stdio: ['ignore', 'pipe', 'inherit'], encoding: 'utf8' },
    );
    if (partitions.status !== 0) throw new Error(`bench/partitions.ts exited ${partitions.status}`);
    log();
    log(partitions.stdout.trimEnd());
  }
  const out = process.env.BENCH_OUT ?? path.join(root, 'docs/benchmarks.run.md');
  fs.writeFileSync(out, `${lines.join('\n')}\n`);
  console.log(`\nwritten to ${path.relative(root, out)}`);
}

stopServersOnSignals();
await main();
if (checksFailed) {
  console.error(`bench: ${checksFailed} of the headline checks failed (the table above)`);
  process.exitCode = 1;
}
