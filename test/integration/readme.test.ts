import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it, vi } from 'vitest';
import { runWorker } from '../../examples/worker.js';
import { FixedInterval, LeaderLock } from '../../src/index.js';
import { adminQuery, databaseUrl, eventually, lockHolders } from '../harness/db.js';

const root = path.resolve(import.meta.dirname, '../..');

describe('README', () => {
  it('quotes examples/quickstart.mjs verbatim (scripts/first-hour.ts runs it from the packed package)', () => {
    const readme = fs.readFileSync(path.join(root, 'README.md'), 'utf8');
    const example = fs.readFileSync(path.join(root, 'examples/quickstart.mjs'), 'utf8');
    expect(readme).toContain(`\`\`\`js\n${example}\`\`\``);
  });

  it('"a role that can connect" and "one connection for a LeaderLock": a role with no privileges leads, follows and takes over (both modes); counted by role on the server, each lock has one session at every look from before its start() to its shutdown()', async () => {
    const role = `bare_${process.pid}_${Date.now()}`;
    await adminQuery(
      databaseUrl(),
      `CREATE ROLE ${role} LOGIN PASSWORD 'bare-pw' NOSUPERUSER NOCREATEDB NOCREATEROLE`,
    );
    try {
      const url = new URL(databaseUrl());
      url.username = role;
      url.password = 'bare-pw';
      for (const acquireMode of ['wait', 'poll'] as const) {
        const keys = { key1: 8, key2: process.pid };
        const tag = `bare-${acquireMode}-${process.pid}`;
        // a steps down for good; b attempts every 100 ms (poll mode: the default back-off grows
        // to seconds, and a, re-attempting after its own, could take the lock back first)
        const [a, b] = [0, 1].map(
          (i) =>
            new LeaderLock({
              connectionString: url.toString(),
              ...keys,
              id: `${tag}-${i}`,
              acquireMode,
              autoReacquire: i === 1,
              retryStrategy: new FixedInterval({ intervalMs: 100 }),
            }),
        ) as [LeaderLock, LeaderLock];
        // every session of the role, looked at without pause from before the first start()
        let most = 0;
        let looking = true;
        const counting = (async () => {
          while (looking) {
            const rows = await adminQuery(
              databaseUrl(),
              'SELECT count(*)::int AS n FROM pg_stat_activity WHERE usename = $1',
              [role],
            );
            most = Math.max(most, Number(rows[0]?.n ?? 0));
          }
        })();
        try {
          await a.start();
          expect(await a.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
          await b.start();
          await eventually(() => b.state === 'follower' || b.state === 'acquiring', { what: 'b to follow' });
          await new Promise((r) => setTimeout(r, 200));
          await a.stepDown();
          expect(await b.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
          await new Promise((r) => setTimeout(r, 200));
        } finally {
          looking = false;
          await counting;
          await Promise.all([a.shutdown(), b.shutdown()]);
        }
        console.log(`[readme] ${acquireMode}: at most ${most} sessions of the role for two locks`);
        expect(most, 'sessions of the role at once, two locks').toBeLessThanOrEqual(2);
      }
    } finally {
      await eventually(
        async () =>
          (await adminQuery(databaseUrl(), 'SELECT 1 FROM pg_stat_activity WHERE usename = $1', [role]))
            .length === 0,
      );
      await adminQuery(databaseUrl(), `DROP ROLE ${role}`);
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
