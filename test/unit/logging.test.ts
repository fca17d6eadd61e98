import { execFile } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Logger } from '../../src/index.js';
import { flush } from './fakes.js';
import { makeLock } from './helpers.js';

function recorder(): {
  logger: Logger;
  lines: { level: string; msg: string; fields: Record<string, unknown> }[];
} {
  const lines: { level: string; msg: string; fields: Record<string, unknown> }[] = [];
  const at =
    (level: string) =>
    (fields: Record<string, unknown>, msg: string): void => {
      lines.push({ level, msg, fields });
    };
  return { logger: { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') }, lines };
}

describe('logging', () => {
  it('logs structured state changes and lock events to an injected logger', async () => {
    const { logger, lines } = recorder();
    const h = makeLock({ logger });
    await h.lock.start();
    await flush();
    h.db.last.kill();
    await flush();
    await h.lock.shutdown();
    expect(lines.find((l) => l.msg === 'state_change')?.fields).toMatchObject({
      event: 'state_change',
      from: 'stopped',
      to: 'follower',
      key1: 1,
      key2: 2,
    });
    expect(lines.map((l) => l.msg)).toEqual(
      expect.arrayContaining(['lock_acquired', 'health_check_failed', 'lock_lost', 'lock_released']),
    );
    expect(lines.find((l) => l.msg === 'lock_lost')?.level).toBe('warn');
  });

  it('NODE_DEBUG=pgleaderlock prints readable lines, and never the password', async () => {
    const root = path.resolve(import.meta.dirname, '../..');
    const script = `
      import { LeaderLock } from './src/index.ts';
      const lock = new LeaderLock({ connectionString: 'postgres://u:s3cret-pw@127.0.0.1:1/db', key1: 1, key2: 2, queryTimeoutMs: 300 });
      await lock.start();
      await new Promise((r) => setTimeout(r, 200));
      await lock.shutdown();
    `;
    const out = await new Promise<string>((resolve) => {
      execFile(
        process.execPath,
        ['--import', 'tsx', '--input-type=module', '-e', script],
        { cwd: root, env: { ...process.env, NODE_DEBUG: 'pgleaderlock' } },
        (_err, stdout, stderr) => resolve(stdout + stderr),
      );
    });
    expect(out).toMatch(
      /PGLEADERLOCK \d+: info state_change from=stopped to=follower input=Start key1=1 key2=2/,
    );
    expect(out).toContain('acquiring');
    expect(out).toMatch(
      /error error key1=1 key2=2 code=ERR_PGLEADERLOCK_CONNECTION err="could not connect to 127.0.0.1:1: connect ECONNREFUSED 127.0.0.1:1 \[ERR_PGLEADERLOCK_CONNECTION\] <- connect ECONNREFUSED 127.0.0.1:1 \[ECONNREFUSED\]"/,
    );
    expect(out).not.toContain('s3cret-pw');
  }, 20_000);
});
