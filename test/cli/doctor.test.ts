/**
 * `pgleaderlock doctor` (dist/cli.js) against real servers, each set up to fail one check:
 * a standby, a role without rights, server defaults that break a waiting follower, a Unix
 * socket (settings not applied as asked), an unreachable port, a wrong password, a key held
 * by another program. PgBouncer in transaction mode: test/compat/doctor-pgbouncer.test.ts.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { describe, expect, it, onTestFinished } from 'vitest';
import { cli, startCli } from '../harness/cli.js';
import { startCluster } from '../harness/cluster.js';
import { databaseUrl, ownServer, randomKeys } from '../harness/db.js';
import { proxyTo } from '../harness/fault-proxy.js';
import { freePort, TEST_PASSWORD } from '../harness/pg-server.js';
import { silentServer } from '../harness/silent-server.js';

interface Report {
  ok: boolean;
  dsn: string;
  checks: { id: string; verdict: 'ok' | 'warn' | 'fail'; reason: string; fix?: string }[];
}

async function doctor(
  dsn: string,
  extra: string[] = [],
): Promise<{ code: number | null; report: Report; text: string }> {
  const done = await cli(['doctor', '--dsn', dsn, '--json', '--timeout', '3s', ...extra]);
  if (!done.stdout.trim()) throw new Error(`no output; stderr: ${done.stderr}`);
  return { code: done.code, report: JSON.parse(done.stdout) as Report, text: done.stdout + done.stderr };
}
const verdicts = (r: Report): Record<string, string> =>
  Object.fromEntries(r.checks.map((c) => [c.id, c.verdict]));
const check = (r: Report, id: string) => {
  const c = r.checks.find((x) => x.id === id);
  if (!c) throw new Error(`no ${id} check in ${JSON.stringify(r)}`);
  return c;
};

async function admin(url: string, sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(sql);
  } finally {
    await c.end();
  }
}

/** One session takes advisory locks until SQLSTATE 53200: how many the server held. */
async function filled(url: string): Promise<number> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const failed = await c
      .query('SELECT count(pg_advisory_lock(7, g)) FROM generate_series(1, 1000000) g')
      .then(
        () => null,
        (err: { code?: string }) => err.code,
      );
    expect(failed).toBe('53200');
    const { rows } = await c.query<{ n: string }>(
      "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
    );
    return Number(rows[0]?.n);
  } finally {
    await c.query('SELECT pg_advisory_unlock_all()').catch(() => {});
    await c.end();
  }
}

