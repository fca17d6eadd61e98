/**
 * Errors are never silent (docs/observability.md, "Errors nobody listens to"): a lock with
 * no `onError` and no `logger` prints each distinct error once, through
 * `process.emitWarning`, with its cause; `onError` or a logger silences it. Each case is a
 * process of its own (test/fixtures/unheard-errors.fixture.ts) whose stderr is read.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { databaseUrl } from '../harness/db.js';
import { fixtureArgs } from '../harness/fixture-bundle.js';
import { freePort } from '../harness/pg-server.js';

const FIXTURE = path.join(import.meta.dirname, '../fixtures/unheard-errors.fixture.ts');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  report: { failures?: number; lastError?: string | null };
}

function run(url: string, mode: 'none' | 'onError' | 'logger'): Promise<Run> {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env.NODE_DEBUG;
  delete env.NODE_OPTIONS;
  const proc = spawn(process.execPath, [...fixtureArgs(FIXTURE), url, mode], {
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

const wrongPassword = (): string => {
  const u = new URL(databaseUrl());
  u.password = 'not-the-password';
  return u.toString();
};
const unreachable = async (): Promise<string> =>
  `postgres://nobody:secret@127.0.0.1:${await freePort()}/none`;

/** The warnings in `stderr`: Node prints `(node:PID) [CODE] PgLeaderLockWarning: message`. */
const warnings = (stderr: string): string[] =>
  stderr.split('\n').filter((line) => line.includes('PgLeaderLockWarning'));

describe('with no onError and no logger, each distinct error is printed once on stderr', () => {
  it('a wrong password: one PgLeaderLockWarning over several failed attempts, naming the lock, the code, the server words and SQLSTATE 28P01, and how to silence it; no password', async () => {
    const r = await run(wrongPassword(), 'none');
    expect(r.code).toBe(0);
    expect(r.report.failures).toBeGreaterThanOrEqual(5);
    expect(r.stdout).toBe('');
    const lines = warnings(r.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/\[ERR_PGLEADERLOCK_CONNECTION\] PgLeaderLockWarning: lock "unheard-errors": /);
    expect(lines[0]).toMatch(/password authentication failed for user "postgres" \[28P01\]/);
    expect(r.stderr).toMatch(/Register onError\(fn\) or pass a logger option/);
    expect(r.stderr).not.toContain('not-the-password');
  });

  it('an unreachable host: one PgLeaderLockWarning naming the address refused (ECONNREFUSED host:port); no password', async () => {
    const url = await unreachable();
    const port = new URL(url).port;
    const r = await run(url, 'none');
    expect(r.code).toBe(0);
    expect(r.report.failures).toBeGreaterThanOrEqual(5);
    const lines = warnings(r.stderr);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/\[ERR_PGLEADERLOCK_CONNECTION\] PgLeaderLockWarning: lock "unheard-errors": /);
    expect(lines[0]).toContain(`ECONNREFUSED 127.0.0.1:${port}`);
    expect(r.stderr).not.toContain('secret');
  });

  it.each(['onError', 'logger'] as const)(
    'the same wrong password with %s given: nothing on stderr',
    async (mode) => {
      const r = await run(wrongPassword(), mode);
      expect(r.code).toBe(0);
      expect(r.report.failures).toBeGreaterThanOrEqual(5);
      expect(r.report.lastError).toMatch(/password authentication failed/);
      expect(r.stdout).toBe('');
      expect(r.stderr).toBe('');
    },
  );
});
