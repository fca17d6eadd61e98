/**
 * Wall-clock claims against a baseline measured in the same test (issue 37, part 2).
 *
 * A bound in absolute milliseconds fails on a loaded machine and passes a regression that
 * hides under its slack. A bound relative to a baseline (a bare `pg` client doing the same
 * thing, or a bare timer of the same length) measured interleaved with the library, in the
 * same rounds, moves with the machine's load and still catches the library adding a round
 * trip, a timer or a poll. Every such comparison goes through {@link expectNearBaseline},
 * so that its failure message gives both figures, their difference and their ratio.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import pg from 'pg';
import { expect } from 'vitest';
import { type AdminClient, eventually, holderPid, lockHolders, randomKeys } from './db.js';
import { median } from './stats.js';

/** One figure per round of the library (`subject`) and of the baseline, taken in the same rounds. */
export interface Paired {
  readonly subject: number[];
  readonly baseline: number[];
}

/**
 * Runs `rounds` rounds of `baseline` and `subject`, each returning the milliseconds it measured,
 * alternating which goes first so that a change of load during the test falls on both alike.
 */
export async function interleaved(
  rounds: number,
  baseline: (round: number) => Promise<number>,
  subject: (round: number) => Promise<number>,
): Promise<Paired> {
  const out = { subject: [] as number[], baseline: [] as number[] };
  for (let i = 0; i < rounds; i++) {
    if (i % 2 === 0) {
      out.baseline.push(await baseline(i));
      out.subject.push(await subject(i));
    } else {
      out.subject.push(await subject(i));
      out.baseline.push(await baseline(i));
    }
  }
  return out;
}

/**
 * How long a bare timer of `ms` takes from now until its callback runs: the baseline for a
 * span that the library ends with a timer of that length (its lateness is the loop's load).
 */
export function bareTimer(ms: number): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve) => setTimeout(() => resolve(performance.now() - t0), ms));
}

/** What the subject may exceed the baseline by: `subject ≤ baseline × ratio + overMs`. */
export interface Allowance {
  /** Added milliseconds (default 0). */
  readonly overMs?: number;
  /** Factor on the baseline (default 1). */
  readonly ratio?: number;
  /**
   * `'median'` (default): the p50s compared; `'each'`: each round's subject against the same
   * round's baseline (arrays of equal length); `'paired'`: the p50 of the rounds' differences
   * (each round's subject less its baseline × ratio), which cancels load that lasts a round.
   */
  readonly compare?: 'median' | 'each' | 'paired';
  /**
   * `'paired'` only: which quantile of the rounds' differences is held to the allowance
   * (default 0.5; 0.95 of 20 rounds is the 19th smallest: one round may wait behind something).
   */
  readonly quantile?: number;
}

const f = (x: number): string => x.toFixed(1);
const list = (xs: readonly number[]): string => xs.map(f).join(', ');

/** The line a baseline check prints and fails with: both figures, difference, ratio, allowance. */
export function baselineReport(what: string, subject: number, baseline: number, allow: Allowance): string {
  const ratio = allow.ratio ?? 1;
  const over = allow.overMs ?? 0;
  const limit = baseline * ratio + over;
  const r = baseline > 0 ? `${(subject / baseline).toFixed(2)}×` : 'n/a';
  return `${what}: ${f(subject)} ms against a baseline of ${f(baseline)} ms (difference ${subject >= baseline ? '+' : ''}${f(subject - baseline)} ms, ratio ${r}; allowed ${ratio === 1 ? '' : `${ratio}× + `}${over} ms over it: ${f(limit)} ms)`;
}

/**
 * Asserts that the library's figure(s) stay within `allow` of the baseline measured in the same
 * test. Returns the compared figures for the test's own report line.
 */