describe('pgleaderlock doctor', () => {
  it('a direct connection to a primary: every check ok, exit 0; readable output too', async () => {
    const { code, report } = await doctor(databaseUrl());
    expect(verdicts(report)).toEqual({
      connect: 'ok',
      primary: 'ok',
      version: 'ok',
      pooler: 'ok',
      exclusion: 'ok',
      settings: 'ok',
      defaults: 'ok',
      latency: 'ok',
      'permissions.break': 'ok',
      'permissions.fencing': 'ok',
    });
    expect(code).toBe(0);
    expect(report.ok).toBe(true);
    expect(check(report, 'settings').reason).toMatch(/lock\.safety: lease [\d.]+ s, the server frees/);
    expect(report.dsn).not.toContain(TEST_PASSWORD);
    const readable = await cli(['doctor', '--dsn', databaseUrl(), '--timeout', '3s']);
    expect(readable.code).toBe(0);
    expect(readable.stdout).toMatch(/^ok {4}exclusion {11}a second session is refused/m);
    expect(readable.stdout).toMatch(/nothing failed \(10 checks\)\n$/);
  });

  it('a standby: primary fails, exit 1; the standby and the primary listed together: ok, naming the primary', async () => {
    await using cluster = await startCluster();
    const standby = cluster.standbys[0];
    if (!standby) throw new Error('no standby');
    const alone = await doctor(standby.url);
    expect(alone.code).toBe(1);
    expect(check(alone.report, 'primary')).toMatchObject({ verdict: 'fail' });
    expect(check(alone.report, 'primary').reason).toContain('standby (in recovery)');
    const both = await doctor(cluster.url([standby, cluster.primary]));
    expect(both.code).toBe(0);
    expect(check(both.report, 'primary').reason).toMatch(
      new RegExp(
        `^127\\.0\\.0\\.1:${cluster.primary.port} is the primary \\(timeline 1\\); 127\\.0\\.0\\.1:${standby.port}: standby`,
      ),
    );
  });

  it('a role without rights: break and fencing permissions warn with the grant to run; exit 0', async () => {
    await using server = await ownServer();
    await admin(
      server.url,
      `CREATE ROLE plain LOGIN PASSWORD 'plainpw';
       CREATE SCHEMA locked; GRANT USAGE ON SCHEMA locked TO plain;
       ALTER ROLE plain SET search_path = locked`,
    );
    const url = `postgres://plain:plainpw@${server.host}:${server.port}/postgres`;
    const { code, report } = await doctor(url);
    expect(check(report, 'permissions.break')).toMatchObject({ verdict: 'warn' });
    expect(check(report, 'permissions.break').fix).toContain('GRANT pg_signal_backend');
    expect(check(report, 'permissions.fencing')).toMatchObject({ verdict: 'warn' });
    expect(check(report, 'permissions.fencing').reason).toContain(
      'cannot create the fencing table pgleaderlock_epochs',
    );
    expect(code).toBe(0);
    expect(report.ok).toBe(true);
  });

  it('server defaults that break a waiting follower (statement_timeout, idle_session_timeout): defaults warns', async () => {
    await using server = await ownServer({
      settings: { statement_timeout: '5s', idle_session_timeout: '60s' },
    });
    const { code, report } = await doctor(server.url);
    const d = check(report, 'defaults');
    expect(d.verdict).toBe('warn');
    expect(d.reason).toContain("statement_timeout 5.0 s cancels a waiting follower's pg_advisory_lock");
    expect(d.reason).toContain('idle_session_timeout 60.0 s closes idle follower sessions');
    expect(check(report, 'settings').verdict).toBe('ok'); // the lock's own session is unaffected
    expect(code).toBe(0);
  });

  it('settings the server does not apply as asked (a Unix socket has no TCP settings): settings warns with the resulting lease', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-sock-'));
    fs.chmodSync(dir, 0o777);
    await using server = await ownServer({ settings: { unix_socket_directories: dir } });
    const url = `postgres://postgres:${encodeURIComponent(TEST_PASSWORD)}@${encodeURIComponent(dir)}:${server.port}/postgres`;
    try {
      const { code, report } = await doctor(url);
      const s = check(report, 'settings');
      expect(s.verdict).toBe('warn');
      expect(s.reason).toMatch(/^not applied as asked: tcp_keepalives_idle = 0 \(asked \d+\)/);
      expect(s.reason).toMatch(/lock\.safety: lease/);
      expect(code).toBe(0);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('an unreachable port and a wrong password: connect fails with the reason, password redacted, no stack; exit 1', async () => {
    const port = await freePort();
    const down = await doctor(`postgres://postgres:secret-pw@127.0.0.1:${port}/postgres`);
    expect(down.code).toBe(1);
    expect(down.report.checks).toEqual([
      expect.objectContaining({
        id: 'connect',
        verdict: 'fail',
        reason: `cannot connect: connect ECONNREFUSED 127.0.0.1:${port}`,
      }),
    ]);
    const wrong = databaseUrl().replace(encodeURIComponent(TEST_PASSWORD), 'not-the-password-42');
    const denied = await doctor(wrong);
    expect(denied.code).toBe(1);
    expect(check(denied.report, 'connect').reason).toMatch(
      /password authentication failed .*SQLSTATE 28P01.*wrong password/,
    );
    for (const r of [down, denied]) {
      expect(r.text).not.toMatch(/secret-pw|not-the-password-42/);
      expect(r.text).not.toMatch(/\n\s+at /);
    }
  });

  it('--name of a key held by another program: holder warns; held by a candidate: ok naming it', async () => {
    const keys = randomKeys();
    const other = new pg.Client({ connectionString: databaseUrl(), application_name: 'some-cron-job' });
    await other.connect();
    try {
      await other.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
      const held = await doctor(databaseUrl(), ['--key1', String(keys.key1), '--key2', String(keys.key2)]);
      const h = check(held.report, 'holder');
      expect(h.verdict).toBe('warn');
      expect(h.reason).toContain('(application_name "some-cron-job")');
      expect(h.reason).toContain('which is not a pgleaderlock candidate; 0 waiting');
      // the doctor's own lock is on a scratch key, never the one given: it led although this key is held
      expect(check(held.report, 'settings').verdict).toBe('ok');
      await other.query("SET application_name = 'pgleaderlock:svc-1'");
      const ours = await doctor(databaseUrl(), ['--key1', String(keys.key1), '--key2', String(keys.key2)]);
      expect(check(ours.report, 'holder')).toMatchObject({ verdict: 'ok' });
      expect(check(ours.report, 'holder').reason).toMatch(/is held by svc-1 \(pid \d+, session since /);
    } finally {
      await other.end();
    }
  });

  it('a path that stops answering after the connect: the step waiting on it fails at its deadline (--timeout 1s; within 1,500 ms), exit 1, and no step after it runs', async () => {
    const proxy = await proxyTo(databaseUrl());
    onTestFinished(() => proxy.close());
    const r = startCli(['doctor', '--dsn', proxy.url(databaseUrl()), '--timeout', '1s']);
    await r.line(/^ok {4}primary/);
    proxy.blackhole();
    const t0 = performance.now();
    const done = await r.exited;
    const took = performance.now() - t0;
    console.log(`[doctor] blackholed after the primary check: exit ${done.code} after ${took.toFixed(0)} ms`);
    expect(done.code).toBe(1);
    // the failed check is the last one: nothing ran after it (then the summary line)
    const checks = done.stdout.split('\n').filter((l) => /^(ok|warn|FAIL) /.test(l));
    expect(checks.at(-1)).toMatch(/^FAIL {2}\S+ +no answer within 1000 ms \(--timeout\)/);
    expect(done.stdout).toContain(`1 failed (${checks.length} checks)`);
    expect(took).toBeGreaterThanOrEqual(900);
    // bound: cli/doctor-blackhole-step
    expect(took).toBeLessThan(1500);
    expect(done.stdout + done.stderr).not.toContain(TEST_PASSWORD);
  });

  it('on a path that answers the doctor’s connection but no new one, the scratch lock’s check (settings) fails at --timeout (1 s; its step’s deadline, 2 × --timeout + 5 s, is not reached), the exclusion check after it fails and is the last, and the doctor exits within 500 ms of its last line (nothing of the scratch lock’s is left connecting)', async () => {
    // the doctor's first connection reaches the server; every later one (the scratch lock's,
    // the exclusion check's) is accepted and never answered
    const silent = await silentServer({ forwardFirstTo: databaseUrl() });
    onTestFinished(() => silent.close());
    const url = silent.url(databaseUrl());
    const r = startCli(['doctor', '--dsn', url, '--timeout', '1s']);
    await r.line(/^ok +version/);
    const t0 = performance.now();
    const settings = await r.line(/^(ok|warn|FAIL) +settings/);
    const took = performance.now() - t0;
    await r.line(/^FAIL +exclusion/);
    const exclusion = performance.now() - t0;
    const done = await r.exited;
    const total = performance.now() - t0;
    console.log(
      `[doctor] new connections unanswered: the settings check (scratch lock) ended ${took.toFixed(0)} ms after the version line, the exclusion check ${exclusion.toFixed(0)} ms, the doctor ${total.toFixed(0)} ms`,
    );
    expect(settings).toMatch(
      /^FAIL +settings +a lock on a scratch key did not lead: not leader of a free scratch key after 1000 ms/,
    );
    expect(took).toBeGreaterThanOrEqual(900);
    // bound: cli/doctor-scratch-settings
    expect(took).toBeLessThan(1500);
    expect(done.code).toBe(1);
    const checks = done.stdout.split('\n').filter((l) => /^(ok|warn|FAIL) /.test(l));
    expect(checks.at(-1)).toMatch(/^FAIL {2}exclusion +could not connect/);
    expect(done.stdout).toContain('the checks after this one were not run');
    // bound: cli/doctor-exclusion
    expect(exclusion - took).toBeLessThan(3000 + 500); // the exclusion check's own deadline: 3 × --timeout
    expect(total - exclusion).toBeLessThan(500);
  });

  it('latency: a round trip over a quarter of queryTimeoutMs (5 s; 650 ms added each way before the check) warns at once; the direct path is ok over 20', async () => {
    const proxy = await proxyTo(databaseUrl());
    onTestFinished(() => proxy.close());
    const r = startCli(['doctor', '--dsn', proxy.url(databaseUrl())]);
    // from the defaults check on: the scratch lock's connection would not fit in its deadline
    await r.line(/^(ok|warn) +defaults/);
    proxy.setLatency(650);
    const slow = await r.exited;
    expect(slow.stdout).toMatch(
      /^warn {2}latency +round trip p50 1\d{3}\.\d ms, max 1\d{3}\.\d ms over 1 query: within 4× of queryTimeoutMs 5000 ms/m,
    );
    const direct = JSON.parse((await cli(['doctor', '--dsn', databaseUrl(), '--json'])).stdout) as Report;
    expect(check(direct, 'latency')).toMatchObject({
      verdict: 'ok',
      reason: expect.stringMatching(/over 20 queries$/),
    });
  });

  it('settings fails when the scratch lock cannot lead (a role allowed one connection: the lock’s own is refused, 53300); exit 1', async () => {
    await using server = await ownServer();
    await admin(server.url, `CREATE ROLE one LOGIN CONNECTION LIMIT 1 PASSWORD 'onepw'`);
    const { code, report } = await doctor(`postgres://one:onepw@${server.host}:${server.port}/postgres`);
    expect(code).toBe(1);
    expect(check(report, 'settings')).toMatchObject({
      verdict: 'fail',
      reason: expect.stringMatching(/^a lock on a scratch key did not lead: .*(too many connections|53300)/),
    });
  });

  it('a role whose sessions are read-only: fencing warns (its table needs writes)', async () => {
    await using server = await ownServer();
    await admin(
      server.url,
      `CREATE ROLE ro LOGIN SUPERUSER PASSWORD 'ropw'; ALTER ROLE ro SET default_transaction_read_only = on`,
    );
    const { report } = await doctor(`postgres://ro:ropw@${server.host}:${server.port}/postgres`);
    expect(check(report, 'permissions.fencing')).toMatchObject({ verdict: 'warn' });
    expect(check(report, 'permissions.fencing').reason).toContain(
      'read-only (default_transaction_read_only = on)',
    );
    expect(check(report, 'exclusion').verdict).toBe('ok'); // advisory locks work in read-only sessions
  });

  it.each([
    [['--timeout', 'soon'], /--timeout/],
    [['--name', 'a', '--key1', '1'], /either --name or --key1 and --key2/],
  ])('bad usage %j: exit 2', async (args, message) => {
    const done = await cli(['doctor', '--dsn', databaseUrl(), ...args]);
    expect(done.code).toBe(2);
    expect(done.stderr).toMatch(message);
  });

  it('--partitions P --workers N: ok within half the lock table, warn beyond, fail past it; the estimate is one the server holds (it is filled here, up to SQLSTATE 53200)', async () => {
    // max_locks_per_transaction 10 × (20 connections + 16 autovacuum slots (PG18) + launcher 1
    // + 8 worker processes + 10 WAL senders (the test servers' setting)) = 550
    await using server = await ownServer({
      settings: { max_locks_per_transaction: 10, max_connections: 20 },
    });
    const at = async (p: number, n: number) =>
      check(
        (await doctor(server.url, ['--partitions', String(p), '--workers', String(n)])).report,
        'locktable',
      );
    const small = await at(100, 4);
    expect(small.verdict).toBe('ok');
    expect(small.reason).toContain('108 advisory locks');
    const entries = Number(/holds about (\d+)/.exec(small.reason)?.[1]);
    expect(entries).toBeGreaterThan(0);
    expect((await at(Math.floor(entries * 0.7), 1)).verdict).toBe('warn');
    const over = await at(entries + 10, 2);
    expect(over.verdict).toBe('fail');
    expect(over.fix).toContain('max_locks_per_transaction');
    const smallHeld = await filled(server.url);
    expect(smallHeld).toBeGreaterThanOrEqual(entries);
    // PostgreSQL's defaults for every lock-table setting (max_connections 100): 64 × 135 = 8,640
    {
      await using defaults = await ownServer({ settings: { max_connections: 100 } });
      const reason = check((await doctor(defaults.url, ['--partitions', '1000'])).report, 'locktable').reason;
      const estimate = Number(/holds about (\d+)/.exec(reason)?.[1]);
      expect(estimate).toBe(8640);
      const held = await filled(defaults.url);
      console.log(
        `[doctor locktable] estimate ${entries}: held ${smallHeld}; PostgreSQL defaults: estimate ${estimate}, held ${held}`,
      );
      expect(held).toBeGreaterThanOrEqual(estimate);
    }
    // bad input: one line naming it
    const bad = await cli(['doctor', '--dsn', server.url, '--workers', '3']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--workers is only used with --partitions');
  });
});
