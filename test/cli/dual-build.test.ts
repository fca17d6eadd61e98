/**
 * The dual-package hazard: an application that loads both builds (the ESM `dist/index.js`
 * and the CommonJS `dist/index.cjs`, say one through a CommonJS dependency) gets two copies
 * of every class. `probes()` and `LockMetrics` go by the public shape, so a lock made by one
 * copy is served by the other's; the test fakes pass as well. Built with the project's own
 * tsup config into a scratch folder, loaded in one child process.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { build } from 'tsup';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import configs from '../../tsup.config.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const OUT = path.join(ROOT, '.tmp', 'dual-build');

const SCRIPT = `
import { createRequire } from 'node:module';
import http from 'node:http';
const require = createRequire(import.meta.url);
const esm = await import('./index.js');
const cjs = require('./index.cjs');
const { FakeLeaderLock } = await import('./testing.js');
const out = { twoCopies: esm.LeaderLock !== cjs.LeaderLock };
const url = 'postgres://u:p@127.0.0.1:1/x'; // never started: no connection
const get = (listener, p) => new Promise((resolve) => {
  const server = http.createServer(listener).listen(0, '127.0.0.1', () => {
    http.get({ host: '127.0.0.1', port: server.address().port, path: p }, (res) => {
      let body = '';
      res.on('data', (d) => { body += d; });
      res.on('end', () => { server.close(); resolve({ status: res.statusCode, body }); });
    });
  });
});
try {
  const lock = new cjs.LeaderLock({ connectionString: url, name: 'dual' });
  const listener = esm.probes(lock);
  out.cjsLockByEsmProbes = { healthz: await get(listener, '/healthz'), metrics: await get(listener, '/metrics') };
  const workers = new esm.PartitionedLeadership({ connectionString: url, name: 'dual-p', partitions: 2 });
  out.esmWorkersByCjsMetrics = new cjs.LockMetrics(workers).prometheus();
  const fake = new FakeLeaderLock({ id: 'fake-1' });
  await fake.start();
  await fake.elect();
  out.fakeByCjsProbes = { readyz: await get(cjs.probes(fake), '/readyz'), metrics: await get(cjs.probes(fake), '/metrics') };
  await fake.shutdown();
} catch (err) {
  out.error = String(err);
}
process.stdout.write(JSON.stringify(out));
`;

describe('both builds loaded in one process (ESM and CommonJS)', () => {
  beforeAll(async () => {
    fs.rmSync(OUT, { recursive: true, force: true });
    // both builds of the library's entries (ESM and CommonJS are separate configs)
    const libs = (Array.isArray(configs) ? configs : [configs]).filter((c) =>
      JSON.stringify((c as { entry?: unknown }).entry).includes('testing'),
    );
    expect(libs.length).toBeGreaterThanOrEqual(2);
    for (const lib of libs)
      await build({ ...(lib as object), outDir: OUT, dts: false, silent: true, clean: false });
    fs.writeFileSync(path.join(OUT, 'package.json'), '{"type":"module"}\n');
    fs.writeFileSync(path.join(OUT, 'main.mjs'), SCRIPT);
  }, 120_000);
  afterAll(() => fs.rmSync(OUT, { recursive: true, force: true }));

  it('probes() and LockMetrics of one build serve a lock, a partition worker and a fake of the other', async () => {
    const stdout = await new Promise<string>((resolve, reject) =>
      execFile(process.execPath, [path.join(OUT, 'main.mjs')], { cwd: OUT }, (err, out, errOut) =>
        err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve(out),
      ),
    );
    const r = JSON.parse(stdout) as Record<string, unknown> & {
      cjsLockByEsmProbes: {
        healthz: { status: number; body: string };
        metrics: { status: number; body: string };
      };
      esmWorkersByCjsMetrics: string;
      fakeByCjsProbes: {
        readyz: { status: number; body: string };
        metrics: { status: number; body: string };
      };
    };
    expect(r.error).toBeUndefined();
    expect(r.twoCopies).toBe(true); // the hazard is real: two LeaderLock classes
    expect(r.cjsLockByEsmProbes.healthz.status).toBe(200); // a stopped lock is live
    expect(JSON.parse(r.cjsLockByEsmProbes.healthz.body)).toMatchObject({ live: true, ready: false });
    expect(r.cjsLockByEsmProbes.metrics.status).toBe(200);
    expect(r.cjsLockByEsmProbes.metrics.body).toMatch(
      /^pgleaderlock_is_leader\{name="dual",lock="-?\d+,-?\d+"\} 0$/m,
    );
    expect(r.esmWorkersByCjsMetrics).toMatch(/^pgleaderlock_partitions_owned\{name="dual-p"\} 0$/m);
    expect(r.fakeByCjsProbes.readyz.status).toBe(200); // elected: ready
    expect(JSON.parse(r.fakeByCjsProbes.readyz.body)).toMatchObject({ id: 'fake-1', ready: true });
    expect(r.fakeByCjsProbes.metrics.status).toBe(404);
  }, 30_000);
});
