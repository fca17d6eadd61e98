import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { adminQuery, databaseUrl, ownServer } from '../harness/db.js';
import { proxyTo } from '../harness/fault-proxy.js';
import { TEST_PASSWORD, TEST_USER } from '../harness/pg-server.js';
import { redactUrl } from '../harness/redact.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const PORTS = path.join(ROOT, 'src/cli/ports.ts');

function client(url: string): pg.Client {
  const c = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-harness' });
  c.on('error', () => {});
  return c;
}

describe('test database', () => {
  it('the shared server answers and reports its source', async () => {
    const [row] = await adminQuery<{ v: number }>(databaseUrl(), 'SELECT 1::int AS v');
    expect(row?.v).toBe(1);
    expect(['env', 'container', 'embedded']).toContain(inject('databaseSource'));
  });

  it('an own server can be started with settings, killed, restarted and disposed', async () => {
    await using server = await ownServer({ settings: { idle_session_timeout: '4s' } });
    const [s] = await adminQuery<{ idle_session_timeout: string }>(server.url, 'SHOW idle_session_timeout');
    expect(s?.idle_session_timeout).toBe('4s');

    const c = client(server.url);
    await c.connect();
    const errors: string[] = [];
    c.removeAllListeners('error');
    c.on('error', (e: Error & { code?: string }) => errors.push(e.code ?? e.message));
    const ended = new Promise((r) => c.once('end', r));
    await server.kill();
    await ended;
    expect(server.running).toBe(false);

    await server.start();
    const [row] = await adminQuery<{ v: number }>(server.url, 'SELECT 2::int AS v');
    expect(row?.v).toBe(2);

    await server.restart('immediate');
    const [again] = await adminQuery<{ v: number }>(server.url, 'SELECT 3::int AS v');
    expect(again?.v).toBe(3);
  });

  it('a stopped server keeps its port: another process is not offered it, and a restart waits out a socket that holds it for a moment instead of coming up where no client dials', async () => {
    await using server = await ownServer();
    const port = server.port;
    await server.stop('fast');
    // another process (a test worker starting a server of its own) passes over the port
    const seen = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', '-e', `import('${PORTS}').then((p) => console.log(p.isReserved(${port})))`],
        { cwd: ROOT },
        (err, stdout) => (err ? reject(err) : resolve(stdout.trim())),
      );
    });
    expect(seen, `port ${port} reserved, seen from another process`).toBe('true');
    // something binds it for 500 ms (a probe, or a process that took it anyway)
    const holder = net.createServer();
    await new Promise<void>((resolve) => holder.listen(port, '127.0.0.1', resolve));
    setTimeout(() => holder.close(), 500);
    await server.start();
    expect(server.port).toBe(port);
    const [row] = await adminQuery<{ v: number }>(
      `postgres://${TEST_USER}:${TEST_PASSWORD}@127.0.0.1:${port}/postgres`,
      'SELECT 3::int AS v',
    );
    expect(row?.v).toBe(3);
  });

  it('a fast stop sends 57P01 to connected clients', async () => {
    await using server = await ownServer();
    const c = client(server.url);
    await c.connect();
    const codes: string[] = [];
    c.removeAllListeners('error');
    c.on('error', (e: Error & { code?: string }) => codes.push(e.code ?? e.message));
    const ended = new Promise((r) => c.once('end', r));
    await server.stop('fast');
    await ended;
    expect(codes).toContain('57P01');
  });

  it('redacts passwords in connection strings', () => {
    expect(redactUrl('postgres://u:secret@h:5432/db')).toBe('postgres://u:***@h:5432/db');
    expect(redactUrl('postgres://u@h/db')).toBe('postgres://u@h/db');
  });
});

describe('fault proxy', () => {
  it('passes queries through, with added latency', async () => {
    const proxy = await proxyTo(databaseUrl());
    try {
      proxy.setLatency(30);
      const c = client(proxy.url(databaseUrl()));
      await c.connect();
      const t0 = performance.now();
      const { rows } = await c.query<{ v: number }>('SELECT 7::int AS v');
      expect(rows[0]?.v).toBe(7);
      expect(performance.now() - t0).toBeGreaterThanOrEqual(55); // 30 ms each way
      await c.end();
    } finally {
      await proxy.close();
    }
  });

  it('blackhole: a query stays pending and the socket stays open', async () => {
    const proxy = await proxyTo(databaseUrl());
    const c = client(proxy.url(databaseUrl()));
    try {
      await c.connect();
      proxy.blackhole();
      let settled = false;
      const q = c.query('SELECT 1').then(
        () => {
          settled = true;
        },
        () => {
          settled = true;
        },
      );
      await new Promise((r) => setTimeout(r, 300));
      expect(settled).toBe(false);
      expect(proxy.connections).toBe(1);
      proxy.reset();
      await q;
      expect(settled).toBe(true);
    } finally {
      await proxy.close();
    }
  });

  it('reset: the client sees ECONNRESET', async () => {
    const proxy = await proxyTo(databaseUrl());
    const c = new pg.Client({ connectionString: proxy.url(databaseUrl()) });
    const errors: (Error & { code?: string })[] = [];
    c.on('error', (e) => errors.push(e));
    try {
      await c.connect();
      const ended = new Promise((r) => c.once('end', r));
      proxy.reset();
      await ended;
      expect(errors.map((e) => e.code)).toContain('ECONNRESET');
    } finally {
      await proxy.close();
    }
  });
});

