/**
 * Chaos run: N candidate processes on one key, each behind its own fault proxy, on a
 * server of the run's own. Random faults are injected one at a time; after each, the run
 * waits for a leader. Leadership intervals and `runWhileLeader` runs reported by the
 * candidates (monotonic clock shared through process.hrtime) are checked for overlaps
 * afterwards. The candidates' work takes `workStopMs` to stop after its term aborts.
 *
 * Faults the safety bound covers (no overlap allowed): kill -9 of the leader process,
 * step-down, blackhole of the leader's connection, freeze of the leader's event loop.
 * Faults where the lock vanishes at once, pg_terminate_backend of the leader's backend and
 * a server restart, are covered by the takeover delay when `takeoverDelayMs` exceeds the
 * work's stop time plus the old leader's detection (then no overlap is allowed either);
 * without it, an overlap up to the detection latency plus the work's stop time.
 */

import { type ChildProcess, fork } from 'node:child_process';
import { randomInt } from 'node:crypto';
import path from 'node:path';
import { lockHolders, randomKeys, terminate } from '../harness/db.js';
import { type FaultProxy, startFaultProxy } from '../harness/fault-proxy.js';
import { overlapsOf } from '../harness/overlaps.js';
import { type PgServer, startPgServer } from '../harness/pg-server.js';
import type { CandidateConfig, CandidateMessage, ParentCommand } from './candidate.js';

export type FaultKind = 'kill' | 'stepDown' | 'blackhole' | 'freeze' | 'terminate' | 'restart';
export const COVERED: ReadonlySet<FaultKind> = new Set(['kill', 'stepDown', 'blackhole', 'freeze']);
/** With the takeover delay on, every fault is covered. */
export const COVERED_WITH_DELAY: ReadonlySet<FaultKind> = new Set([...COVERED, 'terminate', 'restart']);

/** The old leader's detection of a vanished session (terminate: ms; restart: ms): the takeover delay adds this to the work's stop time. */
export const DETECTION_ALLOWANCE_MS = 100;

export interface ChaosOptions {
  candidates: number;
  durationMs: number;
  faults?: FaultKind[];
  healthIntervalMs?: number;
  queryTimeoutMs?: number;
  pollMs?: number;
  acquireMode?: 'wait' | 'poll';
  /** The candidates' work stops this long after its term's signal aborts. Default 100. */
  workStopMs?: number;
  /** The candidates' takeover delay. Default `workStopMs + DETECTION_ALLOWANCE_MS`; 0 turns it off. */
  takeoverDelayMs?: number;
  /**
   * Seeds the fault schedule: the first faults are every kind once, in a seeded order, then
   * seeded draws. The report carries it, so a failing run can be replayed. Default: random.
   */
  seed?: number;
  log?: (line: string) => void;
}

/** mulberry32: a small seeded generator of floats in [0, 1). */
function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The fault schedule: every kind once in a shuffled order, then draws; the same for a seed. */
export function faultSchedule(kinds: readonly FaultKind[], seed: number): () => FaultKind {
  const next = seeded(seed);
  const first = [...kinds];
  for (let i = first.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [first[i], first[j]] = [first[j] as FaultKind, first[i] as FaultKind];
  }
  let n = 0;
  return () =>
    n < first.length ? (first[n++] as FaultKind) : (kinds[Math.floor(next() * kinds.length)] as FaultKind);
}

export interface Interval {
  id: string;
  start: number;
  end: number;
}

export interface FaultRecord {
  kind: FaultKind;
  at: number;
  /** Time from the fault to the next leadership start (null if none came in time). */
  gapMs: number | null;
}

export interface Overlap {
  a: string;
  b: string;
  ms: number;
  fault: FaultKind | 'none';
}

export interface ChaosReport {
  faults: FaultRecord[];
  intervals: Interval[];
  overlaps: Overlap[];
  /** runWhileLeader runs, and their overlaps across processes. */
  runs: Interval[];
  runOverlaps: Overlap[];
  /** Bound on the gap without a leader after each kind of fault, as stated for this run. */
  gapBoundMs: Record<FaultKind, number>;
  serverReleaseMs: number;
  workStopMs: number;
  takeoverDelayMs: number;
  /** The faults this run's configuration covers (no overlap allowed). */
  covered: ReadonlySet<FaultKind>;
  cleanExits: number;
  candidatesStarted: number;
  /** The schedule's seed (ChaosOptions.seed). */
  seed: number;
}

const hrtimeMs = (): number => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Candidate {
  id: string;
  proc: ChildProcess;
  proxy: FaultProxy;
  openSince: number | null;
  runSince: number | null;
  exited: Promise<number | null>;
}

