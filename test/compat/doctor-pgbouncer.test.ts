/**
 * `pgleaderlock doctor` through a real PgBouncer: transaction mode fails the pooler and
 * exclusion checks (exit 1), session mode passes with a warning, and a pooler that rejects
 * a startup parameter fails the connect check with its words, password redacted.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../harness/cli.js';
import { ownServer } from '../harness/db.js';
import { type PgServer, TEST_PASSWORD } from '../harness/pg-server.js';
import { type PoolMode, startPgBouncer } from '../harness/pgbouncer.js';

let server: PgServer;
beforeAll(async () => {
  server = await ownServer();
});
afterAll(async () => {
  await server?.dispose();
});

interface Report {
  ok: boolean;
  checks: { id: string; verdict: string; reason: string; fix?: string }[];
}

async function doctor(url: string): Promise<{ code: number | null; report: Report; text: string }> {
  const done = await cli(['doctor', '--dsn', url, '--json', '--timeout', '3s']);
  return { code: done.code, report: JSON.parse(done.stdout) as Report, text: done.stdout + done.stderr };
}
const verdict = (r: Report, id: string): string | undefined => r.checks.find((c) => c.id === id)?.verdict;

describe('pgleaderlock doctor through PgBouncer', () => {
  it.each<[PoolMode, number]>([
    ['transaction', 1],
    ['transaction', 20],
    ['statement', 20],
  ])('%s mode (pool size %i): pooler and exclusion fail, exit 1', async (poolMode, defaultPoolSize) => {
    await using bouncer = await startPgBouncer({ server, poolMode, defaultPoolSize });
    const { code, report } = await doctor(bouncer.url);
    expect(code).toBe(1);
    expect(verdict(report, 'connect')).toBe('ok');
    const pooler = report.checks.find((c) => c.id === 'pooler');
    expect(pooler?.verdict).toBe('fail');
    expect(pooler?.reason).toContain('transaction or statement mode');
    expect(pooler?.fix).toContain('session mode');
    expect(verdict(report, 'exclusion')).toBe('fail');
    expect(verdict(report, 'settings')).toBe('fail');
  });

  it('session mode: the pooler warns (it works), exclusion ok, exit 0', async () => {
    await using bouncer = await startPgBouncer({ server, poolMode: 'session' });
    const { code, report } = await doctor(bouncer.url);
    expect(verdict(report, 'pooler')).toBe('warn');
    expect(report.checks.find((c) => c.id === 'pooler')?.reason).toContain('session mode');
    expect(verdict(report, 'exclusion')).toBe('ok');
    expect(verdict(report, 'settings')).toBe('ok');
    expect(code).toBe(0);
  });

  it("a pooler that rejects the 'options' startup parameter: connect fails naming it, password redacted", async () => {
    await using bouncer = await startPgBouncer({ server, poolMode: 'session' });
    const url = `${bouncer.url}?options=${encodeURIComponent('-c statement_timeout=0')}`;
    const { code, report, text } = await doctor(url);
    expect(code).toBe(1);
    expect(report.checks).toHaveLength(1);
    expect(report.checks[0]).toMatchObject({ id: 'connect', verdict: 'fail' });
    expect(report.checks[0]?.reason).toMatch(/unsupported startup parameter: options/);
    expect(text).not.toContain(TEST_PASSWORD);
  });
});
