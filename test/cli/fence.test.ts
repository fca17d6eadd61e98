/**
 * The takeover fence through the built CLI (dist/cli.js), against real PostgreSQL: `run`
 * logs it, `acquire -- COMMAND` waits it out before starting the command (README, "What
 * happens when things fail"; docs/cli.md). (`acquire`'s "exit 1 at once": test/timing/acquire-at-once.test.ts.)
 */
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { type Running, useCli } from '../harness/cli.js';
import { adminClient, databaseUrl, eventually, holderPid, lockHolders, randomKeys } from '../harness/db.js';
import { useLocks } from '../harness/locks.js';

const locks = useLocks();
const start = useCli();
type Keys = { key1: number; key2: number };
const keyArgs = (k: Keys): string[] => ['--key1', String(k.key1), '--key2', String(k.key2)];
/** Until `r` waits in the queue behind the holder (`n` backends on the key); `r`'s output if not. */
async function queued(k: Keys, r: Running, n = 2): Promise<void> {
  try {
    await eventually(async () => (await lockHolders(databaseUrl(), k.key1, k.key2)).length === n, {
      what: 'the CLI to queue for the lock',
      timeoutMs: 15_000, // a process start: seconds when other test files load the machine
    });
  } catch (err) {
    throw new Error(`${(err as Error).message}; its output:\n${r.lines.join('\n')}`);
  }
}

interface JsonEvent {
  time: string;
  event: string;
  delayMs?: number;
}
const events = (r: Running): JsonEvent[] =>
  r.lines.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as JsonEvent);
/**
 * When this process read `r`'s first `event` line (performance.now()): a few ms after the
 * event, never before it. Not the line's `time`: another process's wall clock, which steps
 * on the test machine (docs/testing.md, "The machine's clock").
 */
async function timeOf(r: Running, event: string): Promise<number> {
  return (await r.lineAt(new RegExp(`"event":"${event}"`))).at;
}

const DELAY_MS = 1000;
/**
 * "At once", and the slack over the delay: half the delay. Every other step (the grant, the
 * CLI's own steps, a process start) takes 10–80 ms on an idle machine and a few hundred ms
 * with other test files loading both cores; a delay applied, or missed, is a full second.
 */
const SLACK_MS = DELAY_MS / 2;

describe('pgleaderlock run and the takeover fence', () => {
  it('a follower whose leader was SIGKILLed logs takeover_delay (delayMs 1000) and leads no sooner than 1 s after the kill (< 1.5 s); after a clean exit (SIGTERM) the next logs none and leads within 500 ms', async () => {
    const keys = randomKeys();
    const common = ['run', '--dsn', databaseUrl(), ...keyArgs(keys), '--json', '--takeover-delay', '1s'];
    const a = start([...common, '--id', `${locks.tag}-a`]);
    await a.line(/"event":"acquired"/); // the first holder ever: it waits the delay too
    const b = start([...common, '--id', `${locks.tag}-b`]);
    await queued(keys, b);

    const killedAt = performance.now();
    a.proc.kill('SIGKILL');
    const bLed = await timeOf(b, 'acquired');
    const seen = events(b).map((e) => e.event);
    const fence = events(b).find((e) => e.event === 'takeover_delay');
    expect(fence?.delayMs).toBe(DELAY_MS);
    expect(seen.indexOf('takeover_delay')).toBeLessThan(seen.indexOf('acquired'));
    expect(b.lines.join('\n')).toContain('holding the lock; leading in 1.0 s');
    console.log(
      `[run] after SIGKILL: fence logged, led ${(bLed - killedAt).toFixed(0)} ms after the kill (delay ${DELAY_MS})`,
    );
    expect(bLed - killedAt).toBeGreaterThanOrEqual(DELAY_MS);
    // bound: cli/fence-run-after-kill
    expect(bLed - killedAt).toBeLessThan(DELAY_MS + SLACK_MS);

    // the control: a clean release is proven, no fence
    const c = start([...common, '--id', `${locks.tag}-c`]);
    await queued(keys, c);
    const stoppedAt = performance.now();
    b.proc.kill('SIGTERM');
    const cLed = await timeOf(c, 'acquired');
    expect((await b.exited).code).toBe(0);
    console.log(`[run] after SIGTERM: led ${(cLed - stoppedAt).toFixed(0)} ms after the signal`);
    expect(events(c).map((e) => e.event)).not.toContain('takeover_delay');
    // bound: cli/fence-run-clean
    expect(cLed - stoppedAt).toBeLessThan(SLACK_MS);
    c.proc.kill('SIGTERM');
    expect((await c.exited).code).toBe(0);
  });
});

describe('pgleaderlock acquire -- COMMAND and the takeover fence', () => {
  /** `acquire --wait --takeover-delay 1s -- echo started`, queued behind the current holder. */
  async function queuedJob(keys: Keys, id: string): Promise<Running> {
    const r = start([
      'acquire',
      '--dsn',
      databaseUrl(),
      ...keyArgs(keys),
      '--wait',
      '--takeover-delay',
      '1s',
      '--id',
      `${locks.tag}-${id}`,
      '--',
      // the command's start: its line, read here (the command writes to the CLI's stdout)
      'echo',
      'started',
    ]);
    await queued(keys, r);
    return r;
  }
  /** When this process read the command's line: a few ms after the command started, never before. */
  const commandStart = async (r: Running): Promise<number> => (await r.lineAt(/^started$/)).at;

  it("after the holder's backend is terminated, the command starts no sooner than the 1 s delay after the termination (< 1.5 s)", async () => {
    const keys = randomKeys();
    // a bare session holds the key: it never announces anything, so nothing proves it stopped
    const holder = new pg.Client({ connectionString: databaseUrl(), application_name: `${locks.tag}-bare` });
    holder.on('error', () => {});
    await holder.connect();
    await holder.query('SELECT pg_advisory_lock($1::int4, $2::int4)', [keys.key1, keys.key2]);
    const job = await queuedJob(keys, 'u');
    await using admin = await adminClient(databaseUrl());
    const pid = await holderPid(databaseUrl(), keys.key1, keys.key2);
    const terminatedAt = performance.now();
    await admin.terminate(pid);
    const startedAfterMs = (await commandStart(job)) - terminatedAt;
    const done = await job.exited;
    await holder.end().catch(() => {});
    console.log(
      `[acquire] unclean: the command started ${startedAfterMs.toFixed(0)} ms after the termination (delay ${DELAY_MS})`,
    );
    expect(done.code).toBe(0);
    expect(startedAfterMs).toBeGreaterThanOrEqual(DELAY_MS);
    // bound: cli/fence-acquire-unclean
    expect(startedAfterMs).toBeLessThan(DELAY_MS + SLACK_MS);
  });

  it('after a clean release (shutdown) by the holder, the command starts at once (< 500 ms; the delay is 1 s)', async () => {
    const keys = randomKeys();
    const holder = locks.make({ ...keys });
    await holder.start();
    expect(await holder.waitForLeadership({ timeoutMs: 10_000 })).toBe(true);
    const job = await queuedJob(keys, 'c');
    const releasedAt = performance.now();
    await holder.shutdown();
    const startedAfterMs = (await commandStart(job)) - releasedAt;
    console.log(
      `[acquire] clean: the command started ${startedAfterMs.toFixed(0)} ms after shutdown() was called`,
    );
    expect((await job.exited).code).toBe(0);
    // bound: cli/fence-acquire-clean
    expect(startedAfterMs).toBeLessThan(SLACK_MS);
  });
});
