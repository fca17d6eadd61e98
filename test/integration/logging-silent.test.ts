/**
 * docs/observability.md, "Logging with pino": the lock logs nothing by default. A process of
 * its own (test/fixtures/silent-logger.fixture.ts) takes locks and a partition worker with no
 * `logger` option through every logged event; its stdout stays empty, and stderr holds only
 * the one warning of the lock whose errors nobody hears (errors-unheard.test.ts). The same
 * run with `NODE_DEBUG=pgleaderlock` proves the capture: the events are then printed.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { databaseUrl } from '../harness/db.js';
import { fixtureArgs } from '../harness/fixture-bundle.js';

const FIXTURE = path.join(import.meta.dirname, '../fixtures/silent-logger.fixture.ts');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  report: { done?: boolean; seen?: Record<string, number>; unreachable?: string | null };
}

function run(extraEnv: Record<string, string>): Promise<Run> {
  const env: NodeJS.ProcessEnv = { ...process.env, ...extraEnv };
  if (!('NODE_DEBUG' in extraEnv)) delete env.NODE_DEBUG;
  const proc = spawn(process.execPath, [...fixtureArgs(FIXTURE), databaseUrl()], {
    env,
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let stdout = '';
  let stderr = '';
  let report: Run['report'] = {};
  proc.stdout?.on('data', (d: Buffer) => {
    stdout += d.toString();
  });
  proc.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  proc.on('message', (m: Run['report']) => {
    report = m;
  });
  return new Promise((resolve) => proc.once('close', (code) => resolve({ code, stdout, stderr, report })));
}

describe('logging is silent by default (docs/observability.md, "Logging with pino")', {
  tags: ['node-line'],
}, () => {
  it('no logger option, NODE_DEBUG unset: a takeover delay, a hand-over, a terminated backend, an unreachable database and a partition worker write nothing to stdout, and to stderr only the one warning of the lock whose errors nobody hears', async () => {
    const r = await run({});
    expect(r.report.done).toBe(true);
    expect(r.code).toBe(0);
    // the events happened…
    // (a, queued again after its step-down, may lead once more after b's loss: how soon it
    // rejoins is its back-off's first delay, 50–100 ms at the default)
    for (const event of ['a:takeoverDelay', 'a:released', 'b:lost', 'b:acquired']) {
      expect(r.report.seen?.[event], event).toBeGreaterThanOrEqual(1);
    }
    console.log(`[silent] events: ${JSON.stringify(r.report.seen)}`);
    expect(r.report.seen?.['partition:run']).toBe(4);
    expect(r.report.unreachable).toMatch(/ECONNREFUSED/);
    // …and nothing was written but the unheard lock's one warning (errors-unheard.test.ts)
    expect(r.stdout).toBe('');
    const lines = r.stderr.split('\n').filter((l) => l !== '');
    expect(lines).toHaveLength(3); // the warning, its detail, Node's hint
    expect(lines[0]).toMatch(
      /^\(node:\d+\) \[ERR_PGLEADERLOCK_CONNECTION\] PgLeaderLockWarning: lock 7001,\d+: .*ECONNREFUSED/,
    );
    expect(lines[1]).toMatch(
      /^Printed once per error code while no onError callback and no logger option is set/,
    );
    expect(lines[2]).toMatch(/--trace-warnings/);
    expect(r.stderr).not.toMatch(/secret/);
  });

  it('the same run with NODE_DEBUG=pgleaderlock prints the events on stderr (the capture works)', async () => {
    const r = await run({ NODE_DEBUG: 'pgleaderlock' });
    expect(r.report.done).toBe(true);
    expect(r.stdout).toBe('');
    for (const event of [
      'state_change',
      'takeover_delay',
      'lock_acquired',
      'lock_released',
      'lock_lost',
      'error',
      'partitions_taken',
    ]) {
      expect(r.stderr).toMatch(new RegExp(`^PGLEADERLOCK \\d+: \\w+ ${event}\\b`, 'm'));
    }
    expect(r.stderr).not.toMatch(/secret/); // the unreachable URL's password
  });
});
