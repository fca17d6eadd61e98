/** `pgleaderlock demo --partitions`: workers share partitions, one is killed, the rest rebalance. */
import { execFileSync } from 'node:child_process';
import { describe, expect, it, onTestFinished } from 'vitest';
import { PartitionedLeadership } from '../../src/index.js';
import { cli, startCli } from '../harness/cli.js';
import { databaseUrl, eventually, sessionsLike } from '../harness/db.js';

/** The `worker-N  count partitions` lines right after line `from`. */
function distributionAfter(lines: string[], from: number): Map<string, number> {
  const counts = new Map<string, number>();
  for (let i = from + 1; i < lines.length; i++) {
    const m = /^ {14}(worker-\d+) +(\d+) partitions/.exec(lines[i] ?? '');
    if (!m) break;
    counts.set(m[1] as string, Number(m[2]));
  }
  return counts;
}

/** Each worker owns ⌊P/N⌋ or ⌈P/N⌉, and all P are owned. */
function expectBalanced(counts: Map<string, number>, partitions: number, workers: number): void {
  expect(counts.size).toBe(workers);
  const values = [...counts.values()];
  expect(values.reduce((a, b) => a + b, 0)).toBe(partitions);
  for (const n of values) {
    expect([Math.floor(partitions / workers), Math.ceil(partitions / workers)]).toContain(n);
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('pgleaderlock demo --partitions', () => {
  it('kills a worker twice: each time all partitions are owned again, balanced, and a new worker takes its share', async () => {
    const name = `demo-parts-${Date.now()}`;
    const r = await cli(
      [
        'demo',
        '--partitions',
        '64',
        '--candidates',
        '3',
        '--failovers',
        '2',
        '--interval',
        '500ms',
        '--dsn',
        databaseUrl(),
        '--name',
        name,
      ],
      undefined,
      30_000,
    );
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const lines = r.stdout.split('\n');
    const at = (re: RegExp): number[] => lines.flatMap((l, i) => (re.test(l) ? [i] : []));

    const [start] = at(/ balanced, .* after the start: every partition owned once$/);
    expect(start).toBeDefined();
    expectBalanced(distributionAfter(lines, start as number), 64, 3);

    const kills = at(/ SIGKILL worker-\d+ \(pid \d+\), owner of (21|22) partitions$/);
    const rebalanced = at(/ its (21|22) partitions owned again [\d.]+ ms after the kill/);
    const joined = at(/ worker-\d+ owns its (21|22) partitions [\d.]+ ms after it started joining/);
    expect([kills.length, rebalanced.length, joined.length]).toEqual([2, 2, 2]);
    for (let k = 0; k < 2; k++) {
      const [kill, after, join] = [kills[k] ?? -1, rebalanced[k] ?? -1, joined[k] ?? -1];
      expect(kill).toBeLessThan(after);
      expect(after).toBeLessThan(join);
      const victim = /SIGKILL (worker-\d+)/.exec(lines[kill] ?? '')?.[1] as string;
      const survivors = distributionAfter(lines, after);
      expectBalanced(survivors, 64, 2);
      expect(survivors.has(victim)).toBe(false);
      // a SIGKILL is an unclean hand-over: the survivors hold its partitions 250 ms (the fence) first
      const ms = Number(/owned again ([\d.]+) ms/.exec(lines[after] ?? '')?.[1]);
      expect(ms).toBeGreaterThanOrEqual(250);
      // bound: cli/demo-partitions-owned-again
      expect(ms).toBeLessThan(2000);
      const moved = /; (\d+) moved \(the minimum: (\d+)\)$/.exec(lines[after] ?? '');
      expect(Number(moved?.[1])).toBeGreaterThanOrEqual(Number(moved?.[2]));
      const withJoiner = distributionAfter(lines, join);
      expectBalanced(withJoiner, 64, 3);
      const joiner = /(worker-\d+) owns its/.exec(lines[join] ?? '')?.[1] as string;
      expect(survivors.has(joiner)).toBe(false);
      // the joiner took only its share: the survivors each gave some, none was left empty
      for (const [id, n] of withJoiner) if (id !== joiner) expect(n).toBeLessThan(survivors.get(id) ?? 0);
    }
    expect(r.stdout).toMatch(
      /^2 kills, kill -> its partitions owned again: min [\d.]+ ms, median [\d.]+ ms, max [\d.]+ ms; partitions moved: \d+ on kills \(the minimum: \d+\), \d+ on joins \(the minimum: \d+\)$/m,
    );

    // nothing left on the server: no member, no owner, no session
    const left = await PartitionedLeadership.inspect({
      connectionString: databaseUrl(),
      name,
      partitions: 64,
    });
    expect(left.members).toEqual([]);
    expect(left.owners.every((o) => o === null)).toBe(true);
    await eventually(async () => (await sessionsLike(databaseUrl(), 'pgleaderlock:worker-')).length === 0, {
      what: 'the workers’ sessions to close',
    });
  });

  it('Ctrl-C (SIGINT) stops every worker and the embedded server: exit 130, no process left', async () => {
    const r = startCli(['demo', '--partitions', '16', '--candidates', '2', '--interval', '1h']);
    onTestFinished(() => {
      r.proc.kill('SIGKILL'); // a demo that did not exit must not outlive the test
    });
    await r.line(/balanced, .* after the start/, 20_000);
    // the workers and the server (its own process group, still the demo's child)
    const children = execFileSync('ps', ['-o', 'pid=', '--ppid', String(r.proc.pid)])
      .toString()
      .trim()
      .split(/\s+/)
      .map(Number);
    expect(children.length).toBe(3);
    r.proc.kill('SIGINT');
    const done = await r.exited;
    expect(done.code).toBe(130);
    expect(done.stderr).toBe('');
    expect(children.filter(alive)).toEqual([]);
  });

  it('workers leave when the demo is killed with SIGKILL (they watch their parent)', async () => {
    const name = `demo-parts-orphans-${Date.now()}`;
    const r = startCli([
      'demo',
      '--partitions',
      '8',
      '--dsn',
      databaseUrl(),
      '--name',
      name,
      '--interval',
      '1h',
    ]);
    onTestFinished(() => {
      r.proc.kill('SIGKILL');
    });
    await r.line(/balanced, .* after the start/);
    const members = async (): Promise<number> =>
      (await PartitionedLeadership.inspect({ connectionString: databaseUrl(), name, partitions: 8 })).members
        .length;
    expect(await members()).toBe(3);
    r.proc.kill('SIGKILL');
    await eventually(async () => (await members()) === 0, { what: 'every worker to leave' });
  });

  it.each([
    ['0', ['demo']],
    ['4097', ['demo']],
    ['1.5', ['demo']],
    ['many', ['demo']],
    ['-3', ['demo']],
    ['5000', ['status', '--name', 'x']],
  ])('--partitions %s is bad input (exit 2, one line naming it)', async (value, command) => {
    const r = await cli([...command, '--dsn', databaseUrl(), '--partitions', value]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toBe(
      `pgleaderlock ${command[0]}: --partitions must be an integer from 1 to 4096, received ${JSON.stringify(value)}\n`,
    );
  });

  it('--acquire-mode is refused with --partitions', async () => {
    const r = await cli(['demo', '--partitions', '8', '--acquire-mode', 'poll']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--acquire-mode is for the election demo, not with --partitions/);
  });
});
