/**
 * `pgleaderlock resign` and `pgleaderlock handover` (docs/cli.md), spawned from dist/cli.js
 * against real PostgreSQL, in both acquire modes: the leader steps down cleanly (or hands
 * over to the named waiter), what the command prints, its exit codes and its time bounds.
 * Leaders are LeaderLocks in this process, or `pgleaderlock run` processes.
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { FixedInterval } from '../../src/index.js';
import { expectNearBaseline } from '../harness/baseline.js';
import { type Finished, useCli } from '../harness/cli.js';
import { adminQuery, databaseUrl, eventually, lockHolders, randomKeys, testTag } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';
import { type Mode, useTeam } from '../harness/team.js';

const locks = useLocks();
const team = useTeam(locks);
const spawnCli = useCli();

/** Run the CLI to completion, with when it exited (performance.now()). */
async function cli(args: string[]): Promise<Finished & { exitedAt: number }> {
  const r = spawnCli(args);
  const done = await r.exited;
  return { ...done, exitedAt: performance.now() };
}

const MODES: Mode[] = ['wait', 'poll'];

/**
 * The command's own cost, measured in the same test: its start, connection and first look,
 * on a key nobody holds (it exits at once).
 */
async function baselineMs(args: string[]): Promise<number> {
  const keys = randomKeys();
  const started = performance.now();
  const r = await cli([
    ...args,
    '--dsn',
    databaseUrl(),
    '--key1',
    String(keys.key1),
    '--key2',
    String(keys.key2),
  ]);
  expect(r.code).toBe(1);
  return r.exitedAt - started;
}

