/** `pgleaderlock demo`: Ctrl-C, orphaned candidates, options (the failover figures: test/timing/demo-failover.test.ts). */
import { describe, expect, it, onTestFinished } from 'vitest';
import { LeaderLock } from '../../src/index.js';
import { cli, portClosed, startCli } from '../harness/cli.js';
import { databaseUrl, eventually, lockHolders } from '../harness/db.js';

describe('pgleaderlock demo', () => {
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
