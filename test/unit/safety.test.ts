import { describe, expect, it } from 'vitest';
import { parseSettingMs } from '../../src/core/connect.js';
import {
  type AppliedSettings,
  connectSettings,
  safetyFor,
  serverReleaseBound,
} from '../../src/core/safety.js';
import { FixedInterval, LeaderLock, LockState } from '../../src/index.js';
import { flush } from './fakes.js';
import { makeLock, startLeader } from './helpers.js';

const base: AppliedSettings = {
  serverVersion: 160000,
  idleSessionTimeoutMs: null,
  tcpKeepalivesIdleS: 0,
  tcpKeepalivesIntervalS: 0,
  tcpKeepalivesCount: 0,
  tcpUserTimeoutMs: 0,
  clientConnectionCheckIntervalMs: 0,
};

describe('server release bound', () => {
  it('is the smallest active mechanism', () => {
    expect(serverReleaseBound(base)).toBe(Number.POSITIVE_INFINITY); // Unix socket, nothing set
    expect(serverReleaseBound({ ...base, idleSessionTimeoutMs: 4000 })).toBe(4000);
    expect(
      serverReleaseBound({
        ...base,
        tcpKeepalivesIdleS: 2,
        tcpKeepalivesIntervalS: 1,
        tcpKeepalivesCount: 3,
      }),
    ).toBe(5000);
    expect(serverReleaseBound({ ...base, idleSessionTimeoutMs: 9000, tcpUserTimeoutMs: 3000 })).toBe(3000);
  });

  it('the settings asked for reach the target by every mechanism', () => {
    for (const target of [1000, 4200, 20_000, 61_000]) {
      const s = Object.fromEntries(connectSettings(target, 160000).map(([k, v]) => [k, Number(v)]));
      const applied: AppliedSettings = {
        ...base,
        idleSessionTimeoutMs: target,
        tcpKeepalivesIdleS: s.tcp_keepalives_idle ?? 0,
        tcpKeepalivesIntervalS: s.tcp_keepalives_interval ?? 0,
        tcpKeepalivesCount: s.tcp_keepalives_count ?? 0,
        tcpUserTimeoutMs: s.tcp_user_timeout ?? 0,
      };
      expect(serverReleaseBound(applied)).toBe(target);
    }
    // old servers get only what they know
    expect(connectSettings(5000, 110000).map(([k]) => k)).toEqual([
      'tcp_keepalives_idle',
      'tcp_keepalives_interval',
      'tcp_keepalives_count',
    ]);
  });

  it('safetyFor refuses a lease that a health period cannot renew, naming the numbers', () => {
    expect(() => safetyFor({ ...base, idleSessionTimeoutMs: 3000 }, 2000, 1000)).toThrow(
      /3000 ms after the last check.*lease of 2700 ms.*2000 \+ 1000 = 3000 ms/,
    );
    expect(safetyFor({ ...base, idleSessionTimeoutMs: 20_000 }, 5000, 5000)).toMatchObject({
      serverReleaseMs: 20_000,
      marginMs: 1000,
      leaseMs: 19_000,
      detectionMs: 10_000,
    });
  });

  it('parses formatted settings', () => {
    expect(parseSettingMs('4200ms')).toBe(4200);
    expect(parseSettingMs('5s')).toBe(5000);
    expect(parseSettingMs('1min')).toBe(60_000);
    expect(parseSettingMs('0')).toBe(0);
    expect(parseSettingMs('weird')).toBeNull();
  });

  it('the constructor rejects a configuration whose lease cannot hold a health period', () => {
    expect(
      () =>
        new LeaderLock({
          key1: 1,
          key2: 2,
          healthIntervalMs: 5000,
          queryTimeoutMs: 5000,
          serverReleaseMs: 10_000,
        }),
    ).toThrow(/serverReleaseMs 10000 leaves a lease of 9000 ms.*5000 \+ 5000 = 10000 ms/);
  });
});

