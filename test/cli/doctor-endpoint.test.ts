/**
 * `pgleaderlock doctor` judges the connection string from its hosts and ports before it
 * connects (src/cli/doctor-endpoint.ts): provider, mode and the endpoint to use, with no
 * network (`--offline`), and first even when the host cannot be reached.
 */
import { describe, expect, it } from 'vitest';
import { cli } from '../harness/cli.js';

interface Report {
  ok: boolean;
  checks: { id: string; verdict: 'ok' | 'warn' | 'fail'; reason: string; fix?: string }[];
}

async function offline(dsn: string): Promise<{ code: number | null; report: Report }> {
  const done = await cli(['doctor', '--dsn', dsn, '--offline', '--json']);
  if (!done.stdout.trim()) throw new Error(`no output; stderr: ${done.stderr}`);
  return { code: done.code, report: JSON.parse(done.stdout) as Report };
}

describe('pgleaderlock doctor --offline: each provider documented pooled and direct string', () => {
  const cases: [string, 'ok' | 'warn' | 'fail', RegExp][] = [
    [
      'postgres://postgres.abcdefghijklmnop:pw@aws-0-eu-central-1.pooler.supabase.com:6543/postgres',
      'fail',
      /Supabase.*transaction pooler/,
    ],
    [
      'postgres://postgres.abcdefghijklmnop:pw@aws-0-eu-central-1.pooler.supabase.com:5432/postgres',
      'ok',
      /Supabase.*session pooler/,
    ],
    ['postgres://postgres:pw@db.abcdefghijklmnop.supabase.co:5432/postgres', 'ok', /Supabase.*direct/],
    [
      'postgresql://alex:pw@ep-cool-darkness-123456-pooler.us-east-2.aws.neon.tech/dbname?sslmode=require',
      'fail',
      /Neon.*transaction pooler/,
    ],
    [
      'postgresql://alex:pw@ep-cool-darkness-123456.us-east-2.aws.neon.tech/dbname?sslmode=require',
      'warn',
      /Neon.*direct/,
    ],
    [
      'postgres://app:pw@myserver.postgres.database.azure.com:6432/app',
      'fail',
      /Azure.*PgBouncer.*transaction pooler/,
    ],
    ['postgres://app:pw@myserver.postgres.database.azure.com:5432/app', 'ok', /Azure.*direct/],
    [
      'postgres://app:pw@myproxy.proxy-c7tj4example.us-east-1.rds.amazonaws.com:5432/app',
      'warn',
      /RDS Proxy/,
    ],
    [
      'postgres://app:pw@mydbcluster.cluster-c7tj4example.us-east-1.rds.amazonaws.com:5432/app',
      'warn',
      /Aurora.*moves on failover/,
    ],
    [
      'postgres://app:pw@mydbcluster.cluster-ro-c7tj4example.us-east-1.rds.amazonaws.com:5432/app',
      'fail',
      /Aurora.*read-only/,
    ],
    ['postgres://app:pw@127.0.0.1:5432/app', 'warn', /Cloud SQL Auth Proxy/],
    ['postgres://app:pw@db.example.com:5432/app', 'ok', /no managed provider/],
  ];
  for (const [dsn, verdict, reason] of cases) {
    it(`${dsn.replace(/:pw@/, ':***@')}: ${verdict}`, async () => {
      const { code, report } = await offline(dsn);
      expect(report.checks).toHaveLength(1);
      const [check] = report.checks;
      expect(check).toMatchObject({ id: 'endpoint', verdict });
      expect(check?.reason).toMatch(reason);
      expect(code).toBe(verdict === 'fail' ? 1 : 0);
      expect(JSON.stringify(report)).not.toContain(':pw@');
    });
  }

  it('the readable output names the endpoint to use', async () => {
    const done = await cli([
      'doctor',
      '--dsn',
      'postgres://postgres.abcdefghijklmnop:pw@aws-0-eu-central-1.pooler.supabase.com:6543/postgres',
      '--offline',
    ]);
    expect(done.code).toBe(1);
    expect(done.stdout).toMatch(/FAIL {2}endpoint/);
    expect(done.stdout).toContain(
      '→ use aws-0-eu-central-1.pooler.supabase.com:5432 (the same pooler in session mode) or the direct host db.abcdefghijklmnop.supabase.co:5432',
    );
  });
});

describe('pgleaderlock doctor with a host that cannot be reached', () => {
  it('judges the string first, then fails to connect: provider, mode and the endpoint to use are still shown', async () => {
    // a region that does not exist: no address, wherever the test runs
    const dsn = 'postgres://app:pw@mydbcluster.cluster-ro-c7tj4example.nowhere-9.rds.amazonaws.com:5432/app';
    const done = await cli(['doctor', '--dsn', dsn, '--json', '--timeout', '2s']);
    const report = JSON.parse(done.stdout) as Report;
    expect(done.code).toBe(1);
    expect(report.checks.map((c) => [c.id, c.verdict])).toEqual([
      ['endpoint', 'fail'],
      ['connect', 'fail'],
    ]);
    expect(report.checks[0]?.reason).toMatch(/Amazon Aurora, reader endpoint, mode: read-only endpoint/);
    expect(report.checks[0]?.fix).toBe(
      'use the cluster (writer) endpoint mydbcluster.cluster-<id>.nowhere-9.rds.amazonaws.com:5432',
    );
  });
});
