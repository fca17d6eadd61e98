/** run, acquire, status and break, spawned from dist/cli.js against real PostgreSQL. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { LeaderLock } from '../../src/index.js';
import { cleanEnv, cli, type Running, startCli } from '../harness/cli.js';
import { type ClusterNode, startCluster } from '../harness/cluster.js';
import {
  adminQuery,
  assertNoSessions,
  databaseUrl,
  eventually,
  holderPid,
  lockHolders,
  ownServer,
  randomKeys,
  terminate,
} from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { TEST_PASSWORD } from '../harness/pg-server.js';

const locks = useLocks();
const running: Running[] = [];
/** Kills a command the CLI may have left behind: it would hold the CLI's pipes open. */
const strays: (() => void)[] = [];
afterEach(async () => {
  for (const kill of strays.splice(0)) kill();
  for (const r of running.splice(0)) {
    if (r.proc.exitCode === null && r.proc.signalCode === null) r.proc.kill('SIGKILL');
    await r.exited;
  }
});
const start = (args: string[], env?: NodeJS.ProcessEnv): Running => {
  const r = startCli(args, env);
  running.push(r);
  return r;
};
const keyArgs = (k: { key1: number; key2: number }): string[] => [
  '--key1',
  String(k.key1),
  '--key2',
  String(k.key2),
];
const holders = async (k: { key1: number; key2: number }): Promise<number> =>
  (await lockHolders(databaseUrl(), k.key1, k.key2)).filter((r) => r.granted).length;
/** `acquire … -- node -e script`. */
const jobArgs = (k: { key1: number; key2: number }, script: string, extra: string[] = []): string[] => [
  'acquire',
  '--dsn',
  databaseUrl(),
  ...keyArgs(k),
  ...extra,
  '--',
  process.execPath,
  '-e',
  script,
];
/** `acquire --wait` behind a holder, once it is queued in pg_locks. */
async function queuedWaiter(k: { key1: number; key2: number }, id: string): Promise<Running> {
  const waiting = start(['acquire', '--dsn', databaseUrl(), ...keyArgs(k), '--wait', '--id', id]);
  await eventually(async () => (await lockHolders(databaseUrl(), k.key1, k.key2)).length === 2, {
    what: 'the CLI to queue for the lock',
  });
  return waiting;
}
const tmp = (): string => fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-cli-'));
/** A live process's start time (Linux /proc, field 22), or null when no live process has that pid. */
function processStart(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // after the command name
    return fields[0] === 'Z' ? null : (fields[19] ?? null); // state, …, starttime
  } catch {
    return null;
  }
}