describe.each(MODES)('pgleaderlock resign (%s mode)', (mode) => {
  it('the leader releases cleanly and queues again, the waiter leads: exit 0, naming who resigned and who leads (text, then --json)', async () => {
    const t = team(mode);
    // poll mode: the leader hands over to the candidate it knows of (b); wait mode: the first
    // one queued (b) is granted; a's own next attempt would come a minute later (poll)
    const a = t.make(mode === 'poll' ? { retryStrategy: new FixedInterval({ intervalMs: 60_000 }) } : {});
    await t.leading(a);
    const b = t.make();
    await b.start();
    await t.waiting(b);

    const r = await cli(['resign', ...t.args()]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(
        `^${a.id} resigned: released the lock cleanly \\d+ ms after the request; ${b.id} leads now\\n$`,
      ),
    );
    await eventually(() => b.isLeader, { what: `${b.id} to lead` });
    expect(a.isLeader).toBe(false);
    expect(t.fences(b)).toBe(0); // a clean release: no takeover delay
    await t.waiting(a); // the old leader is a candidate again
    expect(a.state).not.toBe('stopped');

    // --json, the other way round
    const next = a;
    const j = await cli(['resign', ...t.args(), '--json']);
    expect(j.code).toBe(0);
    expect(JSON.parse(j.stdout)).toMatchObject({
      command: 'resign',
      key1: t.keys.key1,
      key2: t.keys.key2,
      ok: true,
      leader: b.id,
      resigned: b.id,
      next: next.id,
      releasedMs: expect.any(Number),
      nextMs: expect.any(Number),
      code: 0,
    });
    await eventually(() => next.isLeader, { what: `${next.id} to lead` });
    expect(t.terms(a)).toBe(2);
    expect(t.terms(b)).toBe(1);
  });

  it('the only candidate: it releases and takes the lock again, and says so', async () => {
    const t = team(mode);
    const a = t.make();
    await t.leading(a);
    const r = await cli(['resign', ...t.args()]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(`^${a.id} resigned: .*; ${a.id} leads again \\(no other candidate took the lock\\)$`, 'm'),
    );
    await eventually(() => a.isLeader, { what: `${a.id} to lead again` });
    expect(t.terms(a)).toBe(2);
  });

  it('a leader whose work ignores its abort past its callbackTimeoutMs (500 ms): its session is closed by force; exit 1 within that bound, naming the new leader', async () => {
    const t = team(mode);
    const a = t.make({ ignoreAbort: true, callbackTimeoutMs: 500 });
    await t.leading(a);
    const b = t.make();
    await b.start();
    await t.waiting(b);
    const r = await cli(['resign', ...t.args(), '--json']);
    expect(r.code).toBe(1);
    const out = JSON.parse(r.stdout) as { ok: boolean; next: string; ms: number; message: string };
    expect(out).toMatchObject({ ok: false, next: b.id, code: 1 });
    expect(out.message).toMatch(
      new RegExp(
        `^${a.id} \\(pid \\d+\\) did not release cleanly: its session ended without a release .*; ${b.id} leads now`,
      ),
    );
    // from the request to the new holder's grant: the 500 ms bound, plus a reconnection at most
    expect(out.ms).toBeGreaterThanOrEqual(480);
    // bound: cli/resign-forced-close
    expect(out.ms).toBeLessThan(1000);
    await eventually(() => b.isLeader, { what: `${b.id} to lead` });
  });
  it('a holder still in its takeover delay is asked once its term opens (within --timeout): exit 0 after the delay', async () => {
    const t = team(mode);
    // the first holder of a key cannot prove a clean handover: it holds the lock, pending, for the delay
    const a = t.make({ takeoverDelayMs: 1500 });
    let opened = 0;
    a.onAcquired(() => {
      opened = performance.now();
    });
    await a.start();
    await eventually(() => a.state === 'pending', { what: `${a.id} to hold the lock, pending` });
    const b = t.make();
    await b.start();
    await t.waiting(b);
    const r = await cli(['resign', ...t.args()]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(new RegExp(`^${a.id} resigned: .*; ${b.id} leads now$`, 'm'));
    expect(opened).toBeGreaterThan(0);
    expect(t.terms(a)).toBe(1);
    await eventually(() => b.isLeader, { what: `${b.id} to lead` });
  });

  it('any role that may connect can ask: a role with no privileges resigns the leader (exit 0)', async () => {
    const t = team(mode);
    const a = t.make();
    await t.leading(a);
    const b = t.make();
    await b.start();
    await t.waiting(b);
    const role = `weak_${testTag()}`;
    await adminQuery(
      databaseUrl(),
      `CREATE ROLE ${role} LOGIN PASSWORD 'weak-pw' NOSUPERUSER NOCREATEDB NOCREATEROLE`,
    );
    try {
      const url = new URL(databaseUrl());
      url.username = role;
      url.password = 'weak-pw';
      const args = t.args();
      args[1] = url.toString();
      const r = await cli(['resign', ...args]);
      expect(r.stderr).toBe('');
      expect(r.code).toBe(0);
      expect(r.stdout).toMatch(new RegExp(`^${a.id} resigned: .*; ${b.id} leads now$`, 'm'));
      await eventually(() => b.isLeader, { what: `${b.id} to lead` });
    } finally {
      await adminQuery(databaseUrl(), `DROP ROLE ${role}`);
    }
  });
});

describe('pgleaderlock resign: refusals and time limits', () => {
  it('nobody holds the key: exit 1 at once; a holder that is not a pgleaderlock candidate: exit 1, pointing at break', async () => {
    const keys = randomKeys();
    const args = ['--dsn', databaseUrl(), '--key1', String(keys.key1), '--key2', String(keys.key2)];
    const none = await cli(['resign', ...args]);
    expect(none.code).toBe(1);
    expect(none.stdout).toBe(`nobody holds key (${keys.key1}, ${keys.key2}): there is no leader to ask\n`);
    const other = new pg.Client({ connectionString: databaseUrl(), application_name: 'some-cron' });
    await other.connect();
    try {
      await other.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
      const held = await cli(['resign', ...args]);
      expect(held.code).toBe(1);
      expect(held.stdout).toMatch(
        /is held by some-cron \(pid \d+\), which is not a pgleaderlock candidate: it cannot be asked \(break terminates a holder\)/,
      );
      const h = await cli(['handover', ...args, '--to', 'x']);
      expect(h.code).toBe(1);
      expect(h.stdout).toContain('not a pgleaderlock candidate');
    } finally {
      await other.end();
    }
  });

  // the default --timeout (15 s) is test/unit/cli-args.test.ts's: waiting it out here showed
  // nothing a shorter one does not
  it.each([
    ['wait', ['--timeout', '1s'], 1000],
    ['poll', ['--timeout', '2s'], 2000],
  ] as const)(
    '%s mode, %j: a leader that has not released by the timeout (its callbackTimeoutMs is 30 s): exit 1 at the timeout, saying so; it still holds the lock',
    async (mode, flags, timeoutMs) => {
      const t = team(mode);
      const a = t.make({ ignoreAbort: true, callbackTimeoutMs: 30_000 });
      await t.leading(a);
      const base = await baselineMs(['resign']);
      const started = performance.now();
      const r = await cli(['resign', ...t.args(), ...flags]);
      const took = r.exitedAt - started;
      expect(r.code).toBe(1);
      expect(r.stdout).toMatch(
        new RegExp(
          `^${a.id} \\(pid \\d+\\) did not release within ${timeoutMs / 1000}\\.0 s \\(--timeout\\): its work may ignore its abort signal, or it runs a pgleaderlock that does not take requests; see its log \\(resign_requested, forced_close\\); ${a.id} \\(pid \\d+\\) holds it now\\n$`,
        ),
      );
      // the timeout counts from the connection: the process start and connect (the baseline,
      // measured before and after: the other test files' load changes while this one runs) come
      // on top, and the request's own statements (the look, the notify, the look after the
      // timeout): about one baseline more, so the run past the timeout is held to twice the
      // baseline (+ 200 ms). A 500 ms allowance over one baseline failed at load 7 (546 ms over
      // a 1,406 ms baseline): the extra statements grow with the load as the baseline does.
      // Waiting out the timeout twice (+ 1 or 2 s) fails it on a quiet machine (baseline about 0.3 s).
      const after = await baselineMs(['resign']);
      expect(took).toBeGreaterThanOrEqual(timeoutMs);
      expectNearBaseline(
        `resign --timeout ${timeoutMs} ms: the command's run past the timeout, against its own start, connection and look (the slower of before and after)`,
        { subject: took - timeoutMs, baseline: Math.max(base, after) },
        { ratio: 2, overMs: 200 },
      );
      expect(
        (await lockHolders(databaseUrl(), t.keys.key1, t.keys.key2)).filter((h) => h.granted),
      ).toHaveLength(1);
      t.letGo();
    },
    30_000,
  );

  it('poll mode, the only candidate attempts again only after 10 s: exit 0 about 2 s after the release, saying nobody took the lock within 2 s', async () => {
    const t = team('poll');
    const a = t.make({ retryStrategy: new FixedInterval({ intervalMs: 10_000 }) });
    await t.leading(a);
    let releasedAt = 0;
    a.onReleased(() => {
      releasedAt = performance.now();
    });
    const r = await cli(['resign', ...t.args()]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(
        `^${a.id} resigned: released the lock cleanly \\d+ ms after the request; no candidate took the lock within 2\\.0 s of the release \\(a candidate in poll mode takes it at its next attempt\\)\\n$`,
      ),
    );
    const after = r.exitedAt - releasedAt;
    expect(after).toBeGreaterThanOrEqual(1950); // onReleased runs after the unlock, as the event is sent
    // bound: cli/resign-nobody-took
    expect(after).toBeLessThan(3000);
  }, 20_000);
});

describe.each(MODES)('pgleaderlock handover (%s mode)', (mode) => {
  it('--to C: exactly C leads, the waiter ahead of it never opens a term, no takeover delay; exit 0 (text, then --json)', async () => {
    const t = team(mode);
    const a = t.make();
    await t.leading(a);
    const b = t.make();
    await b.start();
    await t.waiting(b);
    const c = t.make();
    await c.start();
    await t.waiting(c);

    const r = await cli(['handover', ...t.args(), '--to', c.id]);
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      new RegExp(`^${a.id} handed over to ${c.id}: ${c.id} holds the lock \\d+ ms after the request\\n$`),
    );
    await eventually(() => c.isLeader, { what: `${c.id} to lead` });
    expect(t.terms(b)).toBe(0);
    expect(t.terms(c)).toBe(1);
    expect(t.fences(c)).toBe(0);
    expect(a.isLeader).toBe(false);
    await t.waiting(a);

    // --json: back to a, over b again
    await t.waiting(b);
    const j = await cli(['handover', ...t.args(), '--to', a.id, '--json']);
    expect(j.code).toBe(0);
    expect(JSON.parse(j.stdout)).toMatchObject({
      command: 'handover',
      ok: true,
      leader: c.id,
      to: a.id,
      releasedMs: expect.any(Number),
      acquiredMs: expect.any(Number),
      code: 0,
    });
    await eventually(() => a.isLeader, { what: `${a.id} to lead again` });
    expect(t.terms(b)).toBe(0);
    expect(t.terms(a)).toBe(2);
  });

  it('--to an id that application_name cannot carry (non-ASCII, past 63 bytes): exactly it leads; status names it whole', async () => {
    const t = team(mode);
    const a = t.make();
    await t.leading(a);
    for (const id of [`${locks.tag}-höher-priorität`, `${locks.tag}-${'долгий-'.repeat(8)}конец`]) {
      const c = t.make({ id });
      await c.start();
      await t.waiting(c);
      const r = await cli(['handover', ...t.args(), '--to', id]);
      expect(r.stderr).toBe('');
      expect(r.code, r.stdout).toBe(0);
      expect(r.stdout).toContain(`handed over to ${id}: ${id} holds the lock`);
      await eventually(() => c.isLeader, { what: `${id} to lead` });
      expect(t.fences(c)).toBe(0);
      const st = await cli(['status', ...t.args(), '--json']);
      expect(st.code, st.stderr).toBe(0);
      expect(JSON.parse(st.stdout)).toMatchObject({ leader: { id } });
      await c.shutdown();
      await eventually(() => a.isLeader, { what: `${a.id} to lead again` });
    }
  });

  it('--to an id that does not wait, or the leader itself: exit 1 naming it, nothing asked of the leader', async () => {
    const t = team(mode);
    const logs: string[] = [];
    const at = (_f: Record<string, unknown>, event: string): void => {
      logs.push(event);
    };
    const a = t.make({ logger: { debug: at, info: at, warn: at, error: at } });
    await t.leading(a);
    const b = t.make();
    await b.start();
    await t.waiting(b);
    const term = a.term;
    const r = await cli(['handover', ...t.args(), '--to', 'nobody-here']);
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(
      new RegExp(
        `^no candidate "nobody-here" is waiting for key \\(${t.keys.key1}, ${t.keys.key2}\\): no session has application_name "pgleaderlock:nobody-here"${mode === 'wait' ? ` \\(waiting: ${b.id}\\)` : ''}\\n$`,
      ),
    );
    const self = await cli(['handover', ...t.args(), '--to', a.id, '--json']);
    expect(self.code).toBe(1);
    expect(JSON.parse(self.stdout)).toMatchObject({
      ok: false,
      leader: a.id,
      message: `"${a.id}" already leads key (${t.keys.key1}, ${t.keys.key2})`,
    });
    expect(a.term).toBe(term);
    expect(logs.filter((e) => e.startsWith('handover'))).toEqual([]);
  });

  it('a leader whose work ignores its abort: exit 1 after --timeout 1s, naming the successor and who holds the lock', async () => {
    const t = team(mode);
    const a = t.make({ ignoreAbort: true, callbackTimeoutMs: 30_000 });
    await t.leading(a);
    const c = t.make();
    await c.start();
    await t.waiting(c);
    const base = await baselineMs(['handover', '--to', c.id]);
    const started = performance.now();
    const r = await cli(['handover', ...t.args(), '--to', c.id, '--timeout', '1s']);
    const took = r.exitedAt - started;
    expect(r.code).toBe(1);
    expect(r.stdout).toMatch(
      new RegExp(
        `^"${c.id}" did not take the lock within 1\\.0 s \\(--timeout\\): ${a.id} did not release \\(see its log: handover_requested, handover_failed, forced_close\\); ${a.id} \\(pid \\d+\\) holds it now\\n$`,
      ),
    );
    // the baseline measured before and after: the other test files' load changes while this one runs
    const after = await baselineMs(['handover', '--to', c.id]);
    expect(took).toBeGreaterThanOrEqual(1000);
    expectNearBaseline(
      "handover --timeout 1s: the command's run, against the timeout plus its own start, connection and look (the slower of before and after)",
      { subject: took, baseline: 1000 + Math.max(base, after) },
      { overMs: 500 },
    );
    expect(t.terms(c)).toBe(0);
    t.letGo();
  });
});