export async function runChaos(opts: ChaosOptions): Promise<ChaosReport> {
  const log = opts.log ?? (() => {});
  const healthIntervalMs = opts.healthIntervalMs ?? 200;
  const queryTimeoutMs = opts.queryTimeoutMs ?? 500;
  const pollMs = opts.pollMs ?? 25;
  const serverReleaseMs = 2 * (healthIntervalMs + queryTimeoutMs);
  const workStopMs = opts.workStopMs ?? 100;
  const takeoverDelayMs = opts.takeoverDelayMs ?? workStopMs + DETECTION_ALLOWANCE_MS;
  const covered = takeoverDelayMs >= workStopMs + DETECTION_ALLOWANCE_MS ? COVERED_WITH_DELAY : COVERED;
  const kinds = opts.faults ?? ['kill', 'stepDown', 'blackhole', 'freeze', 'terminate', 'restart'];
  const seed = opts.seed ?? randomInt(2 ** 31);
  const nextKind = faultSchedule(kinds, seed);
  log(`fault schedule seed ${seed}`);
  // an unclean handover waits for the takeover delay; a step-down for the work to stop
  const gapBoundMs: Record<FaultKind, number> = {
    kill: 1000 + takeoverDelayMs,
    stepDown: 1000 + workStopMs,
    terminate: 1000 + takeoverDelayMs,
    blackhole: serverReleaseMs + 1000 + takeoverDelayMs,
    freeze: serverReleaseMs + 1000 + takeoverDelayMs,
    restart: 5000 + takeoverDelayMs,
  };
  const keys = randomKeys();
  const server: PgServer = await startPgServer();
  const candidates = new Map<string, Candidate>();
  const intervals: Interval[] = [];
  const runs: Interval[] = [];
  const faults: FaultRecord[] = [];
  let started = 0;
  let cleanExits = 0;
  let lastStartAt = 0;
  let lastStartId = '';

  const spawnCandidate = async (): Promise<Candidate> => {
    const id = `chaos-${started++}`;
    const proxy = await startFaultProxy({ host: server.host, port: server.port });
    const cfg: CandidateConfig = {
      url: proxy.url(server.url),
      ...keys,
      id,
      healthIntervalMs,
      queryTimeoutMs,
      pollMs,
      acquireMode: opts.acquireMode ?? 'wait',
      workStopMs,
      takeoverDelayMs,
    };
    const proc = fork(path.join(import.meta.dirname, 'candidate.ts'), [JSON.stringify(cfg)], {
      execArgv: ['--import', 'tsx'],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
    const c: Candidate = { id, proc, proxy, openSince: null, runSince: null, exited };
    proc.on('message', (m: CandidateMessage) => {
      if (m.type === 'start') {
        c.openSince = m.at;
        lastStartAt = m.at;
        lastStartId = m.id;
      } else if (m.type === 'end') {
        c.openSince = null;
        intervals.push({ id: m.id, start: m.start, end: m.end });
      } else if (m.type === 'runStart') {
        c.runSince = m.at;
      } else if (m.type === 'run') {
        c.runSince = null;
        runs.push({ id: m.id, start: m.start, end: m.end });
      }
    });
    await new Promise<void>((resolve, reject) => {
      proc.once('message', () => resolve());
      proc.once('exit', (code) => reject(new Error(`candidate ${id} exited early (${code})`)));
    });
    candidates.set(id, c);
    return c;
  };

  const open = (): Candidate[] => [...candidates.values()].filter((c) => c.openSince !== null);
  /** The candidate that started leading last (an earlier one may not have reported its end yet). */
  const leader = (): Candidate | undefined =>
    open().sort((x, y) => (y.openSince ?? 0) - (x.openSince ?? 0))[0];
  const command = (c: Candidate, cmd: ParentCommand) => {
    if (c.proc.connected) c.proc.send(cmd);
  };

  const waitForLeader = async (since: number, timeoutMs: number, notId?: string): Promise<number | null> => {
    const deadline = hrtimeMs() + timeoutMs;
    while (hrtimeMs() < deadline) {
      if (lastStartAt > since && lastStartId !== notId) return lastStartAt - since;
      await sleep(5);
    }
    return null;
  };

  try {
    for (let i = 0; i < opts.candidates; i++) await spawnCandidate();
    if ((await waitForLeader(0, 10_000)) === null) throw new Error('no first leader');
    const endAt = hrtimeMs() + opts.durationMs;

    while (hrtimeMs() < endAt) {
      // inject the next fault only once the view is settled: exactly one open interval
      // (a frozen process reports the end of its interval only when it thaws)
      const settleUntil = hrtimeMs() + 5000;
      while (open().length !== 1 && hrtimeMs() < settleUntil) await sleep(10);
      const current = leader();
      if (!current || open().length !== 1) {
        await sleep(20);
        continue;
      }
      const kind = nextKind();
      const at = hrtimeMs();
      log(`fault ${kind} on ${current.id}`);
      switch (kind) {
        case 'kill':
          current.proc.kill('SIGKILL');
          // a dead process believes nothing: its interval ends now
          if (current.openSince !== null)
            intervals.push({ id: current.id, start: current.openSince, end: at });
          current.openSince = null;
          candidates.delete(current.id);
          await current.exited;
          await current.proxy.close();
          break;
        case 'stepDown':
          command(current, { type: 'stepDown' });
          break;
        case 'blackhole':
          current.proxy.blackhole();
          break;
        case 'freeze':
          command(current, { type: 'freeze', ms: serverReleaseMs + 600 });
          break;
        case 'terminate': {
          const holder = (await lockHolders(server.url, keys.key1, keys.key2)).find((r) => r.granted);
          if (holder) await terminate(server.url, holder.pid);
          break;
        }
        case 'restart':
          await server.restart('fast');
          break;
      }
      // after a kill the dead process cannot be the new leader; after a step-down in poll
      // mode the same process may win again after its back-off, which counts as a leader
      const notId = kind === 'kill' ? current.id : undefined;
      const gapMs = await waitForLeader(at, gapBoundMs[kind] + 2000, notId);
      faults.push({ kind, at, gapMs });
      if (kind === 'blackhole') current.proxy.pass();
      if (kind === 'kill') await spawnCandidate();
      await sleep(150);
    }

    // clean shutdown: every child must release and exit by itself
    for (const c of candidates.values()) command(c, { type: 'shutdown' });
    const codes = await Promise.all(
      [...candidates.values()].map((c) =>
        Promise.race([c.exited, sleep(10_000).then(() => 'timeout' as const)]),
      ),
    );
    cleanExits = codes.filter((c) => c === 0).length;
    const now = hrtimeMs();
    for (const c of candidates.values()) {
      if (c.openSince !== null) intervals.push({ id: c.id, start: c.openSince, end: now });
      if (c.runSince !== null) runs.push({ id: c.id, start: c.runSince, end: now });
    }
  } finally {
    for (const c of candidates.values()) {
      if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
      await c.proxy.close();
    }
    await server.dispose();
  }

  return {
    faults,
    intervals,
    overlaps: findOverlaps(intervals, faults),
    runs,
    runOverlaps: findOverlaps(runs, faults),
    gapBoundMs,
    serverReleaseMs,
    workStopMs,
    takeoverDelayMs,
    covered,
    cleanExits,
    candidatesStarted: started,
    seed,
  };
}

/** Overlaps between intervals of different candidates (harness/overlaps.ts), attributed to the fault before them. */
export function findOverlaps(intervals: Interval[], faults: FaultRecord[]): Overlap[] {
  return overlapsOf(intervals, (x) => x.id).map(({ a, b, ms }) => ({
    a: a.id,
    b: b.id,
    ms,
    fault: [...faults].reverse().find((f) => f.at <= b.start)?.kind ?? 'none',
  }));
}

/** Markdown table of a report. */
export function formatReport(r: ChaosReport): string {
  const lines = [
    '| fault | injected | overlaps | max overlap (ms) | run overlaps | max gap without a leader (ms) | gap bound (ms) |',
    '|---|---|---|---|---|---|---|',
  ];
  const kinds: FaultKind[] = ['kill', 'stepDown', 'blackhole', 'freeze', 'terminate', 'restart'];
  for (const k of kinds) {
    const fs = r.faults.filter((f) => f.kind === k);
    const os = r.overlaps.filter((o) => o.fault === k);
    const gaps = fs.map((f) => f.gapMs ?? Number.POSITIVE_INFINITY);
    lines.push(
      `| ${k}${r.covered.has(k) ? '' : ' (not covered: no takeover delay)'} | ${fs.length} | ${os.length} | ${
        os.length ? Math.max(...os.map((o) => o.ms)).toFixed(1) : '0'
      } | ${r.runOverlaps.filter((o) => o.fault === k).length} | ${gaps.length ? Math.max(...gaps).toFixed(0) : '-'} | ${r.gapBoundMs[k]} |`,
    );
  }
  return lines.join('\n');
}