describe('pgleaderlock run', () => {
  it.each([
    ['wait mode', []],
    [
      'poll mode, back-off and grace flags',
      ['--acquire-mode', 'poll', '--retry-base', '50ms', '--retry-max', '200ms', '--reconnect-grace', '1s'],
    ],
  ])(
    'two processes elect one leader; SIGTERM exits 0 and releases, the other takes over (%s)',
    async (_mode, flags) => {
      const name = `run-${locks.tag}`;
      const [key1, key2] = LeaderLock.keysFromName(name);
      const common = [
        '--dsn',
        databaseUrl(),
        '--name',
        name,
        '--json',
        '--health-interval',
        '500ms',
        ...flags,
      ];
      const a = start(['run', ...common, '--id', `${locks.tag}-a`]);
      await a.line(/"event":"acquired"/);
      const b = start(['run', ...common, '--id', `${locks.tag}-b`]);
      await b.line(/"event":"acquire_failed"|"to":"acquiring"/);
      expect(await holders({ key1, key2 })).toBe(1);
      expect(b.lines.some((l) => l.includes('"event":"acquired"'))).toBe(false);

      a.proc.kill('SIGTERM');
      const aDone = await a.exited;
      expect(aDone.code).toBe(0);
      expect(aDone.stdout).toContain('"event":"released"');
      expect(aDone.stdout).toMatch(/"event":"exit".*"code":0/);
      await b.line(/"event":"acquired"/, 5000);

      b.proc.kill('SIGINT');
      expect((await b.exited).code).toBe(0);
      expect(await holders({ key1, key2 })).toBe(0);
      await assertNoSessions(locks.tag);
    },
  );

  it('stays up through a database outage (a started lock keeps the process alive); SIGTERM then exits 0', async () => {
    await using server = await ownServer();
    const keys = randomKeys();
    const r = start([
      'run',
      '--dsn',
      server.url,
      ...keyArgs(keys),
      '--json',
      '--id',
      `${locks.tag}-outage`,
      '--retry-base',
      '100ms',
      '--retry-max',
      '200ms',
    ]);
    await r.line(/"event":"acquired"/);
    await server.stop('fast');
    await r.line(/"event":"lost"/);
    // nothing is awaited here on purpose: the claim is that nothing happens (no exit) for a while
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(r.proc.exitCode).toBeNull();
    expect(r.lines.some((l) => l.includes('"event":"error"'))).toBe(true); // retrying, and saying so
    r.proc.kill('SIGTERM');
    expect((await r.exited).code).toBe(0);
  });

  it('readable lines carry the time, the state change and the key; every JSON line parses', async () => {
    const keys = randomKeys();
    const r = start(['run', '--dsn', databaseUrl(), ...keyArgs(keys), '--id', `${locks.tag}-r`]);
    const line = await r.line(/acquiring -> leader/);
    expect(line).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z {2}acquiring -> leader {2}/);
    expect(line).toContain(`key1=${keys.key1} key2=${keys.key2} id=${locks.tag}-r`);
    r.proc.kill('SIGTERM');
    expect((await r.exited).code).toBe(0);

    const j = start(['run', '--dsn', databaseUrl(), ...keyArgs(keys), '--json', '--id', `${locks.tag}-j`]);
    await j.line(/"event":"acquired"/);
    j.proc.kill('SIGTERM');
    const done = await j.exited;
    const events = done.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as { event: string; time: string });
    expect(events.map((e) => e.event)).toEqual(
      expect.arrayContaining(['start', 'state', 'acquired', 'signal', 'released', 'exit']),
    );
    for (const e of events) expect(Number.isNaN(Date.parse(e.time))).toBe(false);
  });

  it('a reader that goes away (run | head -1) ends run like SIGTERM: released, exit 0, no EPIPE crash', async () => {
    const keys = randomKeys();
    const r = start(['run', '--dsn', databaseUrl(), ...keyArgs(keys), '--id', `${locks.tag}-p`]);
    await r.line(/acquired leadership/);
    r.proc.stdout?.destroy();
    // the next transition writes to the closed pipe
    await terminate(databaseUrl(), await holderPid(databaseUrl(), keys.key1, keys.key2));
    const done = await r.exited;
    expect(done.code).toBe(0);
    expect(done.stderr).not.toContain('EPIPE');
    await eventually(async () => (await holders(keys)) === 0, { what: 'the lock to be released' });
    await assertNoSessions(locks.tag);
  });

  it('--no-auto-reacquire: after the backend is terminated it stops and exits 75', async () => {
    const keys = randomKeys();
    const r = start([
      'run',
      '--dsn',
      databaseUrl(),
      ...keyArgs(keys),
      '--no-auto-reacquire',
      '--id',
      `${locks.tag}-n`,
    ]);
    await r.line(/acquired leadership/);
    await terminate(databaseUrl(), await holderPid(databaseUrl(), keys.key1, keys.key2));
    const done = await r.exited;
    expect(done.code).toBe(75);
    expect(done.stdout).toContain('lost leadership');
  });
});

