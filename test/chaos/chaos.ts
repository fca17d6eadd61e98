/**
 * Chaos run: N candidate processes on one key, each behind its own fault proxy, on a
 * server of the run's own. The run is a list of short seeded sequences (plan.ts): each
 * sequence's steps (which fault, whom it hits, how long, the pauses) are drawn from its
 * seed; the steps are injected one at a time; after each, the run waits for a leader. Leadership intervals and `runWhileLeader` runs reported by the
 * candidates (monotonic clock shared through process.hrtime) are checked for overlaps
 * afterwards. The candidates' work takes `workStopMs` to stop after its term aborts.
 *
 * Faults the safety bound covers (no overlap allowed): kill -9 of the leader process,
 * step-down, blackhole of the leader's connection, freeze of the leader (SIGSTOP or a busy
 * event loop). Faults where the lock vanishes at once, pg_terminate_backend of the leader's
 * backend, a reset of its connections and a server restart, are covered by the takeover delay when `takeoverDelayMs` exceeds the
 * work's stop time plus the old leader's detection (then no overlap is allowed either);
 * without it, an overlap up to the detection latency plus the work's stop time.
 *
 * Priority churn (`priorities`, docs/choosing-the-leader.md): every candidate draws a
 * seeded priority, and the churn kinds join in: a candidate joins, one leaves (SIGTERM:
 * its shutdown), one comes back with a new priority (SIGTERM, then the same id), and the
 * leader is asked to resign or to hand over to a waiting candidate (a NOTIFY on the key's
 * channel, as the CLI sends), or calls `handoverTo` itself. Each is a clean handover or
 * none: the run records who leads first after it (the named successor, a joiner with a
 * higher priority, the leader kept when a follower leaves or a lower one joins), whether
 * that leader held a takeover delay, and how soon a candidate of the top priority leads
 * again (`settledMs`: null if not within the gap bound plus one more clean handover).
 */

import { type ChildProcess, fork } from 'node:child_process';
import path from 'node:path';
import { requestPayload } from '../../src/core/handover.js';
import { channelFor } from '../../src/core/keys.js';
import { adminQuery, lockHolders, terminate } from '../harness/db.js';
import { type FaultProxy, startFaultProxy } from '../harness/fault-proxy.js';
import { fixtureScript } from '../harness/fixture-bundle.js';
import { overlapsOf } from '../harness/overlaps.js';
import { type PgServer, startPgServer } from '../harness/pg-server.js';
import { Random } from '../sim/random.js';
import type { CandidateConfig, CandidateMessage, ParentCommand } from './candidate.js';
import {
  BASIC_KINDS,
  CHURN_KINDS,
  choose,
  describeStep,
  type FaultKind,
  initialPriorities,
  planSequence,
  type Step,
} from './plan.js';

export { BASIC_KINDS, CHURN_KINDS, type FaultKind };

/** Kinds whose handover is clean (a released event before the unlock): the successor holds no takeover delay. */
export const CLEAN: ReadonlySet<FaultKind> = new Set(['stepDown', ...CHURN_KINDS]);
export const COVERED: ReadonlySet<FaultKind> = new Set([
  'kill',
  'stepDown',
  'blackhole',
  'freeze',
  ...CHURN_KINDS,
]);
/** With the takeover delay on, every fault is covered. */
export const COVERED_WITH_DELAY: ReadonlySet<FaultKind> = new Set([
  ...COVERED,
  'terminate',
  'reset',
  'restart',
]);

/** The old leader's detection of a vanished session (terminate: ms; restart: ms): the takeover delay adds this to the work's stop time. */
export const DETECTION_ALLOWANCE_MS = 100;

/** After a fault that should not move leadership (a follower left, a lower priority joined): how long the leader must stay. */
export const HOLD_MS = 500;

export interface ChaosOptions {
  candidates: number;
  /** The sequences' seeds (plan.ts `sequenceSeeds`), run in this order on one cluster. */
  seeds: readonly number[];
  /** Stop after the sequence during which this much time has passed (the long form). Default: run every seed. */
  durationMs?: number;
  /** Steps per sequence: 1, or up to this one time in four. Default 2. */
  maxSteps?: number;
  /** Default: BASIC_KINDS. */
  faults?: readonly FaultKind[];
  healthIntervalMs?: number;
  queryTimeoutMs?: number;
  pollMs?: number;
  acquireMode?: 'wait' | 'poll';
  /** The candidates' work stops this long after its term's signal aborts. Default 100. */
  workStopMs?: number;
  /** The candidates' takeover delay. Default `workStopMs + DETECTION_ALLOWANCE_MS`; 0 turns it off. */
  takeoverDelayMs?: number;
  /**
   * Priority churn: each candidate draws a priority in [0, priorities) from the seed (a small
   * range, so that ties happen). Default: off, every candidate at priority 0.
   */
  priorities?: number;
  log?: (line: string) => void;
}

