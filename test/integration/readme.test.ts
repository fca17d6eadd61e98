import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { run } from '../../examples/quickstart.js';
import { runWorker } from '../../examples/worker.js';
import { LeaderLock } from '../../src/index.js';
import { assertNoSessions, databaseUrl, eventually, lockHolders } from '../harness/db.js';

const root = path.resolve(import.meta.dirname, '../..');

describe('README', () => {
  it('quotes examples/quickstart.ts verbatim', () => {
    const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
    const example = fs.readFileSync(path.join(root, 'examples/quickstart.ts'), 'utf8');
    expect(readme).toContain(example.trim());
  });

  it('the quickstart leads, and releases on abort', async () => {
    // the example uses fixed keys (1, 100): wait until no other test run holds them
    await eventually(async () => (await lockHolders(databaseUrl(), 1, 100)).length === 0);
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    try {
      const ac = new AbortController();
      const running = run(databaseUrl(), ac.signal);
      await eventually(() => log.mock.calls.some((c) => c[0] === 'leader: starting work'));
      expect((await lockHolders(databaseUrl(), 1, 100)).filter((r) => r.granted)).toHaveLength(1);
      ac.abort();
      await running;
      expect(await lockHolders(databaseUrl(), 1, 100)).toEqual([]);
      // its default id is <hostname>-<pid>-<random>: no session of this process may be left
      await assertNoSessions(`${os.hostname()}-${process.pid}-`);
    } finally {
      log.mockRestore();
    }
  });

  it('examples/worker.ts works in terms and stops cleanly', async () => {
    const [key1, key2] = LeaderLock.keysFromName('example-worker');
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).length === 0);
    const log = vi.spyOn(console, 'log').mockImplementation(() => {});
    try {
      const ac = new AbortController();
      const running = runWorker(databaseUrl(), ac.signal);
      await eventually(() => log.mock.calls.some((c) => c[0] === '[term 1] tick 1'));
      ac.abort();
      await running;
      expect(log.mock.calls.map((c) => String(c[0]))).toContain(
        'term 1 over: TermEndedError: leadership term 1 ended: shutdown',
      );
      expect(await lockHolders(databaseUrl(), key1, key2)).toEqual([]);
    } finally {
      log.mockRestore();
    }
  });
});