describe('pgleaderlock acquire', () => {
  it('exit 0 when acquired (and released on exit), 1 when held by another', async () => {
    const keys = randomKeys();
    const free = await cli(['acquire', '--dsn', databaseUrl(), ...keyArgs(keys), '--id', `${locks.tag}-x`]);
    expect(free.code).toBe(0);
    expect(free.stderr).toContain(`acquired key (${keys.key1}, ${keys.key2})`);
    expect(await holders(keys)).toBe(0);

    const holder = locks.make({ ...keys });
    await holder.start();
    await holder.waitForLeadership();
    const held = await cli(['acquire', '--dsn', databaseUrl(), ...keyArgs(keys)]);
    expect(held.code).toBe(1);
    expect(held.stderr).toContain(`held by ${holder.id}`);
  });

  it('--wait=DURATION gives up with 1; bare --wait gets it once released', async () => {
    const keys = randomKeys();
    const holder = locks.make({ ...keys });
    await holder.start();
    await holder.waitForLeadership();
    const t0 = performance.now();
    const timedOut = await cli(['acquire', '--dsn', databaseUrl(), ...keyArgs(keys), '--wait=300ms']);
    expect(timedOut.code).toBe(1);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(300);
    expect(timedOut.stderr).toContain('after waiting 300 ms');

    const waiting = await queuedWaiter(keys, `${locks.tag}-w`);
    await holder.shutdown();
    const done = await waiting.exited;
    expect(done.code).toBe(0);
    expect(done.stderr).toContain('acquired');
  });

  it('--wait rides out a database restart: no false "held", it acquires once the key is free', async () => {
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
      '--id',
      `${locks.tag}-b`,
    ]);
    await eventually(async () => (await lockHolders(server.url, keys.key1, keys.key2)).length === 2, {
      what: 'the CLI to queue',
    });
    await server.restart('fast'); // the holder's lock goes with it; the waiter's wait fails
    const done = await r.exited;
    expect(done.stderr).not.toContain('is held');
    expect(done.stderr).toContain('acquired');
    expect(done.code).toBe(0);
  });

  it('--wait through an outage that outlasts it says why it did not acquire (not "held")', async () => {
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
      '--wait=1500ms',
      '--id',
      `${locks.tag}-d`,
    ]);
    await eventually(async () => (await lockHolders(server.url, keys.key1, keys.key2)).length === 2, {
      what: 'the CLI to queue',
    });
    await server.stop('fast'); // every attempt from now on fails
    const done = await r.exited;
    expect(done.code).toBe(1);
    expect(done.stderr).not.toContain('is held');
    expect(done.stderr).toMatch(/not acquired after waiting 1\.5 s: the last attempt failed: /);
  });

  it('SIGINT while waiting: stops waiting, leaves the queue, exit 130', async () => {
    const keys = randomKeys();
    const holder = locks.make({ ...keys });
    await holder.start();
    await holder.waitForLeadership();
    const waiting = await queuedWaiter(keys, `${locks.tag}-i`);
    waiting.proc.kill('SIGINT');
    expect((await waiting.exited).code).toBe(130);
    await assertNoSessions(`${locks.tag}-i`);
    expect(await lockHolders(databaseUrl(), keys.key1, keys.key2)).toHaveLength(1);
  });

  it('-- command: runs only while leader, with stdio passed through, and exits with its status', async () => {
    const keys = randomKeys();
    const dir = tmp();
    const marker = path.join(dir, 'ran');
    const script = `require('fs').writeFileSync(${JSON.stringify(marker)}, process.env.PGLEADERLOCK_ID); console.log('hello from the job'); process.exit(7)`;
    const holder = locks.make({ ...keys });
    await holder.start();
    await holder.waitForLeadership();
    const blocked = await cli(jobArgs(keys, script));
    expect(blocked.code).toBe(1);
    expect(fs.existsSync(marker)).toBe(false);

    await holder.shutdown();
    const ran = await cli(jobArgs(keys, script, ['--id', `${locks.tag}-job`]));
    expect(ran.code).toBe(7);
    expect(ran.stdout).toBe('hello from the job\n');
    expect(fs.readFileSync(marker, 'utf8')).toBe(`${locks.tag}-job`);
    expect(await holders(keys)).toBe(0);
  });

  it('-- command: lost leadership (backend terminated) sends SIGTERM and exits 75', async () => {
    const keys = randomKeys();
    const dir = tmp();
    const pidFile = path.join(dir, 'pid');
    const gotTerm = path.join(dir, 'got-sigterm');
    // the pid last: once the test sees it, the handler is in place
    const script = `const fs=require('fs');
      process.on('SIGTERM', () => { fs.writeFileSync(${JSON.stringify(gotTerm)}, 'yes'); process.exit(0); });
      setInterval(() => {}, 1000); fs.writeFileSync(${JSON.stringify(pidFile)}, String(process.pid));`;
    const r = start(jobArgs(keys, script, ['--id', `${locks.tag}-l`]));
    await eventually(() => fs.existsSync(pidFile), { what: 'the command to start' });
    const t0 = performance.now();
    await terminate(databaseUrl(), await holderPid(databaseUrl(), keys.key1, keys.key2));
    const done = await r.exited;
    expect(done.code).toBe(75);
    // bound: cli/loss-exit-75
    expect(performance.now() - t0).toBeLessThan(3000);
    expect(fs.readFileSync(gotTerm, 'utf8')).toBe('yes');
    expect(done.stderr).toContain('leadership lost: sending SIGTERM');
  });

  it('-- command: a command that ignores SIGTERM is killed after --kill-grace', async () => {
    const keys = randomKeys();
    const dir = tmp();
    const pidFile = path.join(dir, 'pid');
    const script = `process.on('SIGTERM', () => {}); setInterval(() => {}, 1000);
      require('fs').writeFileSync(${JSON.stringify(pidFile)}, String(process.pid));`;
    const r = start(jobArgs(keys, script, ['--kill-grace', '300ms']));
    // the file exists before its content is written: wait for the pid itself
    const written = () => (fs.existsSync(pidFile) ? fs.readFileSync(pidFile, 'utf8') : '');
    await eventually(() => /^\d+$/.test(written()), { what: 'the command to write its pid' });
    const childPid = Number(written());
    const started = processStart(childPid);
    expect(started).not.toBeNull();
    // should the CLI fail to kill it, the test does: it ignores SIGTERM and would outlive the run
    strays.push(() => {
      if (processStart(childPid) === started) process.kill(childPid, 'SIGKILL');
    });
    await terminate(databaseUrl(), await holderPid(databaseUrl(), keys.key1, keys.key2));
    const done = await r.exited;
    expect(done.code).toBe(75);
    expect(done.stderr).toContain('SIGKILL');
    // that process is gone (its pid may already name another one, on a machine that forks a lot)
    expect(processStart(childPid)).not.toBe(started);
  });

  it('-- command that does not exist: 127, lock released', async () => {
    const keys = randomKeys();
    const r = await cli([
      'acquire',
      '--dsn',
      databaseUrl(),
      ...keyArgs(keys),
      '--',
      '/nonexistent/report.sh',
    ]);
    expect(r.code).toBe(127);
    expect(r.stderr).toContain('cannot run "/nonexistent/report.sh"');
    expect(await holders(keys)).toBe(0);
  });
});