export interface Interval {
  id: string;
  start: number;
  end: number;
}

export interface FaultRecord {
  kind: FaultKind;
  /** The seed of the sequence this step belongs to, and the step in words (plan.ts). */
  seed: number;
  step: string;
  /** It hit the leader (false: a follower; then the leader must stay). */
  onLeader: boolean;
  at: number;
  /** Time from the fault to the next leadership start (null if none came in time); 0: the leader was kept, as expected. */
  gapMs: number | null;
  /** Who led when the fault came (lock id, priority). */
  leader: string;
  /** The candidate a churn fault acted on (joined, left, came back, was named), by lock id. */
  target: string | null;
  /** The fault should move leadership (false: a follower left, or one no higher than the leader joined). */
  expectsChange: boolean;
  /** Who must lead first after the fault: the named successor, a joiner above the leader (null: anyone). */
  expected: string | null;
  /** Lock id of the first leader after the fault (the leader kept: its id). */
  next: string | null;
  /** The first leader after the fault held a takeover delay. */
  fenced: boolean;
  /**
   * Every candidate but the leader was waiting (queued, or in poll mode with its session)
   * when the fault came, so that each heard the release (priorities on; else true).
   */
  ready: boolean;
  /** The leader at the fault had the top priority (priorities on). */
  topBefore: boolean;
  /**
   * From the fault until a candidate of the top priority led (after a kill or a respawn:
   * from the start of the new process, which may have the top priority). Priorities on; 0:
   * the leader kept leading; null: not within `settleBoundMs`, or the leader before was
   * already below the top and nothing moved.
   */
  settledMs: number | null;
  /** What else happened (a handoverTo's rejection, a leave that did not exit cleanly). */
  note: string;
}

export interface Overlap {
  a: string;
  b: string;
  ms: number;
  fault: FaultKind | 'none';
  /** The seed of the sequence of that fault (null: before the first). */
  seed: number | null;
}

export interface ChaosReport {
  kinds: readonly FaultKind[];
  faults: FaultRecord[];
  intervals: Interval[];
  overlaps: Overlap[];
  /** runWhileLeader runs, and their overlaps across processes. */
  runs: Interval[];
  runOverlaps: Overlap[];
  /** Bound on the gap without a leader after each kind of fault, as stated for this run. */
  gapBoundMs: Record<FaultKind, number>;
  /** Bound on `settledMs`: the gap bound plus one more clean handover (priorities on). */
  settleBoundMs: Record<FaultKind, number>;
  serverReleaseMs: number;
  workStopMs: number;
  takeoverDelayMs: number;
  /** The faults this run's configuration covers (no overlap allowed). */
  covered: ReadonlySet<FaultKind>;
  /** Priority levels (0: churn off). */
  priorities: number;
  cleanExits: number;
  /** Candidates still running at the end (each asked to shut down). */
  candidatesAtEnd: number;
  /** Candidates sent SIGTERM during the run (leave, respawn), and how many exited 0 by themselves within 10 s. */
  leaves: { total: number; clean: number };
  candidatesStarted: number;
  /** One line per fault: who led, with which priorities, what came next (to read a failure). */
  trace: string[];
  /** The sequences run: each seed and its steps in words (its choice list). */
  sequences: { seed: number; steps: string[] }[];
}

const hrtimeMs = (): number => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface Candidate {
  /** Unique per process (a respawn's lock id with `@n`): the owner of its intervals. */
  name: string;
  /** Its lock id. */
  id: string;
  priority: number;
  proc: ChildProcess;
  proxy: FaultProxy;
  openSince: number | null;
  runSince: number | null;
  /** Sent SIGTERM or SIGKILL: no longer counted among the candidates. */
  leaving: boolean;
  handoverResult: ((error: string | null) => void) | null;
  /** When it was told to start its lock. */
  startedAt: number;
  /** Exit code once the process exited and its IPC channel closed (every message read). */
  exited: Promise<number | null>;
}

/** A process booted ahead (tsx takes a while), its lock not yet started. */
interface Spare {
  proc: ChildProcess;
  exited: Promise<number | null>;
}

