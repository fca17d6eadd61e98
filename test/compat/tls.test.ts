/**
 * The lock, `LeaderLock.inspect` and the CLI against a server that accepts TLS only, with
 * the certificate verified (`sslmode=verify-full`, `sslrootcert=<ca>`: pg-connection-string
 * reads the CA file into `ssl.ca`, and Node checks the chain and the host name).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaderLock, LockState } from '../../src/index.js';
import { cli } from '../harness/cli.js';
import { eventually, holderPid, lockHolders, randomKeys, sessionsLike } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { ownTlsServer, type TlsServer } from '../harness/tls.js';

let tls: TlsServer;
beforeAll(async () => {
  tls = await ownTlsServer();
});
afterAll(async () => {
  await tls?.dispose();
});

const locks = useLocks(() => tls.url);
const keyArgs = (k: { key1: number; key2: number }): string[] => [
  '--key1',
  String(k.key1),
  '--key2',
  String(k.key2),
];

describe('the server', () => {
  it('refuses a connection without TLS (pg_hba.conf has hostssl rules only)', async () => {
    const client = new pg.Client({ connectionString: tls.plainUrl });
    client.on('error', () => {});
    await expect(client.connect()).rejects.toThrow(/no pg_hba\.conf entry .*no encryption/);
  });

  it('serves TLS with the verified certificate', async () => {
    const client = new pg.Client({ connectionString: tls.url });
    client.on('error', () => {});
    await client.connect();
    try {
      const { rows } = await client.query<{ ssl: boolean }>(
        'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()',
      );
      expect(rows[0]?.ssl).toBe(true);
    } finally {
      await client.end();
    }
  });
});

describe.each(['wait', 'poll'] as const)('%s mode over TLS', (acquireMode) => {
  it('a candidate becomes leader, and a second takes over after its shutdown', async () => {
    const keys = randomKeys();
    const first = locks.make({ ...keys, acquireMode });
    await first.start();
    expect(await first.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
    const second = locks.make({ ...keys, acquireMode });
    await second.start();
    await eventually(() => second.state === LockState.FOLLOWER || second.state === LockState.ACQUIRING, {
      what: 'the second candidate to follow',
    });
    expect(second.isLeader).toBe(false);
    await first.shutdown();
    expect(await second.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
    const pid = await holderPid(tls.url, keys.key1, keys.key2);
    const ssl = new pg.Client({ connectionString: tls.url });
    ssl.on('error', () => {});
    await ssl.connect();
    try {
      const { rows } = await ssl.query<{ ssl: boolean }>('SELECT ssl FROM pg_stat_ssl WHERE pid = $1', [pid]);
      expect(rows[0]?.ssl).toBe(true); // the leader's own session is the TLS one
    } finally {
      await ssl.end();
    }
  });
});

describe('wait mode over TLS', () => {
  it('a follower shut down while it waits leaves the queue within 1 s and leaves no session', async () => {
    const keys = randomKeys();
    const leader = locks.make({ ...keys, acquireMode: 'wait' });
    await leader.start();
    await leader.waitForLeadership({ timeoutMs: 10_000 });
    const follower = locks.make({ ...keys, acquireMode: 'wait', waitSliceMs: 30_000 });
    await follower.start();
    await eventually(async () => (await lockHolders(tls.url, keys.key1, keys.key2)).some((r) => !r.granted), {
      what: 'the follower to queue',
    });
    const t0 = performance.now();
    await follower.shutdown();
    await eventually(
      async () => !(await lockHolders(tls.url, keys.key1, keys.key2)).some((r) => !r.granted),
      {
        what: 'no waiter in pg_locks',
        timeoutMs: 1000,
        intervalMs: 10,
      },
    );
    const leftMs = performance.now() - t0;
    await eventually(async () => (await sessionsLike(tls.url, `pgleaderlock:${follower.id}`)).length === 0, {
      what: "the follower's session to end",
      timeoutMs: 1000,
    });
    console.log(`[tls] waiting follower shut down: out of the queue in ${leftMs.toFixed(1)} ms`);
    expect(leader.isLeader).toBe(true);
  });
});

describe('inspect and the CLI over TLS', () => {
  it('LeaderLock.inspect names the leader and the waiter', async () => {
    const keys = randomKeys();
    const leader = locks.make({ ...keys, acquireMode: 'wait' });
    await leader.start();
    await leader.waitForLeadership({ timeoutMs: 10_000 });
    const waiter = locks.make({ ...keys, acquireMode: 'wait', waitSliceMs: 30_000 });
    await waiter.start();
    await eventually(async () => (await lockHolders(tls.url, keys.key1, keys.key2)).length === 2, {
      what: 'the waiter to queue',
    });
    const found = await LeaderLock.inspect({ connectionString: tls.url, ...keys });
    expect(found.leader?.id).toBe(leader.id);
    expect(found.waiters.map((w) => w.id)).toEqual([waiter.id]);
  });

  it('pgleaderlock status shows the leader; pgleaderlock break --yes --min-age 0 terminates it and the key is free', async () => {
    const keys = randomKeys();
    const leader = locks.make({ ...keys, acquireMode: 'wait', autoReacquire: false });
    await leader.start();
    await leader.waitForLeadership({ timeoutMs: 10_000 });
    const pid = await holderPid(tls.url, keys.key1, keys.key2);

    const status = await cli(['status', '--dsn', tls.url, ...keyArgs(keys), '--json']);
    expect(status.stderr).toBe('');
    expect(status.code).toBe(0);
    const s = JSON.parse(status.stdout) as { leader: { id: string; pid: number } | null };
    expect(s.leader).toMatchObject({ id: leader.id, pid });

    const broken = await cli(['break', '--dsn', tls.url, ...keyArgs(keys), '--yes', '--min-age', '0']);
    expect(broken.stderr).toBe('');
    expect(broken.code).toBe(0);
    expect(broken.stdout).toMatch(/terminated .*; the key is now free/);
    await eventually(() => leader.state === LockState.STOPPED, { what: 'the broken leader to stop' });
    expect(await lockHolders(tls.url, keys.key1, keys.key2)).toHaveLength(0);
  });
});
