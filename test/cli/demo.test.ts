/** `pgleaderlock demo`: an election and failovers with nothing installed, and against a given server. */
import { describe, expect, it } from 'vitest';
import { cli } from '../harness/cli.js';
import { databaseUrl } from '../harness/db.js';

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
    for (const ms of failovers) expect(ms).toBeLessThan(1000);
    expect(r.stdout).toMatch(
      /2 failovers, kill -> new leader: min [\d.]+ ms, median [\d.]+ ms, max [\d.]+ ms \(wait mode\)/,
    );
    expect(r.stdout.match(/SIGKILL candidate-\d+/g)).toHaveLength(2);
    // the server and every candidate are gone
    const { connect } = await import('node:net');
    const refused = await new Promise<boolean>((resolve) => {
      const s = connect(Number(port), '127.0.0.1');
      s.once('connect', () => {
        s.destroy();
        resolve(false);
      });
      s.once('error', () => resolve(true));
    });
    expect(refused).toBe(true);
  });

  it('with --dsn: uses that server', async () => {
    const r = await cli([
      'demo',
      '--dsn',
      databaseUrl(),
      '--candidates',
      '2',
      '--failovers',
      '1',
      '--interval',
      '100ms',
    ]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^using postgres:\/\/\w+:\*\*\*@/);
    expect(r.stdout).toMatch(/leads after [\d.]+ ms/);
  });

  it('--candidates below 2 is bad input', async () => {
    const r = await cli(['demo', '--candidates', '1']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--candidates must be at least 2/);
  });
});