describe('pgleaderlock status', () => {
  it('shows the holder and the waiters in queue order, and says it is informational', async () => {
    const keys = randomKeys();
    const leader = locks.make({ ...keys, acquireMode: 'wait' });
    await leader.start();
    await leader.waitForLeadership();
    // long wait slices, so neither re-queues while we look
    const waiters = [1, 2].map(() => locks.make({ ...keys, acquireMode: 'wait', waitSliceMs: 30_000 }));
    for (const [i, w] of waiters.entries()) {
      w.onAcquireFailed(() => {});
      await w.start();
      await eventually(
        async () => (await lockHolders(databaseUrl(), keys.key1, keys.key2)).length === i + 2,
        {
          what: `waiter ${i + 1} to queue`,
        },
      );
    }
    const r = await cli(['status', '--dsn', databaseUrl(), ...keyArgs(keys), '--json']);
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout) as {
      leader: { id: string; pid: number };
      waiters: { id: string }[];
      note: string;
    };
    expect(s.leader.id).toBe(leader.id);
    expect(s.leader.pid).toBe(await holderPid(databaseUrl(), keys.key1, keys.key2));
    expect(s.waiters.map((w) => w.id)).toEqual(waiters.map((w) => w.id));
    expect(s.note).toMatch(/informational/);

    const text = await cli(['status', '--dsn', databaseUrl(), ...keyArgs(keys)]);
    expect(text.stdout).toMatch(new RegExp(`1\\. ${waiters[0]?.id} .*\\n {2}2\\. ${waiters[1]?.id} `));
    expect(text.stdout).toMatch(
      new RegExp(`leader: {2}${leader.id} \\(pid \\d+, 127\\.0\\.0\\.1\\), session since`),
    );
    expect(text.stdout).toContain('waiting: 2');
    expect(text.stdout).toMatch(/informational/);
  });

  it('a free key: leader none', async () => {
    const r = await cli(['status', '--dsn', databaseUrl(), '--name', `free-${locks.tag}`]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('leader:  none (the key is free)');
  });
});

