/**
 * CLI promises that take a long time to show, kept out of `npm test` (`npm run test:compat`,
 * component `cli-slow`).
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { keysOf } from '../../src/partitions/sql.js';
import { cli } from '../harness/cli.js';
import { databaseUrl } from '../harness/db.js';

describe('pgleaderlock demo --partitions', () => {
  it('exits 1 when the workers are not balanced within 30 s (a partition held by another session), saying so', async () => {
    const name = `demo-unbalanced-${Date.now()}`;
    const blocker = new pg.Client({
      connectionString: databaseUrl(),
      application_name: 'pgleaderlock-test-blocker',
    });
    await blocker.connect();
    try {
      await blocker.query('SELECT pg_advisory_lock($1, 0)', [keysOf(name).partitions]); // partition 0, never free
      const t0 = performance.now();
      const r = await cli(
        ['demo', '--dsn', databaseUrl(), '--name', name, '--partitions', '8', '--candidates', '2'],
        undefined,
        60_000,
      );
      const took = performance.now() - t0;
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(/not balanced after 30\.0 s \(1 ownerless\); stopping/);
      expect(took).toBeGreaterThanOrEqual(30_000);
      // the rule, the demo's 30 s limit, plus a margin for load (3 × the most a figure went past it)
      // bound: compat/cli-slow-unbalanced
      expect(took).toBeLessThan(30_000 + 10_000);
    } finally {
      await blocker.end();
    }
  });
});
