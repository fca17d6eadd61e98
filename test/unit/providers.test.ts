/**
 * Managed PostgreSQL endpoints judged from host and port alone (src/core/providers.ts): each
 * provider's documented pooled and direct strings (docs/deploy.md cites where each pattern is
 * documented).
 */
import { describe, expect, it } from 'vitest';
import { judgeEndpoint, refusalAdvice } from '../../src/core/providers.js';

const judge = (host: string, port: number, user?: string) => {
  const a = judgeEndpoint(host, port, user);
  if (!a) throw new Error(`no verdict for ${host}:${port}`);
  return a;
};

describe('Supabase', () => {
  const pooler = 'aws-0-eu-central-1.pooler.supabase.com';
  it('the shared pooler on 6543 is transaction mode: refused, with port 5432 and the direct host (project ref from the user name) to use', () => {
    const a = judge(pooler, 6543, 'postgres.abcdefghijklmnop');
    expect(a).toMatchObject({ provider: 'Supabase', mode: 'transaction pooler', verdict: 'refused' });
    expect(a.use).toContain(`${pooler}:5432`);
    expect(a.use).toContain('db.abcdefghijklmnop.supabase.co:5432');
  });
  it('the shared pooler on 5432 is session mode: works', () => {
    expect(judge(pooler, 5432)).toMatchObject({ mode: 'session pooler', verdict: 'works' });
  });
  it('the direct host db.<ref>.supabase.co:5432 works; its port 6543 (dedicated PgBouncer) is refused', () => {
    expect(judge('db.abcdefghijklmnop.supabase.co', 5432)).toMatchObject({
      mode: 'direct',
      verdict: 'works',
    });
    const dedicated = judge('db.abcdefghijklmnop.supabase.co', 6543);
    expect(dedicated).toMatchObject({ mode: 'transaction pooler', verdict: 'refused' });
    expect(dedicated.use).toBe('db.abcdefghijklmnop.supabase.co:5432');
  });
  it('a pooler port that is neither is unknown, not guessed', () => {
    expect(judge(pooler, 7000).verdict).toBe('unknown');
  });
});

describe('Neon', () => {
  it('-pooler after the endpoint id is PgBouncer in transaction mode: refused, the same host without -pooler to use', () => {
    const a = judge('ep-cool-darkness-123456-pooler.us-east-2.aws.neon.tech', 5432);
    expect(a).toMatchObject({ provider: 'Neon', mode: 'transaction pooler', verdict: 'refused' });
    expect(a.use).toContain('ep-cool-darkness-123456.us-east-2.aws.neon.tech:5432');
  });
  it('the direct ep-… host works, with the scale-to-zero caveat', () => {
    const a = judge('ep-cool-darkness-123456.us-east-2.aws.neon.tech', 5432);
    expect(a).toMatchObject({ mode: 'direct', verdict: 'caveat' });
    expect(a.reason).toMatch(/scale to zero/);
  });
  it('Azure regions too', () => {
    expect(judge('ep-x-a1b2c3d4-pooler.eastus2.azure.neon.tech', 5432).verdict).toBe('refused');
    expect(judge('ep-x-a1b2c3d4.eastus2.azure.neon.tech', 5432).mode).toBe('direct');
  });
});

describe('Azure Database for PostgreSQL flexible server', () => {
  const host = 'myserver.postgres.database.azure.com';
  it('port 6432 is the built-in PgBouncer (transaction mode by default): refused, 5432 to use', () => {
    const a = judge(host, 6432);
    expect(a).toMatchObject({ mode: 'transaction pooler', verdict: 'refused' });
    expect(a.use).toContain(`${host}:5432`);
  });
  it('port 5432 is direct: works', () => {
    expect(judge(host, 5432)).toMatchObject({ mode: 'direct', verdict: 'works' });
  });
});

describe('AWS', () => {
  it('an RDS Proxy endpoint: a caveat (pinning, cancel), the cluster endpoint to use', () => {
    const a = judge('myproxy.proxy-c7tj4example.us-east-1.rds.amazonaws.com', 5432);
    expect(a).toMatchObject({ provider: 'AWS RDS Proxy', mode: 'proxy', verdict: 'caveat' });
    expect(a.use).toContain('.cluster-');
  });
  it("Aurora's cluster endpoint: the writer, an address that moves on failover", () => {
    const a = judge('mydbcluster.cluster-c7tj4example.us-east-1.rds.amazonaws.com', 5432);
    expect(a).toMatchObject({ provider: 'Amazon Aurora', verdict: 'caveat' });
    expect(a.mode).toMatch(/moves on failover/);
  });
  it("Aurora's reader endpoint is read-only: refused, the cluster endpoint to use", () => {
    const a = judge('mydbcluster.cluster-ro-c7tj4example.us-east-1.rds.amazonaws.com', 5432);
    expect(a).toMatchObject({ mode: 'read-only endpoint', verdict: 'refused' });
    expect(a.use).toBe(
      'the cluster (writer) endpoint mydbcluster.cluster-<id>.us-east-1.rds.amazonaws.com:5432',
    );
  });
  it('a custom endpoint is unknown; a DB instance endpoint works', () => {
    expect(judge('mine.cluster-custom-c7tj4example.us-east-1.rds.amazonaws.com', 5432).verdict).toBe(
      'unknown',
    );
    expect(judge('mydb.c7tj4example.us-east-1.rds.amazonaws.com', 5432)).toMatchObject({
      provider: 'AWS RDS',
      verdict: 'works',
    });
  });
});

describe('what the string cannot tell', () => {
  it('a local address (a Cloud SQL Auth Proxy or connector, a sidecar, PostgreSQL itself) is unknown and says so', () => {
    for (const host of ['127.0.0.1', 'localhost', '::1']) {
      const a = judge(host, 5432);
      expect(a.verdict).toBe('unknown');
      expect(a.reason).toMatch(/Cloud SQL Auth Proxy/);
    }
  });
  it('any other host: no verdict', () => {
    expect(judgeEndpoint('db.example.com', 5432)).toBeNull();
    expect(judgeEndpoint('10.0.0.5', 6432)).toBeNull();
  });
});

describe('refusalAdvice (the lock refusal message)', () => {
  it('names the provider, the endpoint and the one to use for a refused endpoint; nothing otherwise', () => {
    expect(refusalAdvice('aws-0-eu-central-1.pooler.supabase.com', 6543)).toBe(
      "aws-0-eu-central-1.pooler.supabase.com:6543 is Supabase's shared pooler (Supavisor) (transaction pooler): use aws-0-eu-central-1.pooler.supabase.com:5432 (the same pooler in session mode) or the direct host db.<project-ref>.supabase.co:5432",
    );
    expect(refusalAdvice('aws-0-eu-central-1.pooler.supabase.com', 5432)).toBeNull();
    expect(refusalAdvice('db.example.com', 6432)).toBeNull();
  });
});