/** An abandoned holder: a plain session that took the lock and went idle. */
async function abandonedHolder(url: string, keys: { key1: number; key2: number }): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: 'abandoned-job' });
  client.on('error', () => {});
  await client.connect();
  await client.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
  return client;
}

describe('pgleaderlock break', () => {
  it('needs --yes, respects --min-age, then frees an abandoned key', async () => {
    const keys = randomKeys();
    const client = await abandonedHolder(databaseUrl(), keys);
    try {
      const noYes = await cli(['break', '--dsn', databaseUrl(), ...keyArgs(keys), '--min-age', '0']);
      expect(noYes.code).toBe(2);
      expect(noYes.stderr).toMatch(
        /held by abandoned-job \(pid \d+, role \w+, 127\.0\.0\.1, session .* old\); pass --yes/,
      );
      expect(await holders(keys)).toBe(1);

      const young = await cli(['break', '--dsn', databaseUrl(), ...keyArgs(keys), '--yes']);
      expect(young.code).toBe(1);
      expect(young.stdout).toMatch(/refusing: .* younger than --min-age 30\.0 s/);
      expect(await holders(keys)).toBe(1);

      const broken = await cli([
        'break',
        '--dsn',
        databaseUrl(),
        ...keyArgs(keys),
        '--yes',
        '--min-age',
        '0',
      ]);
      expect(broken.code).toBe(0);
      expect(broken.stdout).toMatch(/terminated abandoned-job .*; the key is now free/);
      expect(await holders(keys)).toBe(0);

      const nothing = await cli(['break', '--dsn', databaseUrl(), ...keyArgs(keys), '--yes']);
      expect(nothing.code).toBe(1);
      expect(nothing.stdout).toContain('nothing to break');
    } finally {
      await client.end().catch(() => {});
    }
  });

  it('a role without permission gets a clear error (exit 2), the holder survives', async () => {
    await using server = await ownServer();
    const keys = randomKeys();
    await adminQuery(server.url, "CREATE ROLE weak LOGIN PASSWORD 'weak-pw'");
    const client = await abandonedHolder(server.url, keys);
    try {
      const url = new URL(server.url);
      url.username = 'weak';
      url.password = 'weak-pw';
      const r = await cli(['break', '--dsn', url.toString(), ...keyArgs(keys), '--yes', '--min-age', '0']);
      expect(r.code).toBe(2);
      expect(r.stderr.trim()).toMatch(
        /^pgleaderlock break: permission denied to terminate pid \d+ \(role postgres\): connect as a superuser, as that role, or as a member of pg_signal_backend/,
      );
      expect(r.stderr).not.toContain('weak-pw');
      expect(await lockHolders(server.url, keys.key1, keys.key2)).toHaveLength(1);
    } finally {
      await client.end().catch(() => {});
    }
  });
});

describe('several hosts (a primary and its standby)', () => {
  it('run leads on the primary though the standby is listed first; status names the primary; PGHOST lists work too', async () => {
    await using cluster = await startCluster();
    const [primary, standby] = [cluster.primary, cluster.standbys[0] as ClusterNode];
    const url = cluster.url([standby, primary]);
    const keys = randomKeys();
    const leader = start(['run', '--dsn', url, ...keyArgs(keys), '--id', `${locks.tag}-multi`, '--json']);
    await leader.line(/"event":"acquired"/, 15_000);
    const r = await cli(['status', '--dsn', url, ...keyArgs(keys), '--json']);
    expect(r.code).toBe(0);
    const s = JSON.parse(r.stdout) as { host: string; leader: { id: string } };
    expect(s).toMatchObject({ host: `127.0.0.1:${primary.port}`, leader: { id: `${locks.tag}-multi` } });
    const env = cleanEnv({
      PGHOST: '127.0.0.1,127.0.0.1',
      PGPORT: `${standby.port},${primary.port}`,
      PGUSER: 'postgres',
      PGPASSWORD: TEST_PASSWORD,
      PGDATABASE: 'postgres',
    });
    const text = await cli(['status', ...keyArgs(keys)], env);
    expect(text.stdout).toContain(`server:  127.0.0.1:${primary.port} (the primary)`);
    expect(text.stdout).toContain(`leader:  ${locks.tag}-multi`);
    leader.proc.kill('SIGTERM');
    expect((await leader.exited).code).toBe(0);
  });
});
