/**
 * `pgleaderlock run --http`: /healthz, /readyz and /metrics scraped over HTTP from running
 * processes (dist/cli.js) against real PostgreSQL.
 */
import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { LeaderLock } from '../../src/index.js';
import { type Running, useCli } from '../harness/cli.js';
import { assertNoSessions, databaseUrl, eventually, lockHolders, ownServer } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();
const start = useCli();

/** Start `run --http 127.0.0.1:0` and return the process and the base URL it printed. */
async function runWithHttp(args: string[]): Promise<{ r: Running; base: string }> {
  const r = start(['run', ...args, '--json', '--http', '127.0.0.1:0']);
  const line = await r.line(/"event":"http"/);
  const { port } = JSON.parse(line) as { port: number };
  return { r, base: `http://127.0.0.1:${port}` };
}

async function get(url: string): Promise<{ status: number; type: string; body: string }> {
  const res = await fetch(url);
  return { status: res.status, type: res.headers.get('content-type') ?? '', body: await res.text() };
}

/** The value of one sample, e.g. sample(text, 'pgleaderlock_is_leader'). */
function sample(text: string, name: string, labels = ''): number | undefined {
  const re = new RegExp(`^${name}\\{[^}]*${labels}[^}]*\\} (\\S+)$`, 'm');
  const m = re.exec(text);
  return m ? Number(m[1]) : undefined;
}

describe('pgleaderlock run --http', () => {
  it('a leader scrapes is_leader 1 and a follower 0; both are live and ready; after failover the metrics follow', async () => {
    const name = `http-${locks.tag}`;
    const [key1, key2] = LeaderLock.keysFromName(name);
    const common = ['--dsn', databaseUrl(), '--name', name, '--health-interval', '200ms'];
    const a = await runWithHttp([...common, '--id', `${locks.tag}-a`]);
    await a.r.line(/"event":"acquired"/);
    const b = await runWithHttp([...common, '--id', `${locks.tag}-b`]);
    await b.r.line(/"to":"acquiring"/);
    // queued on the server: the state is printed before the session connects and LISTENs; a
    // leader leaving before that leaves no `released` the follower could see (a full delay)
    await eventually(async () => (await lockHolders(databaseUrl(), key1, key2)).some((h) => !h.granted), {
      what: 'the follower to wait in pg_advisory_lock',
    });

    const am = await get(`${a.base}/metrics`);
    expect(am.status).toBe(200);
    expect(am.type).toBe('text/plain; version=0.0.4; charset=utf-8');
    const lock = `lock="${key1},${key2}"`;
    expect(am.body).toContain(`# TYPE pgleaderlock_is_leader gauge`);
    expect(am.body).toContain(`pgleaderlock_is_leader{${lock}} 1`);
    expect(sample(am.body, 'pgleaderlock_state', 'state="leader"')).toBe(1);
    expect(sample(am.body, 'pgleaderlock_acquisitions_total')).toBe(1);
    expect(sample(am.body, 'pgleaderlock_transitions_total', 'to="leader"')).toBe(1);
    const lease = sample(am.body, 'pgleaderlock_lease_remaining_seconds');
    expect(lease).toBeGreaterThan(0);
    const bm = await get(`${b.base}/metrics`);
    expect(bm.body).toContain(`pgleaderlock_is_leader{${lock}} 0`);
    expect(sample(bm.body, 'pgleaderlock_state', 'state="leader"')).toBe(0);
    expect(sample(bm.body, 'pgleaderlock_lease_remaining_seconds')).toBeUndefined();

    for (const { base } of [a, b]) {
      const live = await get(`${base}/healthz`);
      const ready = await get(`${base}/readyz`);
      expect([live.status, ready.status]).toEqual([200, 200]); // a follower is ready: no restart loop
      expect(JSON.parse(ready.body)).toMatchObject({ live: true, ready: true, reasons: [] });
    }
    expect((await get(`${a.base}/nothing`)).status).toBe(404);

    // the leader leaves: the follower scrapes 1, with the failover it saw
    a.r.proc.kill('SIGTERM');
    expect((await a.r.exited).code).toBe(0);
    await b.r.line(/"event":"acquired"/);
    const after = await get(`${b.base}/metrics`);
    expect(sample(after.body, 'pgleaderlock_is_leader')).toBe(1);
    const failover = sample(after.body, 'pgleaderlock_last_failover_seconds');
    expect(failover).toBeGreaterThanOrEqual(0);
    // bound: cli/http-failover-seconds
    expect(failover).toBeLessThan(0.2); // wait mode, a clean handover: from the grant, milliseconds
    // the leader's port is closed once it exited
    await expect(fetch(`${a.base}/healthz`)).rejects.toThrow();
    b.r.proc.kill('SIGTERM');
    expect((await b.r.exited).code).toBe(0);
    await assertNoSessions(locks.tag);
  });

  it('during a database outage the process stays up: /healthz 200, /readyz 503 with the reason; ready again after', async () => {
    await using server = await ownServer();
    const keys = { key1: 42, key2: 4242 };
    const { r, base } = await runWithHttp([
      '--dsn',
      server.url,
      '--key1',
      String(keys.key1),
      '--key2',
      String(keys.key2),
      '--retry-base',
      '100ms',
      '--retry-max',
      '200ms',
    ]);
    await r.line(/"event":"acquired"/);
    await server.stop('fast');
    await r.line(/"event":"lost"/);
    let ready = await get(`${base}/readyz`);
    await eventually(
      async () => {
        ready = await get(`${base}/readyz`);
        return ready.status === 503;
      },
      { what: '/readyz to answer 503' },
    );
    expect(JSON.parse(ready.body).reasons[0]).toMatch(/^the last attempt failed: /);
    expect((await get(`${base}/healthz`)).status).toBe(200);
    const metrics = await get(`${base}/metrics`);
    expect(sample(metrics.body, 'pgleaderlock_is_leader')).toBe(0);
    expect(sample(metrics.body, 'pgleaderlock_losses_total')).toBe(1);
    expect(sample(metrics.body, 'pgleaderlock_ready')).toBe(0);

    await server.start();
    await r.line(/"event":"acquired".*"term":2/);
    expect((await get(`${base}/readyz`)).status).toBe(200);
    r.proc.kill('SIGTERM');
    expect((await r.exited).code).toBe(0);
  });

  it('a port in use: exit 2 with a clear message, before joining the election', async () => {
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const { port } = blocker.address() as net.AddressInfo;
    try {
      const r = start([
        'run',
        '--dsn',
        databaseUrl(),
        '--name',
        `http-busy-${locks.tag}`,
        '--id',
        `${locks.tag}-busy`,
        '--http',
        `127.0.0.1:${port}`,
      ]);
      const done = await r.exited;
      expect(done.code).toBe(2);
      expect(done.stderr.trim()).toBe(
        `pgleaderlock run: --http 127.0.0.1:${port}: cannot listen: the port is in use`,
      );
      expect(done.stdout).not.toContain('acquired');
      await assertNoSessions(locks.tag);
    } finally {
      blocker.close();
    }
  });

  it.each(['9464', 'localhost', ':99999', 'host:port'])(
    '--http %s: exit 2 naming the value',
    async (value) => {
      const r = start(['run', '--dsn', databaseUrl(), '--name', 'x', '--http', value]);
      const done = await r.exited;
      expect(done.code).toBe(2);
      expect(done.stderr).toContain(`--http must be HOST:PORT`);
      expect(done.stderr).toContain(`received ${JSON.stringify(value)}`);
    },
  );
});
