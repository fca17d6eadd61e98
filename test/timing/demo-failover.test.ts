/**
 * `pgleaderlock demo`'s failover figures: 250 ms and a little with the default takeover
 * delay, and the bare failover (`--takeover-delay 0`) the README calls "tens of
 * milliseconds". In the serial timing project: the figure is a chain of wake-ups (the killed
 * process's exit, its backend's EOF, the lock's release, the waiter's result, the child's
 * stdout, the demo's read), each of which waits for a core when other test files run beside
 * it (34 ms median idle, 108–117 ms with two busy processes on this two-core VM).
 */
import { describe, expect, it } from 'vitest';
import { cli, portClosed } from '../harness/cli.js';
import { databaseUrl } from '../harness/db.js';

describe('pgleaderlock demo: failover figures', () => {
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
      // README: 273 ms; the rule, the 250 ms delay, plus 3 × the most a figure went past it
      // bound: timing/demo-sigkill
      expect(ms).toBeLessThan(250 + 600);
    }
    expect(r.stdout).toMatch(
      /2 failovers, kill -> new leader: min [\d.]+ ms, median [\d.]+ ms, max [\d.]+ ms \(wait mode\)/,
    );
    expect(r.stdout.match(/SIGKILL candidate-\d+/g)).toHaveLength(2);
    expect(await portClosed(Number(port))).toBe(true); // the server is gone
  });

  it('with --dsn: uses that server, and the median of 3 failovers (SIGKILL -> next leader) is under 100 ms', async () => {
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
    const all = [...r.stdout.matchAll(/leads after ([\d.]+) ms/g)].map((m) => Number(m[1]));
    expect(all).toHaveLength(3);
    const median = [...all].sort((a, b) => a - b)[1] as number;
    // bound: timing/demo-clean-median
    expect(median).toBeLessThan(100); // README: "tens of milliseconds"
    expect(r.stdout).not.toContain('takeover delay');
  });
});