describe('lease', () => {
  it('exposes the figures from the applied settings once acquired', async () => {
    const h = makeLock(); // healthIntervalMs 1000, queryTimeoutMs 500: target 3000
    expect(h.lock.safety).toBeNull();
    await startLeader(h);
    expect(h.lock.safety).toMatchObject({
      serverReleaseMs: 3000,
      marginMs: 300,
      leaseMs: 2700,
      detectionMs: 1500,
    });
    expect(h.lock.safety?.settings).toMatchObject({
      idleSessionTimeoutMs: 3000,
      tcpKeepalivesIdleS: 2,
      tcpKeepalivesIntervalS: 1,
      tcpKeepalivesCount: 3,
      tcpUserTimeoutMs: 3000,
    });
    await h.lock.shutdown();
    expect(h.lock.safety?.leaseMs).toBe(2700); // still readable after stop
  });

  it('a frozen process reads isLeader false on waking, before any timer runs; the next check renews', async () => {
    const h = makeLock();
    await startLeader(h);
    h.clock.freeze(2699);
    expect(h.lock.isLeader).toBe(true);
    h.clock.freeze(1);
    expect(h.lock.state).toBe(LockState.LEADER);
    expect(h.lock.isLeader).toBe(false); // lease over, though no timer has run
    await h.clock.advance(0); // the overdue health check runs now and succeeds
    expect(h.lock.isLeader).toBe(true);
    await h.lock.shutdown();
  });

  it('each successful check renews the lease from its send time', async () => {
    const h = makeLock({ autoReacquire: false });
    await startLeader(h);
    for (let i = 0; i < 5; i++) {
      await h.clock.advance(1000);
      expect(h.lock.isLeader).toBe(true);
    }
    h.db.behaviour.check = 'hang'; // checks stop renewing
    await h.clock.advance(1000);
    expect(h.lock.isLeader).toBe(true);
    await h.clock.advance(499); // the hung check (sent at 6000) is cut at 6500
    expect(h.lock.isLeader).toBe(true);
    await h.clock.advance(1);
    expect(h.lock.isLeader).toBe(false);
    expect(h.events).toContain('lost');
  });
});

describe('refusing what cannot be safe', () => {
  it('a server in recovery (a standby) is never locked on: ERR_PGLEADERLOCK_NO_PRIMARY; it leads within 100 ms of a promotion, with no back-off run up', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 60_000 }) });
    h.db.inRecovery = true;
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.FOLLOWER);
    expect(h.errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_NO_PRIMARY' });
    expect(h.errors[0]?.message).toMatch(
      /no primary among the configured hosts \(connect\(\): standby \(in recovery\)\)/,
    );
    expect(h.db.holder).toBeNull();
    const asked = h.db.clients
      .flatMap((c) => c.queries)
      .filter((q) => q.includes('pgleaderlock:survey')).length;
    await h.clock.advance(1000); // a standby-only cluster: one survey statement per 100 ms, on one connection
    const clients = h.db.clients.length;
    expect(
      h.db.clients.flatMap((c) => c.queries).filter((q) => q.includes('pgleaderlock:survey')).length,
    ).toBe(asked + 10);
    h.db.inRecovery = false; // promoted
    await h.clock.advance(100);
    expect(h.lock.isLeader).toBe(true);
    expect(h.db.clients.length).toBe(clients + 1); // surveyed again, then on the primary
    expect(h.errors).toHaveLength(1);
    await h.lock.shutdown();
    expect(h.db.open).toHaveLength(0);
  });

  it('a backend pid that changes between statements (transaction pooler) is refused', async () => {
    const h = makeLock({ autoReacquire: false });
    const original = h.db.answer.bind(h.db);
    h.db.answer = (kind, c) => ({ ...original(kind, c), pid: c.processID + 1 });
    await h.lock.start();
    await flush();
    expect(h.lock.state).toBe(LockState.STOPPED);
    expect(h.errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect(h.errors[0]?.message).toMatch(/backend pid changed/);
    expect(h.db.holder).toBeNull();
  });

  it('a managed service pinning idle_session_timeout too low makes acquisition unsafe: refused, lock freed', async () => {
    const h = makeLock();
    h.db.pinnedIdleSessionTimeout = '1000';
    await h.lock.start();
    await flush();
    expect(h.lock.isLeader).toBe(false);
    expect(h.errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect(h.db.holder).toBeNull();
    await h.lock.shutdown();
  });
});