export function expectNearBaseline(
  what: string,
  m: { readonly subject: number | readonly number[]; readonly baseline: number | readonly number[] },
  allow: Allowance,
): { subject: number; baseline: number; difference: number; ratio: number } {
  const ratio = allow.ratio ?? 1;
  const over = allow.overMs ?? 0;
  const subj = typeof m.subject === 'number' ? [m.subject] : m.subject;
  const base = typeof m.baseline === 'number' ? [m.baseline] : m.baseline;
  if (subj.length === 0 || base.length === 0) throw new Error(`${what}: no samples`);
  const samples = `; samples ${list(subj)} ms, baseline ${list(base)} ms`;
  if (allow.compare !== undefined && allow.compare !== 'median' && subj.length !== base.length) {
    throw new Error(`${what}: ${subj.length} samples against ${base.length}`);
  }
  if (allow.compare === 'paired') {
    const q = allow.quantile ?? 0.5;
    const diffs = subj.map((x, i) => x - (base[i] as number) * ratio).sort((x, y) => x - y);
    const d = q === 0.5 ? median(diffs) : (diffs[Math.max(0, Math.ceil(q * diffs.length) - 1)] as number);
    const b = median(base);
    const sm = median(subj);
    const message = `${what}: ${q === 0.5 ? 'p50' : `quantile ${q}`} of the rounds' differences ${d >= 0 ? '+' : ''}${f(d)} ms over ${ratio === 1 ? '' : `${ratio}× `}the baseline (baseline p50 ${f(b)} ms, subject p50 ${f(sm)} ms, ratio of p50s ${b > 0 ? (sm / b).toFixed(2) : 'n/a'}×; allowed ${over} ms)${samples}`;
    expect(d, message).toBeLessThanOrEqual(over);
    return { subject: sm, baseline: b, difference: d, ratio: b > 0 ? sm / b : Number.NaN };
  }
  if (allow.compare === 'each') {
    subj.forEach((s, i) => {
      const b = base[i] as number;
      expect(s, `${baselineReport(`${what} (round ${i + 1})`, s, b, allow)}${samples}`).toBeLessThanOrEqual(
        b * ratio + over,
      );
    });
  }
  const s = median(subj);
  const b = median(base);
  expect(s, `${baselineReport(`${what} (p50)`, s, b, allow)}${samples}`).toBeLessThanOrEqual(
    b * ratio + over,
  );
  return { subject: s, baseline: b, difference: s - b, ratio: b > 0 ? s / b : Number.NaN };
}

/**
 * The physical limit of a failover after `pg_terminate_backend`, between bare clients on a key
 * of their own: a holder is terminated while a waiter queues (ms from the terminate to the
 * holder's socket ending, and to the waiter's grant), then a new connection and a statement
 * (what a terminated leader's reconnection costs). `clock` is the test's own.
 */
export async function bareTerminate(
  url: string,
  admin: AdminClient,
  clock: () => number = () => performance.now(),
): Promise<{ ended: number; granted: number; connectMs: number }> {
  const k = randomKeys();
  const client = () => {
    const c = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-bare' });
    c.on('error', () => {});
    return c;
  };
  const [holder, waiter, fresh] = [client(), client(), client()];
  try {
    await Promise.all([holder.connect(), waiter.connect()]);
    await holder.query('SELECT pg_advisory_lock($1, $2)', [k.key1, k.key2]);
    const ended = new Promise<number>((r) => holder.once('end', () => r(clock())));
    const granted = waiter.query('SELECT pg_advisory_lock($1, $2)', [k.key1, k.key2]).then(() => clock());
    await eventually(async () => (await lockHolders(url, k.key1, k.key2)).length === 2, {
      what: 'the bare waiter to queue',
      intervalMs: 5,
    });
    const pid = await holderPid(url, k.key1, k.key2);
    const t0 = clock();
    await admin.terminate(pid);
    const [endAt, grantAt] = await Promise.all([ended, granted]);
    const c0 = clock();
    await fresh.connect();
    await fresh.query('SELECT 1');
    return { ended: endAt - t0, granted: grantAt - t0, connectMs: clock() - c0 };
  } finally {
    await Promise.all([holder, waiter, fresh].map((c) => c.end().catch(() => {})));
  }
}

