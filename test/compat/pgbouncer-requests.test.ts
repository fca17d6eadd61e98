/**
 * What takes no lock refuses a pooler that shares backends too, before it acts, with the
 * lock's message and advice: `pgleaderlock resign` and `handover` (before, behind
 * transaction pooling they asked, the leader stepped down or handed over, and the command
 * exited 1 after 4.3 s saying it had not), and `LeaderWatch` (before, it started, showed a
 * dead leader for 4.7 s, and left its name and a LISTEN on a pooled backend). Against a real
 * PgBouncer with a pool of one backend, so that every client of the pool meets whatever
 * was left on it.
 */
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import { LeaderLock, LeaderWatch, LockState } from '../../src/index.js';
import { cli } from '../harness/cli.js';
import { adminQuery, ownServer, randomKeys, testTag } from '../harness/db.js';
import type { PgServer } from '../harness/pg-server.js';
import { startPgBouncer } from '../harness/pgbouncer.js';

let server: PgServer;
beforeAll(async () => {
  server = await ownServer();
});
afterAll(async () => {
  await server?.dispose();
});

const ADVICE =
  /connection pooler in transaction or statement mode is in the path.*connect directly to PostgreSQL, or through the pooler in session mode/s;

/** A leader on the server itself (not through the pooler), with the events it logs. */
async function directLeader(keys: { key1: number; key2: number }) {
  const events: string[] = [];
  const at = (_f: Record<string, unknown>, event: string): void => {
    events.push(event);
  };
  const lock = new LeaderLock({
    connectionString: server.url,
    ...keys,
    id: `${testTag()}-leader`,
    healthIntervalMs: 200,
    logger: { debug: at, info: at, warn: at, error: at },
  });
  onTestFinished(() => lock.shutdown());
  await lock.start();
  expect(await lock.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
  return { lock, events };
}

/** What a client of the pool finds on its (only) backend: channels listened to, its name. */
async function leftOnPooledBackend(url: string): Promise<{ channels: number; app: string }> {
  const [row] = await adminQuery<{ channels: number; app: string }>(
    url,
    `SELECT (SELECT count(*) FROM pg_listening_channels())::int AS channels, current_setting('application_name') AS app`,
  );
  return row ?? { channels: -1, app: '?' };
}

describe.each(['transaction', 'statement'] as const)('PgBouncer in %s mode (pool size 1)', (poolMode) => {
  it.each([
    ['resign', []],
    ['handover', ['--to', 'someone']],
  ] as const)(
    'pgleaderlock %s refuses before it asks: exit 2 naming the pooler and the fix; the leader keeps its term and hears nothing; nothing is left on the pooled backend',
    async (command, extra) => {
      await using bouncer = await startPgBouncer({ server, poolMode, defaultPoolSize: 1 });
      const keys = randomKeys();
      const { lock, events } = await directLeader(keys);
      const term = lock.term;
      const r = await cli([
        command,
        '--dsn',
        bouncer.url,
        '--key1',
        String(keys.key1),
        '--key2',
        String(keys.key2),
        ...extra,
        '--timeout',
        '3s',
      ]);
      expect(r.code, r.stdout + r.stderr).toBe(2);
      expect(r.stderr).toMatch(ADVICE);
      await new Promise((resolve) => setTimeout(resolve, 300)); // a request, had one been sent, reaches the leader within this
      expect(lock.state).toBe(LockState.LEADER);
      expect(lock.term).toBe(term);
      expect(events.filter((e) => e.endsWith('_requested'))).toEqual([]);
      expect((await leftOnPooledBackend(bouncer.url)).channels).toBe(0);
    },
  );

  it('LeaderWatch: start() rejects with ERR_PGLEADERLOCK_UNSAFE naming the fix, it is not connected, and no LISTEN or watch name is left on the pooled backend', async () => {
    await using bouncer = await startPgBouncer({ server, poolMode, defaultPoolSize: 1 });
    const keys = randomKeys();
    await directLeader(keys);
    const watch = new LeaderWatch({ connectionString: bouncer.url, ...keys, id: `${testTag()}-watch` });
    try {
      await expect(watch.start()).rejects.toMatchObject({
        code: 'ERR_PGLEADERLOCK_UNSAFE',
        message: expect.stringMatching(ADVICE),
      });
      expect(watch.connected).toBe(false);
      expect(watch.leader).toBeNull();
    } finally {
      await watch.close();
    }
    const left = await leftOnPooledBackend(bouncer.url);
    expect(left.channels).toBe(0);
    expect(left.app).not.toMatch(/^pgleaderlock-watch:/);
  });
});

describe('PgBouncer in session mode', () => {
  it('pgleaderlock resign works through it: exit 0, the leader steps down', async () => {
    await using bouncer = await startPgBouncer({ server, poolMode: 'session' });
    const keys = randomKeys();
    const { events } = await directLeader(keys);
    const r = await cli([
      'resign',
      '--dsn',
      bouncer.url,
      '--key1',
      String(keys.key1),
      '--key2',
      String(keys.key2),
    ]);
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(events).toContain('resign_requested');
  });

  it.each(['wait', 'poll'] as const)(
    '%s mode: a candidate whose id application_name cannot carry (57 bytes, non-ASCII) takes over by its priority through it, in a clean handover, and inspect names it whole',
    async (acquireMode) => {
      await using bouncer = await startPgBouncer({ server, poolMode: 'session' });
      const keys = randomKeys();
      const make = (id: string, priority: number) => {
        const lock = new LeaderLock({
          connectionString: bouncer.url,
          ...keys,
          id,
          priority,
          acquireMode,
          waitSliceMs: 30_000,
          healthIntervalMs: 200,
        });
        onTestFinished(() => lock.shutdown());
        return lock;
      };
      const tag = testTag();
      const low = make(`${tag}-low`, 0);
      await low.start();
      expect(await low.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
      for (const [i, id] of [
        `${tag}-billing-scheduler-deployment-7f9c8d6b5-x2k9p-12`,
        `${tag}-höher-priorität`,
      ].entries()) {
        const high = make(id, 10 + i);
        let fenced = false;
        high.onTakeoverFence(() => {
          fenced = true;
        });
        await high.start();
        expect(await high.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
        expect(fenced).toBe(false);
        const seen = await LeaderLock.inspect({ connectionString: bouncer.url, ...keys });
        expect(seen.leader?.id).toBe(id);
      }
      expect(low.isLeader).toBe(false);
    },
  );

  it('LeaderWatch works through it: it names the leader, connected', async () => {
    await using bouncer = await startPgBouncer({ server, poolMode: 'session' });
    const keys = randomKeys();
    const { lock } = await directLeader(keys);
    const watch = new LeaderWatch({ connectionString: bouncer.url, ...keys, id: `${testTag()}-watch` });
    try {
      await watch.start();
      expect(watch.connected).toBe(true);
      expect(watch.leader?.id).toBe(lock.id);
    } finally {
      await watch.close();
    }
  });
});
