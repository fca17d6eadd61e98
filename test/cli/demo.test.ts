/** `pgleaderlock demo`: an election and failovers with nothing installed, and against a given server. */
import { connect } from 'node:net';
import { describe, expect, it, onTestFinished } from 'vitest';
import { LeaderLock } from '../../src/index.js';
import { cli, startCli } from '../harness/cli.js';
import { databaseUrl, eventually, lockHolders } from '../harness/db.js';

/** Nothing listens on the port any more. */
function portClosed(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.once('error', () => resolve(true));
  });
}

describe('pgleaderlock demo', () => {
  it('with no database: starts an embedded PostgreSQL, kills the leader twice, exits 0 and cleans up', async () => {
    const r = await cli(['demo', '--failovers', '2', '--interval', '200ms']);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const port = /on 127\.0\.0\.1:(\d+)/.exec(r.stdout)?.[1];
    expect(port).toBeDefined();
    const failovers = [...r.stdout.matchAll(/candidate-\d+ leads after ([\d.]+) ms/g)].map((m) =>
      Number(m[1]),
    );
    expect(failovers).toHaveLength(2);
    // a SIGKILL is an unclean handover: the next leader holds the lock for the takeover delay (250 ms) first
    expect(
      r.stdout.match(/holds the lock; leads after the takeover delay \(250 ms\)/g)?.length,
    ).toBeGreaterThanOrEqual(2);
    for (const ms of failovers) {
      expect(ms).toBeGreaterThanOrEqual(250);
      expect(ms).toBeLessThan(400); // README: 273 ms
    }
    expect(r.stdout).toMatch(
      /2 failovers, kill -> new leader: min [\d.]+ ms, median [\d.]+ ms, max [\d.]+ ms \(wait mode\)/,
    );
    expect(r.stdout.match(/SIGKILL candidate-\d+/g)).toHaveLength(2);
    expect(await portClosed(Number(port))).toBe(true); // the server is gone
  });

  it('with --dsn: uses that server (and --takeover-delay 0: failover in milliseconds)', async () => {
    const r = await cli([
      'demo',
      '--takeover-delay',
      '0',
      '--dsn',
      databaseUrl(),
      '--candidates',
      '2',
      '--failovers',
      '3',
      '--interval',
      '100ms',
    ]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^using postgres:\/\/\w+:\*\*\*@/);
    // the median of 3: one failover took 223 ms once in a loaded CI run (the kernel frees a
    // SIGKILLed process's sockets only as it exits, 20–90 ms after the signal on this VM)
    const all = [...r.stdout.matchAll(/leads after ([\d.]+) ms/g)].map((m) => Number(m[1]));
    expect(all.length).toBeGreaterThanOrEqual(3);
    const median = [...all].sort((a, b) => a - b)[Math.floor((all.length - 1) / 2)] as number;
    expect(median).toBeLessThan(100); // README: "tens of milliseconds"
    expect(r.stdout).not.toContain('takeover delay');
  });

  it('Ctrl-C (SIGINT) stops the candidates and the embedded server, exit 130', async () => {
    const r = startCli(['demo', '--interval', '1h']);
    onTestFinished(() => {
      r.proc.kill('SIGKILL'); // a demo that did not exit must not outlive the test
    });
    const port = Number(/on 127\.0\.0\.1:(\d+)/.exec(await r.line(/on 127\.0\.0\.1:\d+/))?.[1]);
    await r.line(/candidate-\d+ leads/);
    r.proc.kill('SIGINT');
    const done = await r.exited;
    expect(done.code).toBe(130);
    expect(done.stderr).toBe('');
    expect(await portClosed(port)).toBe(true);
  });

  it('candidates leave when the demo is killed with SIGKILL (they watch their parent)', async () => {
    const name = `demo-orphans-${Date.now()}`;
    const [key1, key2] = LeaderLock.keysFromName(name);
    const r = startCli(['demo', '--dsn', databaseUrl(), '--name', name, '--interval', '1h']);
    onTestFinished(() => {
      r.proc.kill('SIGKILL');
    });
    await r.line(/candidate-\d+ leads/);
    expect((await lockHolders(databaseUrl(), key1, key2)).length).toBeGreaterThan(0);
    r.proc.kill('SIGKILL');
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 0, {
      what: 'every candidate to leave',
    });
  });

  it('--candidates below 2 is bad input', async () => {
    const r = await cli(['demo', '--candidates', '1']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--candidates must be at least 2/);
  });
});

describe('pgleaderlock demo on a terminal', () => {
  it('k kills the leader now, q quits (exit 0); run under script(1) for a real pty', async () => {
    const { spawn } = await import('node:child_process');
    const { CLI } = await import('../harness/cli.js');
    const command = `${process.execPath} ${CLI} demo --dsn '${databaseUrl()}' --candidates 2 --interval 1h`;
    const proc = spawn('script', ['-qfec', command, '/dev/null'], { stdio: ['pipe', 'pipe', 'pipe'] });
    let out = '';
    const seen = (re: RegExp): Promise<void> =>
      new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no ${re} in:\n${out}`)), 15_000);
        const check = (): void => {
          if (re.test(out)) {
            clearTimeout(timer);
            proc.stdout.off('data', onData);
            resolve();
          }
        };
        const onData = (d: Buffer): void => {
          out += d.toString();
          check();
        };
        proc.stdout.on('data', onData);
        check();
      });
    const exited = new Promise<number | null>((resolve) => proc.once('close', (code) => resolve(code)));
    try {
      await seen(/Keys: \[k\] kill the leader now, \[q\] quit/);
      await seen(/candidate-\d+ leads /);
      proc.stdin.write('k');
      await seen(/leads after [\d.]+ ms/);
      proc.stdin.write('q');
      proc.stdout.on('data', (d: Buffer) => {
        out += d.toString();
      });
      expect(await exited).toBe(0);
      expect(out).toMatch(/1 failover, kill -> new leader/);
    } finally {
      proc.kill('SIGKILL');
    }
  });
});
