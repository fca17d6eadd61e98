/**
 * Candidates in processes of their own (test/fixtures/takeover-delay-candidate.fixture.ts),
 * for the takeover-delay and proof-of-drain tests. Each reports over IPC, on the machine's
 * monotonic clock: `run-start`, `run-end`, `acquired`, `delayed`, `ready`.
 */
import { type ChildProcess, fork } from 'node:child_process';
import path from 'node:path';
import { useChildren } from './children.js';
import { databaseUrl, randomKeys } from './db.js';
import { fixtureScript } from './fixture-bundle.js';
import { type Overlap, overlapsOf, type Span } from './overlaps.js';

const FIXTURE = path.join(import.meta.dirname, '../fixtures/takeover-delay-candidate.fixture.ts');

export interface Report {
  ev: string;
  id: string;
  at: number;
  term?: number;
}

export interface CandidateOptions {
  mode: 'wait' | 'poll';
  takeoverDelayMs: number;
  n?: number;
  /** After a loss, join again (the default of a lock); false: stay out. */
  autoReacquire?: boolean;
  /** How long the candidates' work takes to stop after its term's signal aborts. */
  stopMs: number;
}

/** The default `stopMs`: the candidates' work takes 200 ms to stop after its abort. */
export const STOP_MS = 200;

/**
 * Registers the afterEach that ends the processes; returns the factory:
 * `candidates(mode, takeoverDelayMs, n = 2, autoReacquire = false, stopMs = STOP_MS)`.
 */
export function useCandidates(tag: () => string) {
  const track = useChildren();
  return (
    mode: CandidateOptions['mode'],
    takeoverDelayMs: number,
    n = 2,
    autoReacquire = false,
    stopMs = STOP_MS,
  ) => {
    const keys = randomKeys();
    const reports: Report[] = [];
    const procs = new Map<string, ChildProcess>();
    for (let i = 0; i < n; i++) {
      const id = `${tag()}-c${i}`;
      const proc = fork(
        fixtureScript(FIXTURE).script,
        [
          JSON.stringify({
            url: databaseUrl(),
            ...keys,
            id,
            acquireMode: mode,
            takeoverDelayMs,
            stopMs,
            autoReacquire,
          }),
        ],
        { execArgv: fixtureScript(FIXTURE).execArgv, stdio: ['ignore', 'inherit', 'inherit', 'ipc'] },
      );
      proc.on('message', (m: Report) => reports.push(m));
      track(proc);
      procs.set(id, proc);
    }
    const runs = (ev: 'run-start' | 'run-end') => reports.filter((r) => r.ev === ev);
    return { keys, reports, procs, runs };
  };
}

/** A run of a candidate's work, from its reports (`run-start`, `run-end` of one term). */
export interface RunSpan extends Span {
  readonly owner: string;
  readonly term: number | undefined;
}

/**
 * The runs the reports describe, each from its `run-start` to its term's `run-end` (null
 * while it goes on), on the machine's monotonic clock every process reports on.
 */
export function runSpans(reports: readonly Report[]): RunSpan[] {
  return reports
    .filter((r) => r.ev === 'run-start')
    .map((start) => ({
      owner: start.id,
      term: start.term,
      start: start.at,
      end: reports.find((r) => r.ev === 'run-end' && r.id === start.id && r.term === start.term)?.at ?? null,
    }));
}

/** Runs of two candidates that overlapped, by the one overlap detector (overlaps.ts). */
export function runOverlaps(reports: readonly Report[]): Overlap<RunSpan>[] {
  return overlapsOf(runSpans(reports), (s) => s.owner);
}