describe('bad usage: exit 2, one line naming the problem', () => {
  const dsn = (): string => databaseUrl();
  it.each([
    [
      'handover without --to',
      () => ['handover', '--dsn', dsn(), '--name', 'x'],
      /^pgleaderlock handover: missing --to ID/,
    ],
    ['--to empty', () => ['handover', '--dsn', dsn(), '--name', 'x', '--to', ''], /--to must not be empty/],
    [
      '--to on resign',
      () => ['resign', '--dsn', dsn(), '--name', 'x', '--to', 'y'],
      /^pgleaderlock resign: Unknown option '--to'/,
    ],
    [
      'both --name and keys',
      () => ['resign', '--dsn', dsn(), '--name', 'x', '--key1', '1', '--key2', '2'],
      /either --name or --key1 and --key2/,
    ],
    ['no key', () => ['handover', '--dsn', dsn(), '--to', 'y'], /missing the lock key/],
    [
      'bad --timeout',
      () => ['resign', '--dsn', dsn(), '--name', 'x', '--timeout', 'soon'],
      /--timeout: bad duration "soon"/,
    ],
    [
      'zero --timeout',
      () => ['resign', '--dsn', dsn(), '--name', 'x', '--timeout', '0'],
      /--timeout must be more than 0, received "0"/,
    ],
    [
      'unreachable database',
      () => ['resign', '--dsn', 'postgres://u:secret@127.0.0.1:1/db', '--name', 'x'],
      /^pgleaderlock resign: cannot connect to postgres:\/\/u:\*\*\*@127\.0\.0\.1:1\/db/,
    ],
    [
      'run --priority not an integer',
      () => ['run', '--dsn', dsn(), '--name', 'x', '--priority', '1.5'],
      /^pgleaderlock run: --priority must be an integer, received "1\.5"$/m,
    ],
    [
      'run --priority too large',
      () => ['run', '--dsn', dsn(), '--name', 'x', '--priority', '9007199254740993'],
      /--priority must be an integer, received "9007199254740993"/,
    ],
  ] as const)('%s', async (_what, args, message) => {
    const r = await cli(args());
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(message);
    expect(r.stderr).not.toContain('secret');
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
  });
});