/** Fork a candidate process (from its bundle, test/harness/fixture-bundle.ts); resolves once it waits for `start`. */
async function boot(): Promise<Spare> {
  const { script, execArgv } = fixtureScript(path.join(import.meta.dirname, 'candidate.ts'));
  const proc = fork(script, [], {
    execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const exit = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  const disconnected = new Promise<void>((resolve) => proc.once('disconnect', () => resolve()));
  const exited = Promise.all([exit, disconnected]).then(([code]) => code);
  await new Promise<void>((resolve, reject) => {
    proc.once('message', () => resolve());
    proc.once('exit', (code) => reject(new Error(`a candidate process exited while booting (${code})`)));
  });
  return { proc, exited };
}

async function killAll(spares: Promise<Spare>[]): Promise<void> {
  for (const s of await Promise.allSettled(spares)) {
    if (s.status === 'fulfilled' && s.value.proc.exitCode === null && s.value.proc.signalCode === null)
      s.value.proc.kill('SIGKILL');
  }
}

interface Start {
  name: string;
  id: string;
  at: number;
}

export async function runChaos(opts: ChaosOptions): Promise<ChaosReport> {
  const log = opts.log ?? (() => {});
  const healthIntervalMs = opts.healthIntervalMs ?? 200;
  const queryTimeoutMs = opts.queryTimeoutMs ?? 500;
  const pollMs = opts.pollMs ?? 25;
  const acquireMode = opts.acquireMode ?? 'wait';
  const serverReleaseMs = 2 * (healthIntervalMs + queryTimeoutMs);
  const workStopMs = opts.workStopMs ?? 100;
  const takeoverDelayMs = opts.takeoverDelayMs ?? workStopMs + DETECTION_ALLOWANCE_MS;
  const covered = takeoverDelayMs >= workStopMs + DETECTION_ALLOWANCE_MS ? COVERED_WITH_DELAY : COVERED;
  const kinds = opts.faults ?? BASIC_KINDS;
  const priorities = opts.priorities ?? 0;
  const seeds = opts.seeds;
  if (seeds.length === 0) throw new RangeError('seeds: at least one sequence');
  const plans = seeds.map((seed) => ({
    seed,
    steps: planSequence(seed, {
      kinds,
      candidates: opts.candidates,
      priorities,
      serverReleaseMs,
      ...(opts.maxSteps === undefined ? {} : { maxSteps: opts.maxSteps }),
    }),
  }));
  const sequences: { seed: number; steps: string[] }[] = [];
  // an unclean handover waits for the takeover delay; a clean one for the work to stop
  const clean = 1000 + workStopMs;
  const gapBoundMs: Record<FaultKind, number> = {
    kill: 1000 + takeoverDelayMs,
    stepDown: clean,
    terminate: 1000 + takeoverDelayMs,
    reset: 1000 + takeoverDelayMs,
    blackhole: serverReleaseMs + 1000 + takeoverDelayMs,
    freeze: serverReleaseMs + 1000 + takeoverDelayMs,
    restart: 5000 + takeoverDelayMs,
    join: clean,
    leave: clean,
    respawn: clean,
    resign: clean,
    handover: clean,
    handoverTo: clean,
  };
  const settleBoundMs = Object.fromEntries(
    Object.entries(gapBoundMs).map(([k, v]) => [k, v + clean]),
  ) as Record<FaultKind, number>;
  // the run's key from its first seed too (the run has a server of its own)
  const keyRandom = new Random((seeds[0] as number) ^ 0x27d4eb2f);
  const keys = { key1: keyRandom.int(-(2 ** 31), 2 ** 31 - 1), key2: keyRandom.int(-(2 ** 31), 2 ** 31 - 1) };
  const channel = channelFor(keys.key1, keys.key2);
  // the first processes boot while the server starts, with a spare when candidates join
  const first = Array.from({ length: opts.candidates }, () => boot());
  const spares: Promise<Spare>[] = [...first];
  let spare: Promise<Spare> | null = null;
  if (kinds.some((k) => k === 'kill' || k === 'join' || k === 'respawn')) {
    spare = boot();
    spares.push(spare);
  }
  for (const s of spares) s.catch(() => {}); // reported when used
  let server: PgServer;
  try {
    server = await startPgServer();
  } catch (err) {
    await killAll(spares);
    throw err;
  }
  const candidates = new Map<string, Candidate>();
  const intervals: Interval[] = [];
  const runs: Interval[] = [];
  const faults: FaultRecord[] = [];
  const starts: Start[] = [];
  const fences: { name: string; at: number }[] = [];
  const trace: string[] = [];
  const generation = new Map<string, number>();
  const leaves = { total: 0, clean: 0 };
  let started = 0;
  /** The sequence running (seeds each candidate's own random source). */
  let currentSeed = seeds[0] as number;
  let cleanExits = 0;
  let candidatesAtEnd = 0;

  const cfg = (proxy: FaultProxy, randomSeed: number): CandidateConfig => ({
    url: proxy.url(server.url),
    ...keys,
    healthIntervalMs,
    queryTimeoutMs,
    pollMs,
    acquireMode,
    workStopMs,
    takeoverDelayMs,
    randomSeed,
  });

  /** A booted process: the spare if one is ready, and another boots in the background. */
  const takeSpare = async (): Promise<Spare> => {
    const s = await (spare ?? boot());
    spare = boot();
    spare.catch(() => {}); // reported when taken
    spares.push(spare);
    return s;
  };

  /** Start a candidate (a new id, or a respawn's) in a booted process; resolves once its `start()` has. */
  const spawnCandidate = async (
    priority: number,
    id = `chaos-${started}`,
    booted?: Spare,
  ): Promise<Candidate> => {
    started++;
    // drawn before the first await: candidates spawned side by side (Promise.all) once all
    // read `started` after it, drew the same seed and so the same session tokens, and a
    // `drained` of one's lost session proved the drain of another's live one
    const randomSeed = (currentSeed * 31 + started) >>> 0;
    const { proc, exited } = booted ?? (await takeSpare());
    const proxy = await startFaultProxy({ host: server.host, port: server.port });
    const gen = (generation.get(id) ?? 0) + 1;
    generation.set(id, gen);
    const name = gen === 1 ? id : `${id}@${gen}`;
    const c: Candidate = {
      name,
      id,
      priority,
      proc,
      proxy,
      openSince: null,
      runSince: null,
      leaving: false,
      handoverResult: null,
      startedAt: 0,
      exited,
    };
    proc.on('message', (m: CandidateMessage) => {
      if (m.type === 'start') {
        c.openSince = m.at;
        starts.push({ name, id, at: m.at });
      } else if (m.type === 'end') {
        c.openSince = null;
        intervals.push({ id: name, start: m.start, end: m.end });
      } else if (m.type === 'runStart') {
        c.runSince = m.at;
      } else if (m.type === 'run') {
        c.runSince = null;
        runs.push({ id: name, start: m.start, end: m.end });
      } else if (m.type === 'fence') {
        fences.push({ name, at: m.at });
      } else if (m.type === 'handoverResult') {
        c.handoverResult?.(m.error);
      }
    });
    const ready = new Promise<void>((resolve, reject) => {
      proc.on('message', (m: CandidateMessage) => {
        if (m.type === 'ready') resolve();
      });
      proc.once('exit', (code) => reject(new Error(`candidate ${name} exited early (${code})`)));
    });
    candidates.set(name, c);
    c.startedAt = hrtimeMs();
    // the library's own randomness (its session marker token, the wait slice's ±10 %) is seeded too
    command(c, { type: 'start', cfg: cfg(proxy, randomSeed), id, priority });
    await ready;
    return c;
  };

  const live = (): Candidate[] => [...candidates.values()].filter((c) => !c.leaving);
  const open = (): Candidate[] => [...candidates.values()].filter((c) => c.openSince !== null);
  /** The candidate that started leading last (an earlier one may not have reported its end yet). */
  const leader = (): Candidate | undefined =>
    open().sort((x, y) => (y.openSince ?? 0) - (x.openSince ?? 0))[0];
  const command = (c: Candidate, cmd: ParentCommand) => {
    if (c.proc.connected) c.proc.send(cmd);
  };
  const topPriority = (): number => Math.max(...live().map((c) => c.priority));
  /** One leader, of the top priority among the candidates (with priorities off: one leader). */
  const settled = (): boolean => {
    const l = leader();
    return open().length === 1 && l !== undefined && !l.leaving && l.priority >= topPriority();
  };
  const view = (): string =>
    live()
      .map((c) => `${c.name}:${c.priority}${c.openSince !== null ? '*' : ''}`)
      .join(' ');

  /** The first leadership start after `since` (of a process other than `notName`). */
  const firstStart = (since: number, notName?: string): Start | undefined =>
    starts.find((s) => s.at > since && s.name !== notName);
  const waitForLeader = async (since: number, timeoutMs: number, notName?: string): Promise<Start | null> => {
    const deadline = hrtimeMs() + timeoutMs;
    while (hrtimeMs() < deadline) {
      const s = firstStart(since, notName);
      if (s) return s;
      await sleep(5);
    }
    return null;
  };

  /** SIGTERM (it shuts down and exits by itself) or SIGKILL; resolves with its exit code once gone. */
  const retire = async (c: Candidate, signal: 'SIGTERM' | 'SIGKILL'): Promise<number | null | 'timeout'> => {
    c.leaving = true;
    c.proc.kill(signal);
    const code = await Promise.race([c.exited, sleep(10_000).then(() => 'timeout' as const)]);
    if (code === 'timeout') {
      c.proc.kill('SIGKILL');
      await c.exited;
    }
    const now = hrtimeMs();
    // a dead process believes nothing: what it did not report ended when it exited
    if (c.openSince !== null) intervals.push({ id: c.name, start: c.openSince, end: now });
    if (c.runSince !== null) runs.push({ id: c.name, start: c.runSince, end: now });
    c.openSince = null;
    c.runSince = null;
    candidates.delete(c.name);
    await c.proxy.close();
    if (signal === 'SIGTERM') {
      leaves.total++;
      if (code === 0) leaves.clean++;
    }
    return code;
  };

  /** Candidates the leader could hand over to now: queued for the lock (wait mode) or with a session (poll mode). */
  const waitingIds = async (leaderId: string): Promise<string[]> => {
    const rows =
      acquireMode === 'wait'
        ? await adminQuery<{ application_name: string }>(
            server.url,
            `SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE l.locktype = 'advisory' AND l.classid = $1::int4::oid AND l.objid = $2::int4::oid
                AND l.objsubid = 2 AND NOT l.granted`,
            [keys.key1, keys.key2],
          )
        : await adminQuery<{ application_name: string }>(
            server.url,
            `SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'pgleaderlock:%'`,
          );
    const ids = new Set(rows.map((r) => r.application_name.slice('pgleaderlock:'.length)));
    return live()
      .filter((c) => c.id !== leaderId && ids.has(c.id))
      .map((c) => c.id);
  };
  /** Until every candidate but the leader waits (up to 2 s): false if not. */
  const everyoneWaits = async (): Promise<boolean> => {
    const until = hrtimeMs() + 2000;
    for (;;) {
      const leaderId = leader()?.id ?? '';
      const ids = new Set(await waitingIds(leaderId));
      if (live().every((c) => c.id === leaderId || ids.has(c.id))) return true;
      if (hrtimeMs() > until) return false;
      await sleep(20);
    }
  };
  const pickWaiting = async (leaderId: string, pick: number): Promise<string | null> => {
    const until = hrtimeMs() + 2000;
    for (;;) {
      const ids = await waitingIds(leaderId);
      if (ids.length > 0) return choose([...ids].sort(), pick) as string;
      if (hrtimeMs() > until) return null;
      await sleep(20);
    }
  };
  const notify = (payload: string) => adminQuery(server.url, 'SELECT pg_notify($1, $2)', [channel, payload]);

  try {
    // the first ones join side by side, with priorities drawn from the first sequence's seed
    const firstPriorities = initialPriorities(seeds[0] as number, opts.candidates, priorities);
    const booted = await Promise.all(first);
    await Promise.all(booted.map((b, i) => spawnCandidate(firstPriorities[i] ?? 0, undefined, b)));
    log(`${hrtimeMs().toFixed(1)} ${opts.candidates} candidates started`);
    if ((await waitForLeader(0, 10_000)) === null) throw new Error('no first leader');
    const endAt = opts.durationMs === undefined ? Number.POSITIVE_INFINITY : hrtimeMs() + opts.durationMs;
    /** The last fault was not followed by a top-priority leader in time (do not wait for one again). */
    let unsettled = false;
    const byName = (a: Candidate, b: Candidate): number => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
    /** Freeze a candidate (SIGSTOP, or a busy event loop); resolves once it runs again. */
    const freeze = (c: Candidate, step: Step): Promise<void> => {
      if (step.freezeHow === 'busy') {
        command(c, { type: 'freeze', ms: step.holdMs });
        return sleep(step.holdMs);
      }
      c.proc.kill('SIGSTOP');
      return sleep(step.holdMs).then(() => {
        if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGCONT');
      });
    };
    /** The network is back: the connections given up on are reset (as the peer's kernel would), new ones pass. */
    const heal = (c: Candidate): void => {
      c.proxy.reset();
      c.proxy.pass();
    };

    for (const plan of plans) {
      if (hrtimeMs() > endAt) break;
      const seed = plan.seed;
      currentSeed = seed;
      const described = plan.steps.map(describeStep);
      sequences.push({ seed, steps: described });
      log(`${hrtimeMs().toFixed(1)} sequence ${seed}: ${described.join('; ')}`);
      // each sequence starts with the configured number of candidates (churn moves it):
      // followers leave (the last by name), or candidates join with priorities from the seed
      const setup = new Random(seed ^ 0x85ebca6b);
      while (live().length > opts.candidates) {
        const l = leader();
        const extra = live()
          .filter((c) => c !== l)
          .sort(byName)
          .at(-1);
        if (extra === undefined) break;
        await retire(extra, 'SIGTERM');
      }
      while (live().length < opts.candidates)
        await spawnCandidate(priorities > 0 ? setup.int(0, priorities - 1) : 0);

      for (const step of plan.steps) {
        await sleep(step.pauseMs);
        // inject the next fault only once the view is settled: exactly one open interval
        // (a frozen process reports the end of its interval only when it thaws); with
        // priorities, of the top priority, unless that did not come after the last fault;
        // every candidate has its session (and so hears a release), so that a successor
        // that held a takeover delay after a clean handover is a finding, not a late connect
        let current: Candidate | undefined;
        let ready = false;
        const calmBy = hrtimeMs() + 30_000;
        for (;;) {
          ready = await everyoneWaits();
          const settleUntil = hrtimeMs() + 5000;
          const calm = (): boolean => open().length === 1 && (priorities === 0 || unsettled || settled());
          while (!calm() && hrtimeMs() < settleUntil) await sleep(10);
          current = leader();
          if (current && open().length === 1) break;
          if (hrtimeMs() > calmBy)
            throw new Error(
              `sequence seed ${seed}: no single leader within 30 s before ${describeStep(step)}`,
            );
          await sleep(20);
        }
        const kind = step.kind;
        const followers = live()
          .filter((c) => c !== current)
          .sort(byName);
        const victim = step.target === 'follower' ? (choose(followers, step.pick) ?? current) : current;
        const onLeader = victim === current;
        const before = view();
        const topBefore = priorities > 0 && settled();
        let at = hrtimeMs();
        let expectsChange = true;
        let expected: string | null = null;
        let target: string | null = onLeader ? null : victim.id;
        let notName: string | undefined;
        let holdFrom = at;
        /** A kill's or respawn's new process may be the top priority: from its start. */
        let settleFrom: number | null = null;
        let note = '';
        let pending: Promise<unknown> = Promise.resolve();
        log(`${hrtimeMs().toFixed(1)} [${seed}] ${describeStep(step)} on ${victim.name} [${view()}]`);
        /** A fault on a follower: the leader must stay until HOLD_MS after it ended. */
        const onFollower = (): void => {
          expectsChange = false;
          holdFrom = hrtimeMs();
        };
        switch (kind) {
          case 'kill':
            victim.leaving = true;
            victim.proc.kill('SIGKILL');
            // a dead process believes nothing and runs nothing: its interval and its run end now
            if (victim.openSince !== null)
              intervals.push({ id: victim.name, start: victim.openSince, end: at });
            if (victim.runSince !== null) runs.push({ id: victim.name, start: victim.runSince, end: at });
            victim.openSince = null;
            victim.runSince = null;
            await retire(victim, 'SIGKILL');
            if (onLeader) notName = victim.name;
            else onFollower();
            break;
          case 'stepDown':
            command(current, { type: 'stepDown' });
            break;
          case 'blackhole':
            victim.proxy.blackhole();
            if (!onLeader) {
              await sleep(step.holdMs);
              heal(victim);
              onFollower();
            }
            break;
          case 'freeze':
            if (onLeader) pending = freeze(victim, step);
            else {
              await freeze(victim, step);
              onFollower();
            }
            break;
          case 'terminate':
            if (onLeader) {
              const holder = (await lockHolders(server.url, keys.key1, keys.key2)).find((r) => r.granted);
              if (holder) await terminate(server.url, holder.pid);
            } else {
              await adminQuery(
                server.url,
                'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1',
                [`pgleaderlock:${victim.id}`],
              );
              onFollower();
            }
            break;
          case 'reset':
            victim.proxy.reset();
            if (!onLeader) onFollower();
            break;
          case 'restart':
            await server.restart('fast');
            break;
          case 'join': {
            target = `chaos-${started}`;
            expectsChange = step.priority > current.priority;
            if (expectsChange) expected = target;
            at = (await spawnCandidate(step.priority)).startedAt;
            holdFrom = hrtimeMs();
            note = `p${step.priority}`;
            break;
          }
          case 'leave':
          case 'respawn': {
            target = victim.id;
            const priority = kind === 'respawn' ? step.priority : 0;
            expectsChange = onLeader || (kind === 'respawn' && priority > current.priority);
            if (kind === 'respawn' && !onLeader && expectsChange) expected = victim.id;
            at = hrtimeMs();
            const gone = retire(victim, 'SIGTERM').then((code) => {
              if (code !== 0) note += ` ${victim.name} exited ${code}`;
            });
            if (kind === 'leave') pending = gone;
            else {
              // the same id comes back once the old process is gone
              await gone;
              settleFrom = (await spawnCandidate(priority, victim.id)).startedAt;
              note = `back as p${priority}`;
            }
            holdFrom = hrtimeMs();
            break;
          }
          case 'resign':
            at = hrtimeMs();
            await notify(requestPayload(null));
            break;
          case 'handover':
          case 'handoverTo': {
            target = await pickWaiting(current.id, step.pick);
            if (target === null) {
              note = 'no candidate waiting';
              break;
            }
            expected = target;
            at = hrtimeMs();
            if (kind === 'handover') await notify(requestPayload({ to: target }));
            else {
              const leaderNow = current;
              const result = new Promise<string | null>((resolve) => {
                leaderNow.handoverResult = resolve;
              });
              command(current, { type: 'handoverTo', to: target, timeoutMs: 2000 });
              pending = Promise.race([result, sleep(5000).then(() => 'no answer within 5 s')]).then(
                (error) => {
                  if (error !== null) note += ` handoverTo rejected: ${error}`;
                },
              );
            }
            break;
          }
        }
        let gapMs: number | null;
        let next: Start | null = null;
        if (expectsChange) {
          // after a kill the dead process cannot be the new leader; after a step-down in poll
          // mode the same process may win again after its back-off, which counts as a leader
          next = await waitForLeader(at, gapBoundMs[kind] + 2000, notName);
          gapMs = next === null ? null : next.at - at;
        } else {
          // the leader stays: no term may open until HOLD_MS after the fault ended (a follower
          // thawed, healed, exited; a candidate joined or left)
          await sleep(Math.max(0, holdFrom + HOLD_MS - hrtimeMs()));
          next = firstStart(at) ?? null;
          gapMs = next !== null ? next.at - at : current.openSince !== null ? 0 : null;
        }
        await pending;
        if (kind === 'blackhole' && onLeader) heal(current);
        if (kind === 'kill') settleFrom = (await spawnCandidate(step.priority)).startedAt;
        // priority churn: how soon a candidate of the top priority leads (the one that led
        // first may hand over once more)
        let settledMs: number | null = null;
        if (priorities > 0) {
          // a leader below the top priority that nothing moved stays (do not wait for it again)
          const from = settleFrom ?? at;
          const until = unsettled && firstStart(at) === undefined ? 0 : from + settleBoundMs[kind];
          while (!settled() && hrtimeMs() < until) await sleep(5);
          const l = leader();
          if (settled() && l?.openSince != null) settledMs = Math.max(0, l.openSince - from);
          unsettled = settledMs === null;
        }
        const fenced =
          next !== null && fences.some((f) => f.name === next.name && f.at > at && f.at <= next.at);
        const record: FaultRecord = {
          kind,
          seed,
          step: describeStep(step),
          onLeader,
          at,
          gapMs,
          leader: `${current.id}:${current.priority}`,
          target,
          expectsChange,
          expected,
          next: next === null ? (gapMs === 0 ? current.id : null) : next.id,
          fenced,
          ready,
          topBefore,
          settledMs,
          note: note.trim(),
        };
        faults.push(record);
        trace.push(
          `[${seed}] ${kind}${target === null ? '' : ` ${target}`}${note ? ` (${record.note})` : ''}: [${before}] -> first ${
            record.next ?? 'none'
          } after ${gapMs === null ? '-' : gapMs.toFixed(0)} ms${fenced ? ' (fenced)' : ''}${ready ? '' : ' (not all waiting before)'}${
            priorities > 0
              ? `, top priority leads after ${settledMs === null ? '-' : settledMs.toFixed(0)} ms`
              : ''
          } [${view()}]`,
        );
      }
    }

    // clean shutdown: every child must release and exit by itself
    const remaining = [...candidates.values()];
    candidatesAtEnd = remaining.length;
    for (const c of remaining) command(c, { type: 'shutdown' });
    const codes = await Promise.all(
      remaining.map((c) => Promise.race([c.exited, sleep(10_000).then(() => 'timeout' as const)])),
    );
    cleanExits = codes.filter((c) => c === 0).length;
    const now = hrtimeMs();
    for (const c of remaining) {
      if (c.openSince !== null) intervals.push({ id: c.name, start: c.openSince, end: now });
      if (c.runSince !== null) runs.push({ id: c.name, start: c.runSince, end: now });
    }
  } finally {
    for (const c of candidates.values()) {
      if (c.proc.exitCode === null && c.proc.signalCode === null) c.proc.kill('SIGKILL');
      await c.proxy.close();
    }
    await killAll(spares);
    await server.dispose();
  }

  return {
    kinds,
    faults,
    intervals,
    overlaps: findOverlaps(intervals, faults),
    runs,
    runOverlaps: findOverlaps(runs, faults),
    gapBoundMs,
    settleBoundMs,
    serverReleaseMs,
    workStopMs,
    takeoverDelayMs,
    covered,
    priorities,
    cleanExits,
    candidatesAtEnd,
    leaves,
    candidatesStarted: started,
    trace,
    sequences,
  };
}

/** Overlaps between intervals of different candidates (harness/overlaps.ts), attributed to the fault before them. */
export function findOverlaps(intervals: Interval[], faults: FaultRecord[]): Overlap[] {
  return overlapsOf(intervals, (x) => x.id).map(({ a, b, ms }) => ({
    a: a.id,
    b: b.id,
    ms,
    fault: [...faults].reverse().find((f) => f.at <= b.start)?.kind ?? 'none',
    seed: [...faults].reverse().find((f) => f.at <= b.start)?.seed ?? null,
  }));
}

/**
 * The first leader after a fault was not the one it had to be: the named successor, a
 * joiner above the leader, or (a follower left, a lower priority joined) the leader itself.
 */
export function unexpectedLeader(f: FaultRecord): boolean {
  if (f.gapMs === null) return false; // reported as no leader
  if (!f.expectsChange) return f.next !== f.leader.slice(0, f.leader.lastIndexOf(':'));
  return f.expected !== null && f.next !== f.expected;
}

/** Markdown table of a report. */
export function formatReport(r: ChaosReport): string {
  const churn = r.priorities > 0;
  const lines = [
    `| fault | injected | overlaps | max overlap (ms) | run overlaps | max gap without a leader (ms) | gap bound (ms) |${
      churn
        ? ' first leader not the expected one | fenced after a clean handover | max until the top priority leads (ms) | bound (ms) | top priority not leading within the bound |'
        : ''
    }`,
    `|---|---|---|---|---|---|---|${churn ? '---|---|---|---|---|' : ''}`,
  ];
  // a fault with no leader after it counts as an infinite gap
  const maxGap = (xs: (number | null)[]): string =>
    xs.length ? Math.max(...xs.map((x) => x ?? Number.POSITIVE_INFINITY)).toFixed(0) : '-';
  const maxKnown = (xs: (number | null)[]): string => {
    const known = xs.filter((x) => x !== null);
    return known.length ? Math.max(...known).toFixed(0) : '-';
  };
  for (const k of r.kinds) {
    const fs = r.faults.filter((f) => f.kind === k);
    const os = r.overlaps.filter((o) => o.fault === k);
    const extra = churn
      ? ` ${fs.filter(unexpectedLeader).length} | ${CLEAN.has(k) ? fs.filter((f) => f.expectsChange && f.ready && f.fenced).length : 'n/a'} | ${maxKnown(
          fs.map((f) => f.settledMs),
        )} | ${r.settleBoundMs[k]} | ${fs.filter((f) => f.settledMs === null).length} |`
      : '';
    lines.push(
      `| ${k}${r.covered.has(k) ? '' : ' (not covered: no takeover delay)'} | ${fs.length} | ${os.length} | ${
        os.length ? Math.max(...os.map((o) => o.ms)).toFixed(1) : '0'
      } | ${r.runOverlaps.filter((o) => o.fault === k).length} | ${maxGap(fs.map((f) => f.gapMs))} | ${r.gapBoundMs[k]} |${extra}`,
    );
  }
  return lines.join('\n');
}
