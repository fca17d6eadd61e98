/**
 * What the run's server applies on a leader's session (the settings behind the safety bound,
 * docs/safety.md), and the catalog columns the library reads. The compat driver runs this
 * once per PostgreSQL major and prints the figures (PGLEADERLOCK_COMPAT_RESULTS).
 */
import { describe, expect, it } from 'vitest';
import { recordResult, type ServerSettingsFigures } from '../harness/compat-results.js';
import { adminQuery, databaseUrl, randomKeys } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();

describe('session settings on this server', { tags: ['pg-major'] }, () => {
  it('a leader (healthIntervalMs 200, queryTimeoutMs 500) gets every setting it asks for: idle_session_timeout, keepalives, tcp_user_timeout and client_connection_check_interval applied; lease 1260 ms', async () => {
    const lock = locks.make({ ...randomKeys(), healthIntervalMs: 200, queryTimeoutMs: 500 });
    await lock.start();
    expect(await lock.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
    const safety = lock.safety;
    expect(safety).not.toBeNull();
    if (!safety) return;
    const s = safety.settings;
    // serverReleaseMs = 2 × (200 + 500) = 1400: idle 1400 ms, keepalives ⌈1.4/2⌉ s / ⌈1.4/6⌉ s × 3, user timeout 1400 ms
    expect(s.idleSessionTimeoutMs).toBe(1400);
    expect([s.tcpKeepalivesIdleS, s.tcpKeepalivesIntervalS, s.tcpKeepalivesCount]).toEqual([1, 1, 3]);
    expect(s.tcpUserTimeoutMs).toBe(1400);
    expect(s.clientConnectionCheckIntervalMs).toBe(50);
    expect(safety.serverReleaseMs).toBe(1400);
    expect(safety.leaseMs).toBe(1260);

    const [version] = await adminQuery<{ v: string }>(
      databaseUrl(),
      "SELECT current_setting('server_version') AS v",
    );
    const waitstart = await adminQuery(
      databaseUrl(),
      "SELECT 1 FROM information_schema.columns WHERE table_name = 'pg_locks' AND column_name = 'waitstart'",
    );
    const figures: ServerSettingsFigures = {
      serverVersion: version?.v ?? '?',
      idleSessionTimeoutMs: s.idleSessionTimeoutMs,
      tcpKeepalives: `${s.tcpKeepalivesIdleS}/${s.tcpKeepalivesIntervalS}/${s.tcpKeepalivesCount} s`,
      tcpUserTimeoutMs: s.tcpUserTimeoutMs,
      clientConnectionCheckIntervalMs: s.clientConnectionCheckIntervalMs,
      serverReleaseMs: safety.serverReleaseMs,
      leaseMs: safety.leaseMs,
      waitstart: waitstart.length === 1,
    };
    console.log(`[server-settings] ${JSON.stringify(figures)}`);
    recordResult('server-settings', figures);
  });

  it('pg_locks has waitstart (PG14+), which LeaderLock.inspect and pgleaderlock status order waiters by', async () => {
    const rows = await adminQuery(
      databaseUrl(),
      "SELECT 1 FROM information_schema.columns WHERE table_name = 'pg_locks' AND column_name = 'waitstart'",
    );
    expect(rows).toHaveLength(1);
  });
});