describe.each(MODES)('pgleaderlock run processes (%s mode)', (mode) => {
  it('status shows each candidate’s priority (text and --json); handover between run processes; run --priority', async () => {
    const keys = randomKeys();
    const tag = testTag();
    const args = ['--dsn', databaseUrl(), '--key1', String(keys.key1), '--key2', String(keys.key2)];
    const run = (id: string, priority: string) =>
      spawnCli([
        'run',
        ...args,
        '--id',
        id,
        '--priority',
        priority,
        '--acquire-mode',
        mode,
        '--health-interval',
        '100ms',
        '--json',
      ]);
    const procs = [run(`${tag}-a`, '3')];
    try {
      const [a] = procs as [ReturnType<typeof run>];
      const start = JSON.parse(await a.line(/"event":"start"/)) as { priority: number };
      expect(start.priority).toBe(3);
      await a.line(/"event":"acquired"/);
      const b = run(`${tag}-b`, '-2'); // lower: it waits, the leader stays
      procs.push(b);
      await b.line(/"event":"start"/);
      const statusJson = async () =>
        JSON.parse((await cli(['status', ...args, '--json'])).stdout) as {
          leader: { id: string; priority: number | null };
          waiters: { id: string; priority: number | null }[];
        };
      // the leader's priority is shown once it has run a check (poll) or from its wait (wait)
      let s = await statusJson();
      await eventually(
        async () => {
          s = await statusJson();
          return s.leader.priority === 3 && (mode === 'poll' || s.waiters.length === 1);
        },
        { what: 'the leader’s priority, and the waiter in wait mode' },
      );
      expect(s.leader).toMatchObject({ id: `${tag}-a`, priority: 3 });
      // poll-mode followers are not in pg_locks
      expect(s.waiters).toEqual(
        mode === 'wait' ? [expect.objectContaining({ id: `${tag}-b`, priority: -2 })] : [],
      );
      const text = await cli(['status', ...args]);
      expect(text.stdout).toMatch(
        new RegExp(
          `^leader: {2}${tag}-a \\(pid \\d+, 127\\.0\\.0\\.1\\), session since .*, priority 3$`,
          'm',
        ),
      );
      if (mode === 'wait')
        expect(text.stdout).toMatch(
          new RegExp(`^ {2}1\\. ${tag}-b \\(pid \\d+, 127\\.0\\.0\\.1\\) since .*, priority -2$`, 'm'),
        );

      // a handover to the lower priority b: b takes the lock
      const h = await cli(['handover', ...args, '--to', `${tag}-b`, '--json']);
      expect(h.code).toBe(0);
      expect(JSON.parse(h.stdout)).toMatchObject({ ok: true, leader: `${tag}-a`, to: `${tag}-b` });
      await b.line(/"event":"acquired"/);
      await a.line(/"event":"released"/);
    } finally {
      for (const p of procs) p.proc.kill('SIGTERM');
      await Promise.all(procs.map((p) => p.exited));
    }
  });
});

describe('pgleaderlock status: priorities', () => {
  it('status: a holder that shows no priority (not a pgleaderlock candidate): "priority ?", null in --json', async () => {
    const keys = randomKeys();
    const args = ['--dsn', databaseUrl(), '--key1', String(keys.key1), '--key2', String(keys.key2)];
    const other = new pg.Client({ connectionString: databaseUrl(), application_name: 'some-cron' });
    await other.connect();
    try {
      await other.query('SELECT pg_advisory_lock($1, $2)', [keys.key1, keys.key2]);
      const text = await cli(['status', ...args]);
      expect(text.stdout).toMatch(
        /^leader: {2}some-cron \(pid \d+, 127\.0\.0\.1\), session since .*, priority \?$/m,
      );
      const json = JSON.parse((await cli(['status', ...args, '--json'])).stdout) as {
        leader: { priority: unknown };
      };
      expect(json.leader.priority).toBeNull();
    } finally {
      await other.end();
    }
  });
});