/** The environment without the shared server's URL (PGLEADERLOCK_TEST_URL). */
function withoutTestUrl(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  const { PGLEADERLOCK_TEST_URL: _, ...rest } = env;
  return rest;
}

/** The data folder (`-D`) of the postmaster listening on `port`, read from /proc. */
function postmasterDataDir(port: number): string {
  for (const pid of fs.readdirSync('/proc').filter((f) => /^\d+$/.test(f))) {
    let args: string[];
    try {
      args = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      continue; // gone meanwhile
    }
    const p = args.indexOf('-p');
    const d = args.indexOf('-D');
    if (args[0]?.endsWith('/postgres') && p >= 0 && args[p + 1] === String(port) && d >= 0)
      return args[d + 1] ?? '';
  }
  return '';
}

describe('exit code', () => {
  it('a failing test makes the runner exit non-zero', { tags: ['node-line'], timeout: 60_000 }, async () => {
    const root = path.resolve(import.meta.dirname, '../..');
    const result = await new Promise<{ code: number | null; out: string }>((resolve) => {
      execFile(
        process.execPath,
        [
          path.join(root, 'node_modules/vitest/vitest.mjs'),
          'run',
          '--config',
          'test/fixtures/vitest.failing.config.ts',
        ],
        { cwd: root, env: { ...process.env, NO_COLOR: '1' } },
        (err, stdout, stderr) => {
          resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out: stdout + stderr });
        },
      );
    });
    expect(result.out).toContain('1 failed');
    expect(result.code).not.toBe(0);
  });

  for (const [signal, code] of [
    ['SIGINT', 130],
    ['SIGTERM', 143],
  ] as const) {
    it(`a run stopped by ${signal} while a test runs stops its test server (data folder too) and exits ${code}`, {
      timeout: 60_000,
    }, async () => {
      const root = path.resolve(import.meta.dirname, '../..');
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'pgleaderlock-stopped-run-'));
      const running = path.join(dir, 'running');
      const child = spawn(
        process.execPath,
        [
          path.join(root, 'node_modules/vitest/vitest.mjs'),
          'run',
          '--config',
          'test/fixtures/vitest.stopped.config.ts',
        ],
        {
          cwd: root,
          // the embedded server, whatever this run's own source is (a container, a given URL)
          env: {
            ...withoutTestUrl(process.env),
            NO_COLOR: '1',
            PGLEADERLOCK_TEST_NO_CONTAINER: '1',
            PGLEADERLOCK_FIXTURE_RUNNING: running,
          },
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      );
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
      });
      child.stderr.on('data', (d: Buffer) => {
        out += d.toString();
      });
      const exited = new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
      try {
        const deadline = performance.now() + 40_000;
        while (!fs.existsSync(running)) {
          if (performance.now() > deadline || child.exitCode !== null || child.signalCode !== null)
            throw new Error(`the fixture never ran:\n${out}`);
          await new Promise((r) => setTimeout(r, 50));
        }
        const port = Number(/database: embedded .* on port (\d+)/.exec(out)?.[1]);
        expect(port).toBeGreaterThan(0);
        // the server's data folder, from its postmaster's command line
        const dataDir = postmasterDataDir(port);
        expect(fs.existsSync(dataDir), `the data folder of the server on port ${port}`).toBe(true);
        child.kill(signal);
        expect(await exited).toBe(code);
        // nothing listens on the server's port any more, and its data folder is gone
        const refused = await new Promise<string>((resolve) => {
          const socket = net.connect(port, '127.0.0.1');
          socket.once('connect', () => {
            socket.destroy();
            resolve('connected');
          });
          socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'));
        });
        expect(refused, `port ${port} after the run ended:\n${out}`).toBe('ECONNREFUSED');
        expect(fs.existsSync(dataDir), `${dataDir} after the run ended`).toBe(false);
      } finally {
        if (child.exitCode === null) child.kill('SIGKILL');
        fs.rmSync(dir, { recursive: true, force: true });
      }
    });
  }
});
