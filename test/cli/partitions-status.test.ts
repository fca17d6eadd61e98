/** `pgleaderlock status --name N --partitions P` against workers running in this process. */
import { describe, expect, it } from 'vitest';
import { PartitionedLeadership } from '../../src/index.js';
import { cli } from '../harness/cli.js';
import { databaseUrl, eventually } from '../harness/db.js';

describe('pgleaderlock status --partitions', () => {
  it('shows the members, how many partitions each owns, and the ownerless ones', async () => {
    const name = `status-parts-${Date.now()}`;
    const make = (id: string) =>
      new PartitionedLeadership({
        name,
        partitions: 10,
        id,
        connectionString: databaseUrl(),
        takeoverDelayMs: 0,
      });
    await using a = make('alpha');
    await using b = make('beta');
    await Promise.all([a.start(), b.start()]);
    await eventually(() => a.owned.size + b.owned.size === 10 && a.owned.size === 5, { what: 'a 5/5 split' });
    const json = await cli([
      'status',
      '--dsn',
      databaseUrl(),
      '--name',
      name,
      '--partitions',
      '10',
      '--json',
    ]);
    expect(json.code).toBe(0);
    const r = JSON.parse(json.stdout) as {
      members: { id: string; owned: number }[];
      owners: (string | null)[];
    };
    expect(r.members.map((m) => [m.id, m.owned])).toEqual([
      ['alpha', 5],
      ['beta', 5],
    ]);
    expect(r.owners.every((o) => o === 'alpha' || o === 'beta')).toBe(true);
    expect(r.owners.filter((o) => o === 'alpha').sort()).toEqual([...a.owned].map(() => 'alpha'));
    await a.shutdown();
    const text = await cli(['status', '--dsn', databaseUrl(), '--name', name, '--partitions', '10']);
    expect(text.stdout).toMatch(/^members: {3}1$/m);
    expect(text.stdout).toMatch(/^ {2}beta \(pid \d+\): (5|10) partitions$/m);
    const bad = await cli([
      'status',
      '--dsn',
      databaseUrl(),
      '--key1',
      '1',
      '--key2',
      '2',
      '--partitions',
      '10',
    ]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--partitions needs --name');
  });
});
