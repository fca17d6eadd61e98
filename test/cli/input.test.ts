/** The CLI's front door: --help/--version, and bad input exits 2 with one line naming it. */
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { cleanEnv, cli } from '../harness/cli.js';
import { databaseUrl } from '../harness/db.js';
import { freePort } from '../harness/pg-server.js';

const pkg = JSON.parse(fs.readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  version: string;
};
const COMMANDS = ['run', 'acquire', 'status', 'break', 'resign', 'handover', 'doctor', 'demo'];

describe('help and version', () => {
  it('--version prints the package version', async () => {
    const r = await cli(['--version']);
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toBe(pkg.version);
  });

  it('--help lists every command', async () => {
    const r = await cli(['--help']);
    expect(r.code).toBe(0);
    for (const c of COMMANDS) expect(r.stdout).toMatch(new RegExp(`^  ${c} `, 'm'));
  });

  it.each(COMMANDS)('%s --help exits 0, and docs/cli.md documents each of its options', async (command) => {
    const r = await cli([command, '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`Usage: pgleaderlock ${command}`);
    const options = [...r.stdout.matchAll(/^ {2}(?:-\w, )?--([\w-]+)/gm)].map((m) => m[1]);
    expect(options.length).toBeGreaterThan(2);
    const docs = fs.readFileSync(new URL('../../docs/cli.md', import.meta.url), 'utf8');
    const section = docs.split(/^## /m).find((s) => s.startsWith(`\`pgleaderlock ${command}`)) ?? '';
    expect(section, `docs/cli.md has a section for ${command}`).not.toBe('');
    for (const o of options) expect(section, `docs/cli.md ${command} documents --${o}`).toContain(`--${o}`);
  });
});

describe('bad input: exit 2, one line naming the problem, no stack trace', () => {
  const dsn = (): string => databaseUrl();
  const cases: [string, () => string[], RegExp][] = [
    ['unknown command', () => ['elect'], /unknown command "elect"/],
    ['missing keys', () => ['run', '--dsn', dsn()], /missing the lock key: give --key1 and --key2/],
    ['missing key2', () => ['acquire', '--dsn', dsn(), '--key1', '5'], /missing --key2/],
    [
      'key out of range',
      () => ['run', '--dsn', dsn(), '--key1', '1', '--key2', '3000000000'],
      /--key2 must be a 32-bit signed integer in \[-2147483648, 2147483647\], received 3000000000/,
    ],
    [
      'key not an integer',
      () => ['status', '--dsn', dsn(), '--key1', '1.5', '--key2', '2'],
      /--key1 must be an integer, received "1.5"/,
    ],
    ['keys and name', () => ['status', '--name', 'x', '--key1', '1'], /either --name or --key1 and --key2/],
    [
      'bad duration',
      () => ['run', '--dsn', dsn(), '--name', 'x', '--health-interval', '5x'],
      /--health-interval: bad duration "5x"/,
    ],
    [
      'bad --wait',
      () => ['acquire', '--dsn', dsn(), '--name', 'x', '--wait=soon'],
      /--wait: bad duration "soon"/,
    ],
    [
      'unknown option',
      () => ['run', '--name', 'x', '--helth-interval', '5s'],
      /Unknown option '--helth-interval'/,
    ],
    [
      'bad acquire mode',
      () => ['run', '--dsn', dsn(), '--name', 'x', '--acquire-mode', 'spin'],
      /--acquire-mode must be wait or poll, received "spin"/,
    ],
    ['no database', () => ['status', '--name', 'x'], /no database given: pass --dsn/],
    [
      'a command after -- where none is taken',
      () => ['status', '--name', 'x', '--', 'ls'],
      /status takes no command after --/,
    ],
    [
      'a value the library rejects, named by its flag',
      () => ['run', '--dsn', dsn(), '--name', 'x', '--health-interval', '0'],
      /--health-interval must be greater than 0 \(milliseconds\), received 0/,
    ],
    [
      'retry bounds the wrong way round',
      () => ['run', '--dsn', dsn(), '--name', 'x', '--retry-base', '5s', '--retry-max', '1s'],
      /--retry-max \(1000 ms\) must not be less than --retry-base \(5000 ms\)/,
    ],
  ];

  it.each(cases)('%s', async (_what, args, message) => {
    const r = await cli(args());
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).toMatch(/^pgleaderlock( \w+)?: /);
  });

  it('unreachable server: names it, password redacted', async () => {
    const port = await freePort();
    const r = await cli([
      'status',
      '--name',
      'x',
      '--dsn',
      `postgres://app:hunter2-secret@127.0.0.1:${port}/db`,
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr.trim()).toBe(
      `pgleaderlock status: cannot connect to postgres://app:***@127.0.0.1:${port}/db: connect ECONNREFUSED 127.0.0.1:${port}`,
    );
  });

  it('wrong password: the server says so, with its SQLSTATE, password redacted (also from $PG_DSN)', async () => {
    const url = new URL(databaseUrl());
    url.password = 'wrong-password-x9';
    const r = await cli(['run', '--name', 'x'], cleanEnv({ PG_DSN: url.toString() }));
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(
      /cannot connect to postgres:\/\/\w+:\*\*\*@.*password authentication failed.*28P01/,
    );
    expect(r.stderr).not.toContain('wrong-password-x9');
  });

  it('--debug adds the stack trace', async () => {
    const port = await freePort();
    const r = await cli([
      'status',
      '--name',
      'x',
      '--debug',
      '--dsn',
      `postgres://app:pw-secret@127.0.0.1:${port}/db`,
    ]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/\n\s+at /);
    expect(r.stderr).not.toContain('pw-secret');
  });
});
