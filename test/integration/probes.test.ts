/**
 * `probes(target)` served by `http.createServer` on 127.0.0.1 (port 0) for a LeaderLock and
 * a PartitionedLeadership against PostgreSQL: status codes, bodies, content types, HEAD,
 * 405/404, and the Express-style third argument. The CLI's use of it: test/cli/http.test.ts.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type LeaderLock, LockMetrics, type ProbesListener, probes } from '../../src/index.js';
import { randomKeys } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { useWorkers } from '../harness/workers.js';

const locks = useLocks();
const servers: http.Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});

/** Listen on 127.0.0.1, a free port; the base URL. */
async function serve(listener: http.RequestListener): Promise<string> {
  const server = http.createServer(listener);
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function get(
  url: string,
  method = 'GET',
): Promise<{ status: number; type: string; body: string; headers: Headers }> {
  const res = await fetch(url, { method });
  return {
    status: res.status,
    type: res.headers.get('content-type') ?? '',
    body: await res.text(),
    headers: res.headers,
  };
}

const METRICS_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

describe('probes(lock)', () => {
  it('before start: /healthz 200, /readyz 503 with the reason; once leader /readyz 200; /metrics is the LockMetrics text', async () => {
    const lock = locks.make(randomKeys());
    const base = await serve(probes(lock));
    const live = await get(`${base}/healthz`);
    expect(live.status).toBe(200);
    expect(live.type).toBe('application/json');
    expect(live.headers.get('cache-control')).toBe('no-store');
    const notReady = await get(`${base}/readyz`);
    expect(notReady.status).toBe(503);
    expect(JSON.parse(notReady.body)).toEqual({
      id: lock.id,
      live: true,
      ready: false,
      state: 'stopped',
      isLeader: false,
      reasons: ['not started'],
    });
    expect(notReady.body.endsWith('}\n')).toBe(true);

    await lock.start();
    expect(await lock.waitForLeadership({ timeoutMs: 5000 })).toBe(true);
    const ready = await get(`${base}/readyz?verbose=1`); // a query string is ignored
    expect(ready.status).toBe(200);
    expect(JSON.parse(ready.body)).toEqual({
      id: lock.id,
      live: true,
      ready: true,
      state: 'leader',
      isLeader: true,
      reasons: [],
    });
    const metrics = await get(`${base}/metrics`);
    expect(metrics.status).toBe(200);
    expect(metrics.type).toBe(METRICS_TYPE);
    expect(metrics.body).toContain(`pgleaderlock_is_leader{lock="${lock.key1},${lock.key2}"} 1\n`);
    expect(metrics.body).toContain(`pgleaderlock_ready{lock="${lock.key1},${lock.key2}"} 1\n`);
  });

  it('HEAD answers the status without a body; other methods 405 (Allow: GET, HEAD); other paths 404', async () => {
    const lock = locks.make(randomKeys());
    const base = await serve(probes(lock));
    const head = await get(`${base}/readyz`, 'HEAD');
    expect([head.status, head.body]).toEqual([503, '']);
    expect((await get(`${base}/healthz`, 'HEAD')).status).toBe(200);
    const post = await get(`${base}/healthz`, 'POST');
    expect([post.status, post.headers.get('allow'), post.body]).toEqual([
      405,
      'GET, HEAD',
      'GET or HEAD only\n',
    ]);
    const missing = await get(`${base}/health`);
    expect([missing.status, missing.body]).toEqual([404, 'not found: try /healthz, /readyz or /metrics\n']);
  });

  it('with a third argument (Express-style next): other paths go to next(), the probe paths are answered, read from req.url', async () => {
    const lock = locks.make(randomKeys());
    const handler: ProbesListener = probes(lock);
    const base = await serve((req, res) => {
      // a router mounted at /probes passes the rest of the path in req.url, as Express's app.use does
      if (req.url?.startsWith('/probes/')) req.url = req.url.slice('/probes'.length);
      handler(req, res, () => res.writeHead(418).end('next\n'));
    });
    expect((await get(`${base}/probes/healthz`)).status).toBe(200);
    expect((await get(`${base}/probes/readyz`)).status).toBe(503);
    expect((await get(`${base}/probes/metrics`)).type).toBe(METRICS_TYPE);
    const other = await get(`${base}/orders`);
    expect([other.status, other.body]).toEqual([418, 'next\n']);
  });

  it('a health() that throws answers 500 and the server keeps serving', async () => {
    const lock = locks.make(randomKeys());
    const base = await serve(probes(lock));
    const health = lock.health.bind(lock);
    lock.health = () => {
      throw new Error('boom');
    };
    const failed = await get(`${base}/healthz`);
    expect([failed.status, failed.body]).toEqual([500, 'probe failed: boom\n']);
    lock.health = health;
    expect((await get(`${base}/healthz`)).status).toBe(200);
  });

  it('refuses a target without their shape (id, health()), and a metrics option that is not a LockMetrics', () => {
    expect(() => probes({ id: 'x' } as unknown as LeaderLock)).toThrow(
      new TypeError(
        'probes needs a LeaderLock, a PartitionedLeadership or an object of their shape (id, health()), received {"id":"x"}',
      ),
    );
    const lock = locks.make(randomKeys());
    expect(() => probes(lock, { metrics: {} as unknown as LockMetrics })).toThrow(
      new TypeError('probes metrics must be a LockMetrics, received {}'),
    );
    using metrics = new LockMetrics(lock);
    expect(typeof probes(lock, { metrics })).toBe('function');
  });
});

describe('probes(workers)', () => {
  const workers = useWorkers({ healthIntervalMs: 200, takeoverDelayMs: 0 });

  it('before start /readyz 503 ("not started"); running 200 with owned and members; /metrics has the owned gauge; after shutdown 503 ("stopped")', async () => {
    const tag = workers.tag();
    const w = workers.worker({ name: `probes-${tag}` });
    const base = await serve(probes(w));
    expect((await get(`${base}/healthz`)).status).toBe(200);
    const before = await get(`${base}/readyz`);
    expect(before.status).toBe(503);
    expect(JSON.parse(before.body)).toEqual({
      id: w.id,
      live: true,
      ready: false,
      reasons: ['not started'],
      owned: 0,
      members: 0,
    });

    await w.start();
    expect(await w.waitForBalance({ timeoutMs: 5000 })).toBe(true);
    const ready = await get(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(JSON.parse(ready.body)).toEqual({
      id: w.id,
      live: true,
      ready: true,
      reasons: [],
      owned: 4,
      members: 1,
    });
    const metrics = await get(`${base}/metrics`);
    expect(metrics.type).toBe(METRICS_TYPE);
    expect(metrics.body).toContain(`pgleaderlock_partitions_owned{name="probes-${tag}"} ${w.owned.size}\n`);
    expect(metrics.body).toContain(`pgleaderlock_ready{name="probes-${tag}"} 1\n`);

    await w.shutdown();
    const after = await get(`${base}/readyz`);
    expect(after.status).toBe(503);
    expect(JSON.parse(after.body)).toMatchObject({ live: true, ready: false, reasons: ['stopped'] });
    expect((await get(`${base}/healthz`)).status).toBe(200);
  });
});