/**
 * The physical limit of a graceful handover, between bare clients on a key of their own: a
 * holder unlocks while a waiter queues in `pg_advisory_lock` (ms from the unlock's call to the
 * waiter's grant).
 */
export async function bareUnlock(
  url: string,
  clock: () => number = () => performance.now(),
): Promise<number> {
  const k = randomKeys();
  const client = () => {
    const c = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-bare' });
    c.on('error', () => {});
    return c;
  };
  const [holder, waiter] = [client(), client()];
  try {
    await Promise.all([holder.connect(), waiter.connect()]);
    await holder.query('SELECT pg_advisory_lock($1, $2)', [k.key1, k.key2]);
    const granted = waiter.query('SELECT pg_advisory_lock($1, $2)', [k.key1, k.key2]).then(() => clock());
    await eventually(async () => (await lockHolders(url, k.key1, k.key2)).length === 2, {
      what: 'the bare waiter to queue',
      intervalMs: 5,
    });
    const t0 = clock();
    await holder.query('SELECT pg_advisory_unlock($1, $2)', [k.key1, k.key2]);
    return (await granted) - t0;
  } finally {
    await Promise.all([holder, waiter].map((c) => c.end().catch(() => {})));
  }
}

/** A bare holder in a process of its own: takes the lock, says `held`, and waits to be killed. */
const BARE_HOLDER = `
const pg = require('pg');
const c = new pg.Client({ connectionString: process.env.PGLEADERLOCK_BARE_URL, application_name: 'pgleaderlock-test-bare' });
c.connect()
  .then(() => c.query('SELECT pg_advisory_lock($1, $2)', [process.env.PGLEADERLOCK_BARE_K1, process.env.PGLEADERLOCK_BARE_K2]))
  .then(() => process.stdout.write('held\\n'), (e) => { console.error(e.message); process.exit(1); });
`;

/**
 * The physical limit of a failover after the holder's process is SIGKILLed, between bare
 * clients on a key of their own: the holder a bare client in a `node` process of its own, a
 * waiter here queued behind it; ms from the SIGKILL to the waiter's grant (the process's death
 * and the server hearing its socket end). `clock` is the test's own.
 */
export async function bareKill(url: string, clock: () => number = () => performance.now()): Promise<number> {
  const k = randomKeys();
  const holder = spawn(process.execPath, ['-e', BARE_HOLDER], {
    cwd: path.resolve(import.meta.dirname, '../..'), // pg from the project's node_modules
    env: {
      ...process.env,
      PGLEADERLOCK_BARE_URL: url,
      PGLEADERLOCK_BARE_K1: String(k.key1),
      PGLEADERLOCK_BARE_K2: String(k.key2),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const waiter = new pg.Client({ connectionString: url, application_name: 'pgleaderlock-test-bare' });
  waiter.on('error', () => {});
  try {
    let err = '';
    holder.stderr.on('data', (d: Buffer) => {
      err += d.toString();
    });
    await new Promise<void>((resolve, reject) => {
      holder.stdout.on('data', (d: Buffer) => {
        if (d.toString().includes('held')) resolve();
      });
      holder.once('exit', (code) =>
        reject(new Error(`the bare holder exited ${code} before it held: ${err}`)),
      );
    });
    await waiter.connect();
    const granted = waiter.query('SELECT pg_advisory_lock($1, $2)', [k.key1, k.key2]).then(() => clock());
    await eventually(async () => (await lockHolders(url, k.key1, k.key2)).length === 2, {
      what: 'the bare waiter to queue',
      intervalMs: 5,
    });
    const t0 = clock();
    holder.kill('SIGKILL');
    return (await granted) - t0;
  } finally {
    if (holder.exitCode === null && holder.signalCode === null) holder.kill('SIGKILL');
    await waiter.end().catch(() => {});
  }
}
