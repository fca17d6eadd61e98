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

  it('a keepalive that is off in any of its three settings (0: a Unix socket) bounds nothing', () => {
    const keepalive = { tcpKeepalivesIdleS: 1, tcpKeepalivesIntervalS: 1, tcpKeepalivesCount: 3 };
    expect(serverReleaseBound({ ...base, ...keepalive })).toBe(4000);
    for (const off of ['tcpKeepalivesIdleS', 'tcpKeepalivesIntervalS', 'tcpKeepalivesCount'] as const) {
      expect(serverReleaseBound({ ...base, ...keepalive, [off]: 0 })).toBe(Number.POSITIVE_INFINITY);
      expect(serverReleaseBound({ ...base, ...keepalive, [off]: 0, tcpUserTimeoutMs: 9000 })).toBe(9000);
    }
  });

  it('each setting from the first server version that has it: tcp_user_timeout from 12, client_connection_check_interval (50 ms) from 14', () => {
    const names = (version: number) => connectSettings(5000, version).map(([k]) => k);
    expect(names(119_999)).not.toContain('tcp_user_timeout');
    expect(connectSettings(5000, 120_000)).toContainEqual(['tcp_user_timeout', '5000']);
    expect(names(139_999)).not.toContain('client_connection_check_interval');
    expect(connectSettings(5000, 140_000)).toContainEqual(['client_connection_check_interval', '50']);
  });

  it('a lease exactly as long as healthIntervalMs + queryTimeoutMs is refused (it must exceed it), naming what the server applied', () => {
    // keepalives 1 + 2 × 3 = 7 s, the least bound; margin 700 ms: a lease of 6300 ms
    const applied = {
      ...base,
      idleSessionTimeoutMs: 8000,
      tcpKeepalivesIdleS: 1,
      tcpKeepalivesIntervalS: 2,
      tcpKeepalivesCount: 3,
      tcpUserTimeoutMs: null,
    };
    expect(safetyFor(applied, 3000, 3299).leaseMs).toBe(6300);
    expect(() => safetyFor(applied, 3000, 3300)).toThrow(
      'unsafe session: the server would release the lock 7000 ms after the last check ' +
        '(idle_session_timeout=8000ms, tcp_keepalives=1/2/3s, tcp_user_timeout=n/ams), leaving a lease of 6300 ms',
    );
    expect(() =>
      safetyFor({ ...applied, idleSessionTimeoutMs: null, tcpUserTimeoutMs: 0 }, 3000, 3300),
    ).toThrow('(idle_session_timeout=n/ams, tcp_keepalives=1/2/3s, tcp_user_timeout=0ms)');
  });

  it('the options: serverReleaseMs whose lease equals healthIntervalMs + queryTimeoutMs is refused; 1 ms less is accepted', () => {
    const lock = (queryTimeoutMs: number) => () =>
      new LeaderLock({ key1: 1, key2: 2, healthIntervalMs: 4000, queryTimeoutMs, serverReleaseMs: 10_000 });
    expect(lock(5000)).toThrow(RangeError);
    expect(lock(5000)).toThrow(/leaves a lease of 9000 ms.*4000 \+ 5000 = 9000 ms/);
    expect(lock(4999)).not.toThrow();
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

  it('a managed service pinning idle_session_timeout too low makes acquisition unsafe: refused, lock freed; a refusal of the grant, not of the path, so the lock keeps trying and leads once the pin is lifted', async () => {
    const h = makeLock({ retryStrategy: new FixedInterval({ intervalMs: 250 }) });
    h.db.pinnedIdleSessionTimeout = '1000';
    await h.lock.start();
    await flush();
    expect(h.lock.isLeader).toBe(false);
    expect(h.errors[0]).toMatchObject({ code: 'ERR_PGLEADERLOCK_UNSAFE' });
    expect(h.db.holder).toBeNull();
    // only a refusal of the path (a shared backend, a standby) ends a run that has not served
    // yet (core/errors.ts isPathRefusal; docs/safety.md, "Poolers"): this one is retried
    await h.clock.advance(1000);
    await flush();
    expect(h.lock.state).not.toBe(LockState.STOPPED);
    expect(h.errors.length).toBeGreaterThan(1);
    h.db.pinnedIdleSessionTimeout = null;
    await h.clock.advance(1000);
    await flush();
    expect(h.lock.isLeader).toBe(true);
    await h.lock.shutdown();
  });
});
